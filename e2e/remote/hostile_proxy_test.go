package remote

// Issue 29, "Hostile host III": a compromised host steals the broker key
// the literal way, with a proxy in front of its own namespace socket that
// reads the keeper's registration as it passes, and then floods the
// desktop with sudo requests in olliesrv's name. The desktop's per-host
// budget (broker/desktop/budget.go) is all that stands between that host
// and the person's attention.
//
// The attacker is this test binary, copied where the host's user can run
// it and started as that user: init hands it to stealMain when
// stealModeEnv is set, before the tests start.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/await"
	"ollie/internal/lab"
	"ollie/internal/sshlab"
)

const (
	stealModeEnv = "OLLIE_TEST_STEAL" // "proxy" or "flood"
	stealDirEnv  = "OLLIE_TEST_STEAL_DIR"
	stealSockEnv = "OLLIE_TEST_STEAL_SOCK" // proxy: the namespace socket to stand in front of
	stealPathEnv = "OLLIE_TEST_STEAL_PATH" // flood: the broker socket
	stealKeyEnv  = "OLLIE_TEST_STEAL_KEY"  // flood: its key, hex
	stealNEnv    = "OLLIE_TEST_STEAL_N"    // flood: how many requests
)

// The files the attacker leaves in its directory for the test.
const (
	stealReady   = "ready"        // the proxy listens on the socket's path
	stealStolen  = "stolen"       // the last registration seen: "PATH KEY"
	stealResults = "flood.json"   // the flood's answers
	stealLog     = "attacker.log" // both modes' stderr
)

func init() {
	mode := os.Getenv(stealModeEnv)
	if mode == "" {
		return
	}
	os.Exit(stealMain(mode, os.Getenv(stealDirEnv)))
}

func stealMain(mode, dir string) int {
	switch mode {
	case "proxy":
		return stealProxy(os.Getenv(stealSockEnv), dir)
	case "flood":
		n, _ := strconv.Atoi(os.Getenv(stealNEnv))
		return stealFlood(os.Getenv(stealPathEnv), os.Getenv(stealKeyEnv), n, dir)
	}
	fmt.Fprintf(os.Stderr, "steal: unknown mode %q\n", mode)
	return 2
}

// registration is what the keeper writes to bypass/broker
// (tunnel/keeper/register.go).
var registration = regexp.MustCompile(`^(/\S*/broker-[0-9a-f]+) key=([0-9a-f]+)$`)

// stealProxy stands in front of the namespace socket at sock: every
// connection to that path is forwarded to the real socket, now beside it,
// and every Twrite on the way is looked at for a registration.
func stealProxy(sock, dir string) int {
	aside := sock + ".real"
	fi, err := os.Stat(sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "steal:", err)
		return 1
	}
	// The real socket gets its second name first, and the proxy's socket
	// then replaces its first by rename: no connect on the path finds
	// nothing there, so neither the keeper nor olliesrv start notices.
	if err := os.Link(sock, aside); err != nil {
		fmt.Fprintln(os.Stderr, "steal:", err)
		return 1
	}
	tmp := sock + ".proxy"
	os.Remove(tmp)
	l, err := net.Listen("unix", tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "steal:", err)
		return 1
	}
	os.Chmod(tmp, fi.Mode().Perm())
	if err := os.Rename(tmp, sock); err != nil {
		fmt.Fprintln(os.Stderr, "steal:", err)
		return 1
	}
	os.WriteFile(filepath.Join(dir, stealReady), nil, 0600)
	var mu sync.Mutex
	steal := func(data []byte) {
		m := registration.FindSubmatch(data)
		if m == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stderr, "steal: the keeper registered %s\n", m[1])
		// Whole or not at all: the test reads it while the proxy runs.
		p := filepath.Join(dir, stealStolen)
		os.WriteFile(p+".tmp", fmt.Appendf(nil, "%s %s\n", m[1], m[2]), 0600)
		os.Rename(p+".tmp", p)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "steal:", err)
			return 1
		}
		go stealForward(c, aside, steal)
	}
}

