package remote

// The hostile-host harness: a lab with a hostile host (h11, whose olliesrv
// is the fake in hostile_fake_test.go) and an honest one (h12, the real
// olliesrv deployed), the real ollie-remote on the desktop (keeper, up,
// deploy, status, ollie -H), and "ollie-remote broker" on a pseudo-terminal
// whose screen a responder reads and answers as a person would.
//
// Each attack checks what issue 11 asks of every one: the honest host keeps
// its tunnel and gets its approval prompt in time, the keeper (and the
// terminal broker) stay within a memory bound, and no escape byte from the
// host reaches the terminal.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/creack/pty"

	"ollie/broker"
	"ollie/internal/await"
	"ollie/internal/lab"
	"ollie/internal/sshlab"
	"ollie/ns/client"
	"ollie/tunnel/deploy"
	"ollie/tunnel/keeper"
)

// memBound is what the keeper and the terminal broker may reach under any
// attack (VmHWM); memKill is where the harness kills a process that is
// past all hope, so that a hole does not take the machine with it.
const (
	memBound = 200 << 20
	memKill  = 1 << 30
)

// hostileLab is the two hosts, set up once for every attack.
type hostileLab struct {
	lab      *sshlab.Lab
	bad      *sshlab.Host // h11: the fake olliesrv
	good     *sshlab.Host // h12: the real one
	ver      string       // the version deploy would install: the fake sits there
	root     string       // h11's ~/.local/share/ollie
	manifest string       // what h11 would say if it held exactly the desktop's deploy.Bundle
	bundle   *deploy.Bundle
}

func startHostileLab(t *testing.T) *hostileLab {
	lab.Root(t, "the hostile-host tests run sshd hosts and their users")
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	l := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orhost"})
	hl := &hostileLab{lab: l, bad: l.Host(0), good: l.Host(1)}
	for _, h := range l.Hosts {
		hl.wipe(t, h)
	}
	t.Cleanup(func() {
		hl.killFakes()
		l.SSH(hl.good.Name, ".local/share/ollie/current/olliesrv stop").Run()
	})

	// The honest host: the real olliesrv, deployed as a person would.
	dir := t.TempDir()
	cmd := exec.Command(remoteBin, "-F", l.ConfigFile, "-bin", binDir, "-data", dataDir, "deploy", hl.good.Name)
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+dir, "SSH_AUTH_SOCK=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy %s: %v\n%s", hl.good.Name, err, out)
	}

	// The hostile host: this test binary where deploy would put the
	// version the desktop holds, current pointing at it.
	plat := runtime.GOOS + "/" + runtime.GOARCH
	b, err := deploy.LoadBundle(binDir, dataDir, plat)
	if err != nil {
		t.Fatal(err)
	}
	hl.bundle = b
	hl.ver = deploy.VersionOf(b.Bins[plat])
	hl.root = filepath.Join(hl.bad.Home, ".local/share/ollie")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(hl.root, hl.ver, "olliesrv")
	os.MkdirAll(filepath.Dir(fake), 0755)
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, data, 0755); err != nil {
		t.Fatal(err)
	}
	os.Symlink(hl.ver, filepath.Join(hl.root, "current"))
	hl.chown(filepath.Join(hl.bad.Home, ".local"))

	m := deploy.Manifest{Root: hl.root, Current: hl.ver, Versions: map[string]string{hl.ver: b.Bins[plat].SHA256}, Installed: true}
	m.Data = map[string]deploy.File{}
	for rel, f := range b.Data {
		m.Data[rel] = deploy.File{SHA256: f.SHA256, Mode: f.Mode}
	}
	mb, _ := json.Marshal(m)
	hl.manifest = string(mb)
	return hl
}

