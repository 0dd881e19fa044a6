package remote

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/demohost"
)

// demoFleet is n SSH hosts inside the test process (internal/demohost,
// no root needed: each is a gliderlabs/ssh server on 127.0.0.1 with a
// home of its own, running commands as the current user), the ssh config
// and known_hosts that reach them, and an ollie-remote with a keeper
// directory and run store of its own. It is what the fleet's scale test
// and benchmarks run on.
type demoFleet struct {
	tb    testing.TB
	fleet *demohost.Fleet
	files demohost.ClientFiles
	key   string // the client's private key file
	dir   string // OLLIE_REMOTE_DIR: short, the keeper's sockets live in it
	state string // XDG_STATE_HOME: where fleet runs are kept
	names []string
	llm   *fakellm.Server
}

func startDemoFleet(tb testing.TB, n int) *demoFleet {
	tb.Helper()
	if buildFailed != nil {
		tb.Fatal(buildFailed)
	}
	// Short: the hosts' sockets (olliesrv's, the broker's forward) are
	// under their homes, and a Unix socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "odf")
	if err != nil {
		tb.Fatal(err)
	}
	d := &demoFleet{tb: tb, dir: filepath.Join(dir, "r"), state: filepath.Join(dir, "state"), key: filepath.Join(dir, "id_ed25519")}
	pub, err := demohost.NewClientKey(d.key)
	if err != nil {
		tb.Fatal(err)
	}
	d.fleet, err = demohost.Start(filepath.Join(dir, "h"), n, pub, nil)
	if err != nil {
		tb.Fatal(err)
	}
	d.files, err = d.fleet.WriteClientFiles(dir, d.key)
	if err != nil {
		d.fleet.Close()
		tb.Fatal(err)
	}
	d.names = d.fleet.Names()
	tb.Cleanup(func() {
		d.run("down", "-all")
		d.killKeeper()
		if err := d.fleet.Close(); err != nil {
			tb.Logf("stopping the demo hosts: %v", err)
		}
		os.RemoveAll(dir)
	})
	return d
}

func (d *demoFleet) cmd(args ...string) *exec.Cmd {
	full := append([]string{"-F", d.files.Config, "-bin", binDir, "-data", dataDir}, args...)
	cmd := exec.Command(remoteBin, full...)
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+d.dir, "SSH_AUTH_SOCK=", "XDG_STATE_HOME="+d.state)
	return cmd
}

func (d *demoFleet) run(args ...string) (string, error) {
	out, err := d.cmd(args...).CombinedOutput()
	return string(out), err
}

func (d *demoFleet) must(args ...string) string {
	d.tb.Helper()
	out, err := d.run(args...)
	if err != nil {
		d.tb.Fatalf("ollie-remote %s: %v\n%s", clipArgs(args), err, tailString(out, 4000))
	}
	return out
}