// stealForward passes c's bytes to the socket at aside and back, as they
// are, handing the data of each Twrite from c to steal.
func stealForward(c net.Conn, aside string, steal func([]byte)) {
	defer c.Close()
	up, err := net.Dial("unix", aside)
	if err != nil {
		fmt.Fprintln(os.Stderr, "steal:", err)
		return
	}
	defer up.Close()
	go func() {
		io.Copy(c, up)
		c.Close()
	}()
	const twrite = 118
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		size := binary.LittleEndian.Uint32(hdr)
		if size < 7 || size > 16<<20 {
			// Not a frame olliesrv would take: it is olliesrv's to refuse.
			up.Write(hdr)
			io.Copy(up, c)
			return
		}
		frame := make([]byte, size)
		copy(frame, hdr)
		if _, err := io.ReadFull(c, frame[4:]); err != nil {
			return
		}
		// size[4] type[1] tag[2] fid[4] offset[8] count[4] data[count]
		if frame[4] == twrite && size >= 23 {
			if n := binary.LittleEndian.Uint32(frame[19:23]); uint64(n) <= uint64(size-23) {
				steal(frame[23 : 23+n])
			}
		}
		if _, err := up.Write(frame); err != nil {
			return
		}
	}
}

// stealAnswer is what became of one of the flood's requests.
type stealAnswer struct {
	Sent, Answered time.Duration // since the flood began
	Decision       broker.Decision
	Reason         string
	Err            string
}

// stealFlood sends n sudo requests in olliesrv's name to the broker
// socket at path, each with a fresh id, in a session of its own (so that
// no two are the same request, which the desktop would ask once) and on a
// connection of its own, stealGap apart (a stream, not one burst, that
// the honest host's request meets), all waiting for their answers at
// once; an approved one is ended without a password ask.
func stealFlood(path, keyHex string, n int, dir string) int {
	key, err := hex.DecodeString(keyHex)
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "steal: key %q, n %d: %v\n", keyHex, n, err)
		return 2
	}
	res := make([]stealAnswer, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	pace := time.NewTicker(stealGap)
	defer pace.Stop()
	for i := range n {
		res[i].Sent = time.Since(t0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &res[i]
			c, err := net.DialTimeout("unix", path, 5*time.Second)
			if err != nil {
				a.Err = err.Error()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			req := &broker.Request{
				ID:         broker.NewID(),
				Session:    fmt.Sprintf("stolen-%02d", i),
				Tool:       "root_id",
				Variant:    -1,
				Executable: "/bin/sh",
				Args:       []byte(`{}`),
				Cwd:        "/",
				Sudo:       true,
			}
			cv, ans, err := broker.AskKeyed(ctx, c, req, key)
			a.Answered = time.Since(t0)
			if err != nil {
				a.Err = err.Error()
				return
			}
			a.Decision, a.Reason = ans.Decision, ans.Reason
			cv.Close("not run")
		}()
		<-pace.C
	}
	wg.Wait()
	b, _ := json.Marshal(res)
	if err := os.WriteFile(filepath.Join(dir, stealResults), b, 0600); err != nil {
		fmt.Fprintln(os.Stderr, "steal:", err)
		return 1
	}
	return 0
}

// attacker runs this test binary as a host's user, from a directory of
// that user's where it leaves its files.
type attacker struct {
	t   *testing.T
	h   *sshlab.Host
	dir string
	exe string
}

func newAttacker(t *testing.T, h *sshlab.Host) *attacker {
	a := &attacker{t: t, h: h, dir: filepath.Join(h.Home, "ollie-steal")}
	os.RemoveAll(a.dir)
	if err := os.MkdirAll(a.dir, 0700); err != nil {
		t.Fatal(err)
	}
	// The test binary sits in a directory of root's that the user cannot
	// enter.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	a.exe = filepath.Join(a.dir, "attacker")
	if err := os.WriteFile(a.exe, b, 0700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), a.dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(a.dir, stealLog))
			t.Logf("the attacker's log:\n%s", b)
		}
	})
	return a
}