// wipe gives a lab user a home with nothing of ollie in it.
func (hl *hostileLab) wipe(t *testing.T, h *sshlab.Host) {
	if _, err := os.Stat(filepath.Join(h.Home, ".local/share/ollie/current/olliesrv")); err == nil && h == hl.good {
		hl.lab.SSH(h.Name, ".local/share/ollie/current/olliesrv stop").Run()
	}
	if h == hl.bad {
		hl.killFakes()
	}
	for _, p := range []string{".local", ".config", ".cache"} {
		os.RemoveAll(filepath.Join(h.Home, p))
	}
}

func (hl *hostileLab) chown(p string) {
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", hl.bad.UID, hl.bad.GID), p).Run()
}

func (hl *hostileLab) stateDir() string { return filepath.Join(hl.bad.Home, ".cache", "ollie-fake") }

// killFakes ends every fake process, by the pids they recorded.
func (hl *hostileLab) killFakes() {
	ents, _ := os.ReadDir(filepath.Join(hl.stateDir(), "pids"))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmd, []byte("olliesrv")) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// script puts sc in place for the fake's next runs, with a fresh state
// directory and no fake left running.
func (hl *hostileLab) script(t *testing.T, sc fakeScript) {
	hl.killFakes()
	os.RemoveAll(hl.stateDir())
	os.MkdirAll(filepath.Join(hl.stateDir(), "pids"), 0755)
	hl.chown(filepath.Join(hl.bad.Home, ".cache"))
	b, _ := json.Marshal(sc)
	p := filepath.Join(hl.root, hl.ver, fakeScriptName)
	if err := os.WriteFile(p, b, 0644); err != nil {
		t.Fatal(err)
	}
}

// fakeEvents is the fake's log so far.
func (hl *hostileLab) fakeEvents() string {
	b, _ := os.ReadFile(filepath.Join(hl.stateDir(), "fake.log"))
	return string(b)
}

// waitEvent waits for a line of the fake's log matching re and returns
// its submatches.
func (hl *hostileLab) waitEvent(t *testing.T, re string, within time.Duration) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	await.Until(t, within, fmt.Sprintf("the fake did not log %q", re), func() bool {
		m = rx.FindStringSubmatch(hl.fakeEvents())
		return m != nil
	}, func() string { return "its log:\n" + tailString(hl.fakeEvents(), 3000) })
	return m
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// desk is one attack's desktop: its own keeper directory, a terminal
// broker on a pty, and the memory watch on the keeper.
type desk struct {
	t      *testing.T
	hl     *hostileLab
	r      *remote
	env    []string // extra environment for up (the keeper inherits it)
	screen *responder
	broker *exec.Cmd
	keeper *memWatch
	brmem  *memWatch
}

func (hl *hostileLab) desk(t *testing.T, env ...string) *desk {
	dir, err := os.MkdirTemp("", "orh")
	if err != nil {
		t.Fatal(err)
	}
	d := &desk{t: t, hl: hl, r: &remote{t: t, lab: hl.lab, dir: dir, bin: binDir}, env: env}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := d.r.cmd("down", "-all")
		down := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
		down.Env = cmd.Env
		down.Run()
		if d.keeper != nil {
			d.keeper.stop()
			syscall.Kill(d.keeper.pid, syscall.SIGKILL)
		}
		if d.broker != nil {
			d.brmem.stop()
			d.broker.Process.Kill()
			d.broker.Wait()
		}
		hl.killFakes()
		os.RemoveAll(dir)
	})
	return d
}

func (d *desk) cmd(args ...string) *exec.Cmd {
	c := d.r.cmd(args...)
	c.Env = append(c.Env, d.env...)
	return c
}

// run runs ollie-remote, giving up after within.
func (d *desk) run(within time.Duration, args ...string) (string, error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c := d.cmd(args...)
	cc := exec.CommandContext(ctx, c.Path, c.Args[1:]...)
	cc.Env = c.Env
	cc.WaitDelay = time.Second
	t0 := time.Now()
	out, err := cc.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", within, err)
	}
	return string(out), err, time.Since(t0)
}