// clipArgs shows a command line of many hosts short.
func clipArgs(args []string) string {
	s := strings.Join(args, " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// hosts are the first n hosts' names.
func (d *demoFleet) hosts(n int) []string { return d.names[:n] }

// model points every host's agents at one scripted model that thinks
// think before each reply, answering each conversation from its own
// messages: a first call runs `pwd` in the shell tool (the host's home,
// its own on every host), the answer after it names what pwd printed.
// With tool false the model answers at once, naming nothing of the host.
func (d *demoFleet) model(think time.Duration, tool bool) {
	d.llm = fakellm.Start(d.tb)
	d.llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		// The think time is spent before the first byte, as a model
		// does: Delay would be paid again before every chunk.
		await.For(d.tb.Context(), think)
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" {
			return fakellm.Response{Text: []string{"checked in ", strings.TrimSpace(last.Text()), "\nall is well"}}
		}
		if !tool {
			return fakellm.Response{Text: []string{"all is well"}}
		}
		return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"command": "pwd"}`}}}
	})
	backends := `{"backends": {"fake": {"type": "openai", "url": "` + d.llm.URL + `/v1", "model": "fake-model"}}}`
	for _, h := range d.fleet.Hosts {
		cfg := filepath.Join(h.ConfigDir(), "ollie")
		if err := os.MkdirAll(cfg, 0700); err != nil {
			d.tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg, "backends.json"), []byte(backends), 0600); err != nil {
			d.tb.Fatal(err)
		}
	}
}

// seed deploys to the first host with ollie-remote deploy, then gives
// the next n-1 hosts the same files as hard links (what deploy would have
// written there, without copying the binary n times): those hosts are on
// this version, as a fleet is between runs. The benchmarks time runs, not
// first deploys.
func (d *demoFleet) seed(n int) {
	d.tb.Helper()
	d.must("deploy", d.names[0])
	src := d.fleet.Hosts[0].Home
	for _, h := range d.fleet.Hosts[1:n] {
		for _, p := range []string{".local", ".bashrc", ".zshenv", ".profile"} {
			if _, err := os.Lstat(filepath.Join(src, p)); err != nil {
				continue
			}
			if out, err := exec.Command("cp", "-al", filepath.Join(src, p), h.Home+"/").CombinedOutput(); err != nil {
				d.tb.Fatalf("seeding %s: %v\n%s", h.Name, err, out)
			}
		}
	}
}

// killKeeper ends this fleet's keeper, if one runs, as after a reboot of
// the desktop: the hosts' daemons keep running. It returns once the
// keeper has closed its files, when the last of its threads is gone: an
// up that connected to its control socket before would be answered by no
// one. (The main thread is a zombie before the others have exited.)
func (d *demoFleet) killKeeper() {
	pid := keeperPid(d.dir)
	if pid == 0 {
		return
	}
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
	await.Until(d.tb, 10*time.Second, fmt.Sprintf("the keeper (pid %d) still runs after it was killed", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		return err != nil || len(tasks) <= 1 && bytes.HasPrefix(b[bytes.LastIndexByte(b, ')')+1:], []byte(" Z"))
	})
}

// daemonPids are the olliesrv daemons the hosts run: those whose
// NAMESPACE is a host's.
func (d *demoFleet) daemonPids() []int {
	want := map[string]bool{}
	for _, h := range d.fleet.Hosts {
		want["NAMESPACE="+h.NSDir] = true
	}
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err := os.ReadFile(p + "/cmdline")
		if err != nil || !strings.HasSuffix(string(cmd), "olliesrv\x00serve\x00") {
			continue
		}
		env, _ := os.ReadFile(p + "/environ")
		for _, kv := range strings.Split(string(env), "\x00") {
			if want[kv] {
				pid, _ := strconv.Atoi(filepath.Base(p))
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// rssSum is the resident memory of the processes, in bytes.
func rssSum(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		if rss, _ := procMem(pid); rss > 0 {
			n += rss
		}
	}
	return n
}

// phases are when each host of a fleet run first showed each state, from
// the start of the command, read from its line view (no terminal).
type phases struct {
	at  map[string]map[string]time.Duration // state word → host → when
	cpu time.Duration                       // the command's own CPU time
}

var phaseLine = regexp.MustCompile(`^\s*(\S+)\s*: \[([a-z]+)`)

// timedRun runs ollie-remote with args, noting when each line of its
// output came, and returns the output, how long the command took, and the
// phases its lines show.
func (d *demoFleet) timedRun(args ...string) (string, time.Duration, phases, error) {
	cmd := d.cmd(args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		d.tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		d.tb.Fatal(err)
	}
	pw.Close()
	ph := phases{at: map[string]map[string]time.Duration{}}
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		at := time.Since(t0)
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := phaseLine.FindStringSubmatch(line); m != nil {
			if ph.at[m[2]] == nil {
				ph.at[m[2]] = map[string]time.Duration{}
			}
			if _, seen := ph.at[m[2]][m[1]]; !seen {
				ph.at[m[2]][m[1]] = at
			}
		}
	}
	pr.Close()
	err = cmd.Wait()
	took := time.Since(t0)
	ph.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return out.String(), took, ph, err
}

// String says, for each state, when the first and the last host reached
// it, in the order the states came.
func (ph phases) String() string {
	type st struct {
		name        string
		first, last time.Duration
		n           int
	}
	var sts []st
	for name, hosts := range ph.at {
		s := st{name: name, first: time.Hour}
		for _, at := range hosts {
			s.first, s.last = min(s.first, at), max(s.last, at)
			s.n++
		}
		sts = append(sts, s)
	}
	sort.Slice(sts, func(i, j int) bool { return sts[i].first < sts[j].first })
	var b strings.Builder
	for _, s := range sts {
		fmt.Fprintf(&b, "%s %d hosts %.2f–%.2fs; ", s.name, s.n, s.first.Seconds(), s.last.Seconds())
	}
	fmt.Fprintf(&b, "the command's own CPU %.1fs", ph.cpu.Seconds())
	return b.String()
}

// cpuTicks is a process's CPU time, its waited-for children's included,
// in clock ticks (1/100 s on Linux); 0 when it is gone.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count from the
	// last parenthesis. utime, stime, cutime, cstime are fields 14–17.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	var n int64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return n
}

// cpuUse is where the CPU time of a stretch of work went: this process
// (the demo hosts' SSH servers, the scripted model), its children waited
// for (ollie-remote, the commands the hosts ran), the keeper, and the
// hosts' olliesrv daemons.
type cpuUse struct {
	self, children, keeper, daemons time.Duration
	keeperPid                       int
}

func (u cpuUse) total() time.Duration { return u.self + u.children + u.keeper + u.daemons }

func (u cpuUse) String() string {
	return fmt.Sprintf("CPU %.1fs: test process (SSH servers, model) %.1fs, ollie-remote and host commands %.1fs, keeper %.1fs, olliesrv daemons %.1fs",
		u.total().Seconds(), u.self.Seconds(), u.children.Seconds(), u.keeper.Seconds(), u.daemons.Seconds())
}

// cpuNow samples what cpuUse counts.
func (d *demoFleet) cpuNow() cpuUse {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(r syscall.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	var daemons int64
	for _, pid := range d.daemonPids() {
		daemons += cpuTicks(pid)
	}
	var keeper int64
	kpid := keeperPid(d.dir)
	if kpid != 0 {
		keeper = cpuTicks(kpid)
	}
	return cpuUse{self: tv(self), children: tv(kids), keeper: time.Duration(keeper) * 10 * time.Millisecond,
		daemons: time.Duration(daemons) * 10 * time.Millisecond, keeperPid: kpid}
}

// since is the CPU used between two samples. A keeper that started in
// between counts from zero; what a keeper or daemon that ended used is
// lost.
func (u cpuUse) since(before cpuUse) cpuUse {
	keeper := u.keeper
	if u.keeperPid == before.keeperPid {
		keeper -= before.keeper
	}
	return cpuUse{self: u.self - before.self, children: u.children - before.children,
		keeper: max(0, keeper), daemons: max(0, u.daemons-before.daemons), keeperPid: u.keeperPid}
}