func (a *attacker) cmd(mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(a.exe)
	cmd.Dir = a.dir
	cmd.Env = append([]string{stealModeEnv + "=" + mode, stealDirEnv + "=" + a.dir, "HOME=" + a.h.Home, "PATH=/usr/bin:/bin"}, env...)
	logf, err := os.OpenFile(filepath.Join(a.dir, stealLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(a.h.UID), Gid: uint32(a.h.GID)},
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// proxy puts the proxy in front of sock, until the test ends: then the
// proxy is killed and the real socket has its name back.
func (a *attacker) proxy(sock string) {
	t := a.t
	cmd := a.cmd("proxy", stealSockEnv+"="+sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if _, err := os.Stat(sock + ".real"); err == nil {
			if err := os.Rename(sock+".real", sock); err != nil {
				t.Errorf("putting the namespace socket back: %v", err)
			}
		}
	})
	await.Until(t, 20*time.Second, "the proxy did not take the socket's place", func() bool {
		_, err := os.Stat(filepath.Join(a.dir, stealReady))
		return err == nil
	}, func() string {
		b, _ := os.ReadFile(filepath.Join(a.dir, stealLog))
		return string(b)
	})
}

// stolen waits for the proxy to have seen a registration.
func (a *attacker) stolen(within time.Duration) (path, key string) {
	a.t.Helper()
	await.Until(a.t, within, "no registration passed the proxy", func() bool {
		b, err := os.ReadFile(filepath.Join(a.dir, stealStolen))
		if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
			path, key = f[0], f[1]
			return true
		}
		return false
	})
	return path, key
}

// flood runs the flood and returns its answers.
func (a *attacker) flood(path, key string, n int, within time.Duration) []stealAnswer {
	a.t.Helper()
	cmd := a.cmd("flood", stealPathEnv+"="+path, stealKeyEnv+"="+key, stealNEnv+"="+strconv.Itoa(n))
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	stop := time.AfterFunc(within, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	stop.Stop()
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(a.dir, stealLog))
		a.t.Fatalf("the flood: %v\n%s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(a.dir, stealResults))
	if err != nil {
		a.t.Fatal(err)
	}
	var res []stealAnswer
	if err := json.Unmarshal(b, &res); err != nil {
		a.t.Fatal(err)
	}
	return res
}

// newStolenKeyLab is newSudoLab's lab with a second host, h12, that the
// same keeper holds: the honest host, whose own budget the flood from
// h11 must leave alone.
func newStolenKeyLab(t *testing.T) *sudoLab {
	lab.Root(t, "the hostile-host tests run sshd hosts, their users and sudo")
	pwb := make([]byte, 12)
	rand.Read(pwb)
	s := &sudoLab{t: t, password: "Pw-" + hex.EncodeToString(pwb)}
	s.lab = sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orsteal", Password: s.password, Sudoers: true})
	s.h = s.lab.Host(0)
	s.remotes = append(s.remotes, newRemote(t, s.lab))
	program, log := askpass(t, privateDir(t), s.password, true)
	s.asks, s.logs = append(s.asks, program), append(s.logs, log)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("keeper.log:\n%s", keeperLog(s.remotes[0]))
		for _, h := range s.lab.Hosts {
			b, _ := os.ReadFile(filepath.Join(h.Home, ".local", "state", "ollie", "olliesrv.log"))
			t.Logf("%s's olliesrv.log:\n%s", h.Name, b)
		}
	})
	s.data = copyData(t, map[string]string{
		"root_id.meta": `{"description": "Print the user id the tool runs as.", "sudo": true, "readOnly": true}`,
		"root_id":      "#!/bin/sh\nid -u\n",
	})
	cmd := s.remotes[0].cmd("-bin", binDir, "-data", s.data, "deploy", "h11", "h12")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	cmd = s.remotes[0].cmd("up", "h11", "h12")
	cmd.Env = append(cmd.Env, "OLLIE_ASKPASS="+s.asks[0])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	return s
}

// startOn starts host's olliesrv (or finds it) and returns its namespace
// socket.
func startOn(t *testing.T, l *sshlab.Lab, host string) string {
	t.Helper()
	out, err := l.SSH(host, `exec "$HOME/.local/share/ollie/current/olliesrv" start`).CombinedOutput()
	f := strings.Fields(string(out))
	if err != nil || len(f) < 4 {
		t.Fatalf("%s: olliesrv start: %v\n%s", host, err, out)
	}
	return f[1]
}

// waitBroker waits for the daemon on sock to list want (any broker when
// "").
func waitBroker(t *testing.T, host, sock, want string, within time.Duration) {
	t.Helper()
	var bs []string
	var err error
	await.Until(t, within, fmt.Sprintf("%s never listed broker %q", host, want), func() bool {
		bs, _, err = brokers(sock)
		return err == nil && len(bs) > 0 && (want == "" || slices.Contains(bs, want))
	}, func() string { return fmt.Sprintf("it lists %q (%v)", bs, err) })
}