// ollie runs ollie -H HOST ... on the desktop.
func (d *desk) ollie(within time.Duration, args ...string) (string, error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cc := exec.CommandContext(ctx, filepath.Join(binDir, "olliesrv"), append([]string{"ollie"}, args...)...)
	cc.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+d.r.dir)
	cc.Env = append(cc.Env, d.env...)
	cc.WaitDelay = time.Second
	t0 := time.Now()
	out, err := cc.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", within, err)
	}
	return string(out), err, time.Since(t0)
}

// startBroker runs ollie-remote broker on a pty with a responder on its
// screen.
func (d *desk) startBroker() {
	t := d.t
	cmd := d.cmd("broker")
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+t.TempDir())
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	d.broker = cmd
	d.screen = newResponder(tty)
	d.screen.waitFor(t, "answering the approval requests", 15*time.Second)
	d.brmem = watchMem(cmd.Process.Pid)
}

// up brings hosts up, and starts watching the keeper.
func (d *desk) up(hosts ...string) (string, error) {
	out, err, _ := d.run(60*time.Second, append([]string{"up"}, hosts...)...)
	if d.keeper == nil {
		if pid := keeperPid(d.r.dir); pid != 0 {
			d.keeper = watchMem(pid)
		}
	}
	return out, err
}

// mustUp brings the honest host up (and others), failing the test if the
// honest one is not.
func (d *desk) mustUp(hosts ...string) string {
	d.t.Helper()
	out, err := d.up(hosts...)
	if !strings.Contains(out, d.hl.good.Name+": up:") {
		d.t.Fatalf("up %v: %v\n%s", hosts, err, out)
	}
	if d.keeper == nil {
		d.t.Fatalf("no keeper runs for %s", d.r.dir)
	}
	return out
}

// keeperPid finds the keeper serving dir.
func keeperPid(dir string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		// ollie-remote __keeper -dir DIR [-F FILE]...
		cmd, err := os.ReadFile(p + "/cmdline")
		if err == nil && bytes.Contains(cmd, []byte("\x00"+keeper.Command+"\x00-dir\x00"+dir+"\x00")) {
			pid, _ := strconv.Atoi(filepath.Base(p))
			return pid
		}
	}
	return 0
}

// memWatch samples a process's resident memory, remembers its peak, and
// kills it past memKill.
type memWatch struct {
	pid    int
	mu     sync.Mutex
	idle   int64 // VmRSS when the watch began
	peak   int64
	killed bool
	done   chan struct{}
	once   sync.Once
}