// honestSudo has h12's olliesrv ask for root_id through its gate, and
// checks that it ran as root, asked once on the desktop.
func honestSudo(t *testing.T, s *sudoLab) (time.Duration, error) {
	asked := func() int {
		b, _ := os.ReadFile(s.logs[0])
		return strings.Count(string(b), "h12 asks to run as root")
	}
	before := asked()
	t0 := time.Now()
	out, ran := askThroughGate(t, s.lab, "h12", "root_id", `{}`)
	took := time.Since(t0)
	if !ran || !slices.Contains(strings.Fields(out), "0") {
		return took, fmt.Errorf("h12's root_id did not run as root (ran %v):\n%s", ran, out)
	}
	if n := asked() - before; n != 1 {
		return took, fmt.Errorf("h12's root_id was asked %d times on the desktop, want once", n)
	}
	return took, nil
}

// The flood a host with the stolen key sends: the desktop's budget for a
// minute many times over, within 10 s (7.35 s).
const (
	stolenFlood = 50
	stealGap    = 150 * time.Millisecond
)

// TestHostileStolenKey: h11's user puts a proxy in front of its olliesrv's
// namespace socket, reads the broker key in the keeper's registration as
// it passes, and sends the desktop 50 sudo requests in olliesrv's name.
// The desktop puts at most its budget of them to the person, refuses the
// rest saying why, tells the person once, keeps its memory, and answers
// h12's request meanwhile.
func TestHostileStolenKey(t *testing.T) {
	// No policy file: the default budget, the one a desktop has.
	testPolicy(t)
	s := newStolenKeyLab(t)
	r := s.remotes[0]
	sock := startOn(t, s.lab, "h11")
	sock12 := startOn(t, s.lab, "h12")
	waitBroker(t, "h11", sock, "", 30*time.Second)
	waitBroker(t, "h12", sock12, "", 30*time.Second)
	kpid := keeperPid(r.dir)
	if kpid == 0 {
		t.Fatalf("no keeper runs for %s", r.dir)
	}
	mem := watchMem(kpid)
	defer mem.stop()

	// The honest host's request, before any attack: what it costs on this
	// machine as it is loaded now.
	base, err := honestSudo(t, s)
	if err != nil {
		t.Fatalf("before the attack: %v", err)
	}

	a := newAttacker(t, s.h)
	a.proxy(sock)
	// The keeper's SSH connection drops (its 9P connection went in
	// before the proxy): it connects again, through the proxy, and
	// registers a fresh socket with a fresh key.
	if n := s.h.KillConnections(); n == 0 {
		t.Fatal("no ssh connection to kill")
	}
	path, key := a.stolen(30 * time.Second)
	waitBroker(t, "h11", sock, path, 30*time.Second)
	t.Logf("stolen: the registration of %s, key %s…", path, key[:8])

	asked0 := s.asked(0)
	notices0 := budgetNotices(keeperLog(r))
	type honest struct {
		began, took time.Duration
		err         error
	}
	honestDone := make(chan honest, 1)
	t0 := time.Now()
	go func() {
		// Into the flood, once h11 has had its budget, so that the flood
		// goes on all around it.
		budgetSpent, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		await.Poll(budgetSpent, func() bool { return s.asked(0)-asked0 >= desktop.DefaultPromptsPerMinute })
		cancel()
		began := time.Since(t0)
		took, err := honestSudo(t, s)
		honestDone <- honest{began, took, err}
	}()
	res := a.flood(path, key, stolenFlood, 3*time.Minute)
	floodEnd := time.Now() // the attacker has every answer
	hon := <-honestDone

	lastSent := checkStolenFlood(t, res, s.asked(0)-asked0)

	checkOneBudgetNotice(t, r, len(notices0), floodEnd)

	// The honest host's request went through the same keeper and the same
	// askpass while the flood was answered: h12's budget is its own, and
	// the flood costs the desktop no more than h11's few prompts and a
	// refusal each, so it may take what it took before the attack and
	// more on a loaded machine (twice, plus 5 s), never a wait behind the
	// flood's requests.
	bound := 2*base + 5*time.Second
	t.Logf("figure: h12's root_id, approved on the desktop: %v before the attack, %v during it (bound %v), asked %v into the flood",
		base.Round(time.Millisecond), hon.took.Round(time.Millisecond), bound.Round(time.Millisecond), hon.began.Round(time.Millisecond))
	if hon.began >= lastSent {
		// The flood's times count from its own start, after t0: this can
		// only take the honest request for later than it was.
		t.Errorf("h12's request was asked %v after the flood began, after its last request (%v): not meanwhile", hon.began, lastSent)
	}
	if hon.err != nil {
		t.Errorf("during the flood: %v", hon.err)
	} else if hon.took > bound {
		t.Errorf("h12's request took %v during the flood, want within %v", hon.took, bound)
	}

	peak := mem.Peak()
	t.Logf("figure: the keeper's memory: peak %s (idle %s)", mib(peak), mib(mem.idle))
	if peak > memBound {
		t.Errorf("the keeper reached %s, over the bound of %s", mib(peak), mib(memBound))
	}
}

// checkStolenFlood checks the answers to the stolen key's flood, the
// desktop's askpass having been asked asked times: at most the budget put
// to the person, every other request refused over the budget, saying so.
// It returns when the last request was sent, from the first.
func checkStolenFlood(t *testing.T, res []stealAnswer, asked int) (lastSent time.Duration) {
	t.Helper()
	var shown, over int
	var lastAnswer time.Duration
	for i, ans := range res {
		lastSent, lastAnswer = max(lastSent, ans.Sent), max(lastAnswer, ans.Answered)
		switch {
		case ans.Err != "":
			t.Errorf("request %d got no answer: %s", i, ans.Err)
		case ans.Decision == broker.Deny && strings.Contains(ans.Reason, "denied by the desktop's limit for this host") &&
			strings.Contains(ans.Reason, fmt.Sprintf("at most %d prompts a minute", desktop.DefaultPromptsPerMinute)):
			over++
		case ans.Decision == broker.Once:
			// The askpass approves: the person was asked.
			shown++
		default:
			t.Errorf("request %d: %s, %q: neither asked nor refused over the budget", i, ans.Decision, ans.Reason)
		}
	}
	t.Logf("figure: %d requests sent in %v, all answered %v after the first; %d asked on the desktop (askpass: %d), %d refused over the budget",
		len(res), lastSent.Round(time.Millisecond), lastAnswer.Round(time.Millisecond), shown, asked, over)
	if len(res) != stolenFlood || lastSent > 10*time.Second {
		t.Errorf("the flood sent %d requests in %v, want %d within 10s", len(res), lastSent, stolenFlood)
	}
	// The budget counts what is put to a person in any minute, and every
	// request was sent within 10 s of the first, with no prompt of h11's
	// before them: no more may reach the askpass.
	if asked > desktop.DefaultPromptsPerMinute {
		t.Errorf("the desktop's askpass was asked %d times for h11's stolen key, want at most %d (desktop.DefaultPromptsPerMinute)", asked, desktop.DefaultPromptsPerMinute)
	}
	if shown != asked {
		t.Errorf("%d requests were approved, but the askpass was asked %d times", shown, asked)
	}
	if over != len(res)-asked {
		t.Errorf("%d requests were refused over the budget, want every one not asked (%d)", over, len(res)-asked)
	}
	return lastSent
}

// checkOneBudgetNotice checks that r's keeper logs, after its first
// before notices, one over-budget notice for the burst that ended at
// floodEnd, naming h11 and the budget.
func checkOneBudgetNotice(t *testing.T, r *remote, before int, floodEnd time.Time) {
	t.Helper()
	// One notice for the burst: it is told a second after the burst's
	// first refusal (Budget.NoticeDelay), and the burst lasts until a
	// minute passes without one; 3 s after the last answer a second
	// notice would have been logged.
	await.For(t.Context(), time.Until(floodEnd.Add(3*time.Second)))
	var notices []string
	logged, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	await.Poll(logged, func() bool {
		notices = budgetNotices(keeperLog(r))[before:]
		return len(notices) > 0
	})
	if len(notices) != 1 {
		t.Errorf("the keeper logged %d over-budget notices for the burst, want one:\n%s", len(notices), strings.Join(notices, "\n"))
	} else {
		t.Logf("figure: the notice: %s", notices[0])
		if !strings.Contains(notices[0], "host=h11") || !strings.Contains(notices[0], fmt.Sprintf("per_minute=%d", desktop.DefaultPromptsPerMinute)) {
			t.Errorf("the notice does not name h11 and the budget: %s", notices[0])
		}
	}
}

// budgetNotices are the keeper's over-budget notices in log
// (broker/desktop/relay.go, ShowNotice).
func budgetNotices(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "a host is over its prompt budget") {
			out = append(out, l)
		}
	}
	return out
}