func watchMem(pid int) *memWatch {
	w := &memWatch{pid: pid, done: make(chan struct{})}
	w.idle, _ = procMem(pid)
	w.peak = w.idle
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			rss, hwm := procMem(pid)
			if rss < 0 {
				return
			}
			w.mu.Lock()
			w.peak = max(w.peak, rss, hwm)
			if rss > memKill && !w.killed {
				w.killed = true
				syscall.Kill(pid, syscall.SIGKILL)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *memWatch) stop() { w.once.Do(func() { close(w.done) }) }

// Peak is the highest resident size seen (VmHWM included), in bytes.
func (w *memWatch) Peak() int64 {
	if w == nil {
		return 0
	}
	_, hwm := procMem(w.pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peak = max(w.peak, hwm)
	return w.peak
}

// procMem reads VmRSS and VmHWM, in bytes; -1 when the process is gone.
func procMem(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n << 10
		case "VmHWM:":
			hwm = n << 10
		}
	}
	return rss, hwm
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// checkMem fails the test if the keeper or the broker went past memBound.
func (d *desk) checkMem(what string) {
	d.t.Helper()
	for _, w := range []struct {
		name string
		m    *memWatch
	}{{"keeper", d.keeper}, {"terminal broker", d.brmem}} {
		if w.m == nil {
			continue
		}
		peak := w.m.Peak()
		d.t.Logf("figure: %s: %s peak %s (idle %s)", what, w.name, mib(peak), mib(w.m.idle))
		w.m.mu.Lock()
		killed := w.m.killed
		w.m.mu.Unlock()
		if killed {
			d.t.Errorf("%s: the %s passed %s and was killed", what, w.name, mib(memKill))
		} else if peak > memBound {
			d.t.Errorf("%s: the %s reached %s, over the bound of %s (idle %s)", what, w.name, mib(peak), mib(memBound), mib(w.m.idle))
		}
	}
}

// checkClean fails the test if out holds anything a terminal would act
// on: C0 controls but newline and tab (a carriage return only before a
// newline, as a pty writes line ends), DEL, C1 controls, bytes that are
// not UTF-8, and format characters (bidi overrides, zero-width).
func checkClean(t *testing.T, what, out string) {
	t.Helper()
	if bad := unsafeRunes(out); len(bad) > 0 {
		t.Errorf("%s: %d escape bytes reach the terminal, first %s:\n%q", what, len(bad), bad[0], tailString(out, 4000))
	}
}

func unsafeRunes(s string) []string {
	var bad []string
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		ctx := func() string {
			return fmt.Sprintf("%q at %d in …%q…", s[i:i+n], i, s[max(0, i-30):min(len(s), i+30)])
		}
		switch {
		case r == utf8.RuneError && n == 1:
			bad = append(bad, ctx())
		case r == '\n' || r == '\t':
		case r == '\r' && i+1 < len(s) && s[i+1] == '\n':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			bad = append(bad, ctx())
		case unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029':
			bad = append(bad, ctx())
		}
		i += n
	}
	return bad
}

// responder reads the terminal broker's screen and answers each prompt
// as answer says, recording what it was shown and when.
type responder struct {
	tty *os.File
	mu  sync.Mutex
	buf bytes.Buffer
	pos int // the screen up to here is answered
	// answer returns the line to type for a prompt: kind is "approve" or
	// "password"; seg is what the screen showed since the last answer.
	answer  func(kind, seg string) string
	think   time.Duration // how long the person takes to answer
	prompts []prompt
}

type prompt struct {
	kind, seg string
	at        time.Time
}

// The end of a prompt: the approval question, or a password line (the
// last line of the screen is ollie's, asks for a password and ends in
// ": "; a host's field that says so mid-line is not one).
var (
	approveEnd  = regexp.MustCompile(`\[d\]eny\? $`)
	passwordEnd = regexp.MustCompile(`(?:^|\n)ollie: [^\n]*password[^\n]*: $`)
)

func newResponder(tty *os.File) *responder {
	r := &responder{tty: tty, answer: func(kind, seg string) string {
		if kind == "password" {
			return "not-the-password"
		}
		return "d"
	}}
	go func() {
		b := make([]byte, 64<<10)
		for {
			n, err := tty.Read(b)
			r.mu.Lock()
			r.buf.Write(b[:n])
			r.step()
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

// step answers the prompt at the end of the screen, if there is one.
func (r *responder) step() {
	seg := r.buf.String()[r.pos:]
	kind := ""
	switch {
	case approveEnd.MatchString(seg):
		kind = "approve"
	case passwordEnd.MatchString(seg):
		kind = "password"
	default:
		return
	}
	r.prompts = append(r.prompts, prompt{kind, seg, time.Now()})
	r.pos = r.buf.Len()
	line, think := r.answer(kind, seg), r.think
	// The person takes their think time to answer: the point, not a guess.
	time.AfterFunc(think, func() { r.tty.Write([]byte(line + "\r")) })
}

func (r *responder) setThink(d time.Duration) {
	r.mu.Lock()
	r.think = d
	r.mu.Unlock()
}

func (r *responder) setAnswer(f func(kind, seg string) string) {
	r.mu.Lock()
	r.answer = f
	r.mu.Unlock()
}

func (r *responder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func (r *responder) seen() []prompt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]prompt(nil), r.prompts...)
}

func (r *responder) waitFor(t *testing.T, what string, within time.Duration) {
	t.Helper()
	await.Until(t, within, fmt.Sprintf("no %q on the broker's terminal", what), func() bool {
		return strings.Contains(r.String(), what)
	}, func() string { return tailString(r.String(), 3000) })
}

// honestTool names the honest host's request, which no hostile prompt
// contains: a deployed tool, which it runs with bypass.
const honestTool = "reasoning_think"

// brokerPath reads the broker socket the keeper registered on host.
func (d *desk) brokerPath(host string, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		c, err := client.DialAs(filepath.Join(d.r.dir, host+".ns"), "")
		if err == nil {
			b, err := c.ReadAll(ctx, "bypass/broker")
			c.Close()
			if p := strings.TrimSpace(string(b)); err == nil && strings.Contains(p, "broker-") {
				return p, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s never learnt of the desktop broker: %v", host, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// honestResult is what became of an honest request.
type honestResult struct {
	delay   time.Duration // from sending to its prompt on the screen
	before  int           // hostile prompts shown in between
	decided broker.Decision
}

// askHonest has the honest host ask, through its gate as an agent's call
// does (only its olliesrv has the key the desktop checks), and waits for
// its prompt on the terminal broker's screen. The delay includes the ssh
// command that makes the call; the prompts counted before it are those
// shown once the request reached the keeper's socket on the host.
func (d *desk) askHonest(within time.Duration) (honestResult, error) {
	var res honestResult
	path, err := d.brokerPath(d.hl.good.Name, 10*time.Second)
	if err != nil {
		return res, err
	}
	base := connectedTo(path)
	nStart := len(d.screen.seen())
	t0 := time.Now()
	type asked struct {
		out string
		ran bool
	}
	done := make(chan asked, 1)
	go func() {
		out, ran := askThroughGate(d.t, d.hl.lab, d.hl.good.Name, honestTool, `{"thought":"honest"}`)
		done <- asked{out, ran}
	}()
	decided := func(a asked) broker.Decision {
		if a.ran {
			return broker.Once
		}
		return broker.Deny
	}
	// When the gate connected to the keeper's socket, looked for as fast
	// as /proc/net/unix can be read: the conversation may last only the
	// few milliseconds its prompt is shown and answered.
	var arrival atomic.Int64
	looking, stopLooking := context.WithCancel(context.Background())
	defer stopLooking()
	lookDone := make(chan struct{})
	go func() {
		defer close(lookDone)
		look := time.NewTicker(200 * time.Microsecond)
		defer look.Stop()
		for {
			if connectedTo(path) > base {
				arrival.Store(time.Now().UnixNano())
				return
			}
			select {
			case <-looking.Done():
				return
			case <-look.C:
			}
		}
	}()
	// The prompt's time is when the screen showed it, not when this looks.
	showing, stopShowing := context.WithTimeout(context.Background(), within)
	defer stopShowing()
	var seen []prompt
	shown := -1
	await.Poll(showing, func() bool {
		seen = d.screen.seen()
		for i := nStart; i < len(seen); i++ {
			if strings.Contains(seen[i].seg, honestTool) {
				shown = i
				return true
			}
		}
		return false
	})
	if shown < 0 {
		select {
		case a := <-done:
			return res, fmt.Errorf("the honest host's request was never shown (%d other prompts in %v); the tool said %q; the screen:\n%q", len(seen)-nStart, within, a.out, tailString(d.screen.String(), 2000))
		default:
		}
		return res, fmt.Errorf("the honest host's request was not shown within %v (%d hostile prompts shown meanwhile)", within, len(seen)-nStart)
	}
	res.delay = seen[shown].at.Sub(t0)
	select {
	case a := <-done:
		res.decided = decided(a)
	case <-time.After(70 * time.Second):
		return res, fmt.Errorf("the honest request was shown but never answered")
	}
	// The conversation is over: the connection was seen by now or never
	// will be.
	stopLooking()
	<-lookDone
	if arrival.Load() == 0 {
		// Its connection came and went between two looks (a loaded
		// machine): every prompt shown since the ask counts, an upper
		// bound of those after its arrival.
		d.t.Logf("the honest request's connection to %s was not seen; counting every prompt since it was asked", path)
		res.before = shown - nStart
		return res, nil
	}
	arrived := time.Unix(0, arrival.Load())
	for _, p := range seen[nStart:shown] {
		if p.at.After(arrived) {
			res.before++
		}
	}
	return res, nil
}

// connectedTo counts the connections accepted on the keeper's broker
// sockets beside path (the one registered, and any the keeper registers
// in its place meanwhile, as after a daemon's restart): /proc/net/unix
// names each by its listener's path (state 03, connected). The lab's
// hosts share this machine, so the forwarded sockets are here.
func connectedTo(path string) int {
	b, _ := os.ReadFile("/proc/net/unix")
	prefix := filepath.Join(filepath.Dir(path), "broker-")
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 8 && f[5] == "03" && strings.HasPrefix(f[7], prefix) {
			n++
		}
	}
	return n
}

// checkHonest fails the test unless the honest host still has its tunnel
// (status reads its namespace) and its approval is shown within 5 s,
// after at most one other prompt.
func (d *desk) checkHonest(what string) honestResult {
	d.t.Helper()
	good := d.hl.good.Name
	out, err, took := d.run(30*time.Second, "status", good)
	row := tableRow(out, good)
	if err != nil || row == nil || row[1] == "-" || !strings.Contains(out, "connected") {
		d.t.Errorf("%s: the honest host %s lost its tunnel (status took %v): %v\n%s", what, good, took, err, out)
	}
	res, err := d.askHonest(5 * time.Second)
	if err != nil {
		d.t.Errorf("%s: %v", what, err)
		return res
	}
	d.t.Logf("figure: %s: the honest host's approval was shown after %v, %d other prompts before it", what, res.delay.Round(time.Millisecond), res.before)
	if res.before > 1 {
		d.t.Errorf("%s: the honest host's prompt came after %d other prompts, want at most one", what, res.before)
	}
	return res
}

// finish checks what every attack must leave true, and says how the
// honest host's request fared.
func (d *desk) finish(what string) honestResult {
	d.t.Helper()
	res := d.checkHonest(what)
	d.checkMem(what)
	if d.screen != nil {
		checkClean(d.t, what+": the broker's terminal", d.screen.String())
	}
	return res
}

// keeperLog is the keeper's log so far.
func (d *desk) keeperLog() string {
	b, _ := os.ReadFile(filepath.Join(d.r.dir, "keeper.log"))
	return string(b)
}

func (d *desk) keeperLogSize() int64 {
	var n int64
	// Rotated logs count too.
	files, _ := filepath.Glob(filepath.Join(d.r.dir, "keeper.log*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// rawVersion opens a 9P connection to a host's local socket and sends
// Tversion, returning the connection and what Rversion said (msize 0 if
// none came within a second).
func rawVersion(sock string) (net.Conn, uint32, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, 0, err
	}
	tx := []byte{19, 0, 0, 0, 100, 0xff, 0xff, 0, 0, 0, 0, 6, 0, '9', 'P', '2', '0', '0', '0'}
	putMsize(tx, 8192+24)
	if _, err := c.Write(tx); err != nil {
		c.Close()
		return nil, 0, err
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	hdr := make([]byte, 11)
	if _, err := io.ReadFull(c, hdr); err != nil {
		c.SetReadDeadline(time.Time{})
		return c, 0, nil
	}
	c.SetReadDeadline(time.Time{})
	return c, uint32(hdr[7]) | uint32(hdr[8])<<8 | uint32(hdr[9])<<16 | uint32(hdr[10])<<24, nil
}

func putMsize(b []byte, m uint32) {
	b[7], b[8], b[9], b[10] = byte(m), byte(m>>8), byte(m>>16), byte(m>>24)
}
