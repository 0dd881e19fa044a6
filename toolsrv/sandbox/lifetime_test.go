//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
)

// A caller runs calls as one user: the test's own, or nobody when the test
// runs as root, so that each lifetime and limits test covers both the
// kernel's exemptions for root and an ordinary user's RLIMIT_NPROC.
type caller struct {
	name string
	cred *syscall.Credential // nil: the test's own user
	exe  string              // the helper binary, reachable by the user
	home string              // {HOME}, readable by the user
}

func callers(t *testing.T) []caller {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	own := caller{name: fmt.Sprintf("uid%d", os.Getuid()), exe: self}
	if os.Getuid() != 0 {
		return []caller{own}
	}
	// The test binary lives in go's private build directory: nobody gets
	// a copy in a directory it can reach.
	base, err := os.MkdirTemp("", "sandbox-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(base, "sandbox.test")
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := caller{name: "nobody", cred: &syscall.Credential{Uid: 65534, Gid: 65534}, exe: exe, home: home}
	return []caller{own, nobody}
}

// dir makes a directory the caller owns.
func (c caller) dir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if c.cred != nil {
		if err := os.Chmod(filepath.Dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// policy resolves the deployed default profile, changed by edit, for the
// caller with cwd as {CWD}.
func (c caller) policy(t *testing.T, cwd string, edit func(*Profile)) *Policy {
	t.Helper()
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if c.cred != nil {
		// Not {OLLIE_BIN}: the test binary's own directory is private.
		p.Exec = append([]string{c.exe}, slicesDelete(p.Exec, "{OLLIE_BIN}")...)
	}
	edit(p)
	v := Vars{CWD: cwd, TmpDir: c.dir(t), ToolsPath: []string{}, Home: c.home}
	if c.cred != nil {
		v.Getenv = func(string) (string, bool) { return "", false }
	}
	pol, err := p.Resolve(v)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func slicesDelete(s []string, x string) []string {
	var out []string
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// command is Command for the caller.
func (c caller) command(t *testing.T, ctx context.Context, pol *Policy, tool string, args ...string) *exec.Cmd {
	t.Helper()
	cmd, err := Command(ctx, pol, tool, args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Path, cmd.Args[0] = c.exe, c.exe
	cmd.SysProcAttr.Credential = c.cred
	return cmd
}

// forCallers runs f as each caller, in parallel.
func forCallers(t *testing.T, f func(t *testing.T, c caller)) {
	for _, c := range callers(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f(t, c)
		})
	}
}

// processesWith lists the processes whose command line holds marker.
func processesWith(marker string) []string {
	var found []string
	names, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err == nil && bytes.Contains(data, []byte(marker)) {
			found = append(found, strings.TrimSuffix(strings.TrimPrefix(name, "/proc/"), "/cmdline")+": "+
				strings.ReplaceAll(string(bytes.TrimRight(data, "\x00")), "\x00", " "))
		}
	}
	return found
}

// escapeScript starts a setsid'd writer and a double-forked setsid'd
// writer, waits until both run, and exits. Each writer touches its file
// after a second and then sleeps for ten minutes: a call that waited for
// them would not end by itself.
const escapeScript = `setsid sh -c ': > "$0.up"; sleep 1; touch "$0"; sleep 600' "$1" >/dev/null 2>&1 &
sh -c 'setsid sh -c ": > \"\$0.up\"; sleep 1; touch \"\$0\"; sleep 600" "$0" & exit 0' "$2" &
until [ -e "$1.up" ] && [ -e "$2.up" ]; do sleep 0.01; done
echo started uid=$(id -u)`

// killWriters kills what is left of escapeScript's writers in dir: each
// is the leader of its own session and process group.
func killWriters(dir string) {
	for _, p := range processesWith(dir) {
		if pid, err := strconv.Atoi(p[:strings.IndexByte(p, ':')]); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// The bug this package had: a child that calls setsid (and double-forks)
// left the call's process group and outlived the call.
func TestDescendantsEndWithCall(t *testing.T) {
	requireLandlock(t, 3)
	forCallers(t, func(t *testing.T, c caller) {
		cwd := c.dir(t)
		t.Cleanup(func() { killWriters(cwd) })
		files := []string{filepath.Join(cwd, "setsid"), filepath.Join(cwd, "double")}
		// The double fork keeps stdout open for ten minutes: should the
		// call wait for it, ctx ends the call (WaitDelay: also the wait
		// for its output), and its exit status fails the test.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := c.command(t, ctx, c.policy(t, cwd, func(*Profile) {}), "/bin/sh", append([]string{"-c", escapeScript, "sh"}, files...)...)
		cmd.WaitDelay = 5 * time.Second
		r := wait(t, cmd, cwd)
		uid := os.Getuid()
		if c.cred != nil {
			uid = int(c.cred.Uid)
		}
		if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("started uid=%d\n", uid)) {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		// No writer is left to write after the call (the test below
		// shows that processesWith sees writers that escape), so there is
		// nothing to wait for.
		if ps := processesWith(cwd); len(ps) > 0 {
			t.Errorf("processes outlived the call: %q", ps)
		}
	})
}

// The same script run without the helper leaves its writers behind:
// processesWith sees them once the call has ended, and they write their
// files. The test above can tell.
func TestDescendantsEscapeWithoutHelper(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	t.Cleanup(func() { killWriters(cwd) })
	files := []string{filepath.Join(cwd, "setsid"), filepath.Join(cwd, "double")}
	cmd, err := Unsandboxed(context.Background(), &Policy{Env: []string{"PATH"}}, "/bin/sh", append([]string{"-c", escapeScript, "sh"}, files...))
	if err != nil {
		t.Fatal(err)
	}
	// Output to /dev/null: Wait would wait for the writers holding a pipe.
	cmd.Dir = cwd
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // as the runner does
	var writers int
	for _, p := range processesWith(cwd) {
		if strings.Contains(p, "sleep 1; touch") {
			writers++
		}
	}
	if writers != 2 {
		t.Errorf("processesWith sees %q after the call, want both escaped writers", processesWith(cwd))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, f := range files {
		var err error
		if !await.Poll(ctx, func() bool { _, err = os.Stat(f); return err == nil }) {
			t.Errorf("%s: %v; want the escaped writer to have written it", f, err)
		}
	}
}

func TestExitStatus(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policy(t)
	for _, tt := range []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 255", 255},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
		{"kill -SEGV $$", 128 + 11},
	} {
		if r := sh(t, pol, e.cwd, tt.script); r.code != tt.code {
			t.Errorf("%s: exit %d, want %d (stderr %q)", tt.script, r.code, tt.code, r.stderr)
		}
	}
}

// startReady starts cmd and waits for the tool to print "ready"; rest
// waits for the command and returns the rest of its output.
func startReady(t *testing.T, cmd *exec.Cmd, dir string) (rest func() string) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Dir = pw, dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	br := bufio.NewReader(pr)
	if line, err := br.ReadString('\n'); line != "ready\n" {
		t.Fatalf("tool said %q (%v), stderr %q", line, err, stderr.String())
	}
	return func() string {
		b, _ := io.ReadAll(br)
		pr.Close()
		cmd.Wait()
		return string(b) + stderr.String()
	}
}

// SIGTERM to the helper reaches the tool; Kill ends a tool that ignores it,
// and what it started, at once.
func TestSignals(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policy(t)
	ctx := context.Background()

	cmd, err := Command(ctx, pol, "/bin/sh", []string{"-c", `trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done`})
	if err != nil {
		t.Fatal(err)
	}
	rest := startReady(t, cmd, e.cwd)
	cmd.Process.Signal(syscall.SIGTERM)
	out := rest()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(out, "got TERM") {
		t.Errorf("after SIGTERM: exit %d, output %q; want 3 and got TERM", code, out)
	}

	marker := fmt.Sprintf("%d.%d", 30, time.Now().UnixNano()%1e6)
	cmd, err = Command(ctx, pol, "/bin/sh", []string{"-c", `trap '' TERM; setsid sleep ` + marker + ` >/dev/null 2>&1 & sleep 0.2; echo ready; while :; do sleep 0.05; done`})
	if err != nil {
		t.Fatal(err)
	}
	rest = startReady(t, cmd, e.cwd)
	cmd.Process.Signal(syscall.SIGTERM) // ignored
	if err := Kill(cmd.Process); err != nil {
		t.Fatal(err)
	}
	// Exit status 137 says the helper killed the tool; without Kill the
	// tool would run on, and this wait only keeps a failure from hanging.
	ended := make(chan struct{})
	go func() { rest(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		t.Fatal("the call still runs 30 s after Kill")
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+9 {
		t.Errorf("after Kill: exit %d, want 137", code)
	}
	if ps := processesWith(marker); len(ps) > 0 {
		t.Errorf("processes outlived Kill: %q", ps)
	}
}

// Kill as a call starts, before its helper listens for signals (the
// Procs.Close right after a Start that TestProcsCloseKillsAll does): the
// helper still ends the tool and what it started, and exits 137 itself.
// It used to drop that kill, leaving the call to run until the caller's
// SIGKILL after WaitDelay, which orphaned the tool and its setsid'd child.
func TestKillAtStart(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	marker := fmt.Sprintf("%d.%d", 31, time.Now().UnixNano()%1e6)
	cmd, err := Command(context.Background(), e.policy(t), "/bin/sh", []string{"-c", "setsid sleep " + marker + " & sleep " + marker})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, lateListenEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = e.cwd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "starting\n" {
		t.Fatalf("the helper said %q (%v)", line, err)
	}
	if err := Kill(cmd.Process); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte{'\n'}) // go on, to listen
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second): // a watchdog: a Kill kept ends it at once
		cmd.Process.Kill()
		<-exited
		t.Error("the helper dropped a Kill sent before it listened")
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+9 {
		t.Errorf("after Kill: %v, want exit status 137", cmd.ProcessState)
	}
	if ps := processesWith(marker); len(ps) > 0 {
		t.Errorf("processes outlived Kill: %q", ps)
		for _, p := range ps {
			var pid int
			fmt.Sscan(p, &pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// A fork bomb meets limits.processes: its forks fail, the call ends, and
// none of its processes is left.
func TestForkBombStopped(t *testing.T) {
	requireLandlock(t, 3)
	forCallers(t, func(t *testing.T, c caller) {
		cwd := c.dir(t)
		pol := c.policy(t, cwd, func(p *Profile) { p.Limits.Processes = 64 })
		marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1e6)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		cmd := c.command(t, ctx, pol, "/bin/sh", "-c",
			`i=0; while [ $i -lt 5000 ]; do sleep `+marker+` & i=$((i+1)); done; echo all started; wait`)
		begin := time.Now()
		r := wait(t, cmd, cwd)
		if r.code == 0 || strings.Contains(r.stdout, "all started") || !strings.Contains(r.stderr, "fork") {
			t.Errorf("fork bomb: exit %d, stdout %q, stderr %q; want it stopped by a failed fork", r.code, r.stdout, r.stderr)
		}
		// The bound is the point, and generous: a call that waited for
		// its sleeps would last until ctx ends it, after 120 s.
		if d := time.Since(begin); d > 60*time.Second {
			t.Errorf("the call took %v: it waited for the processes it started", d)
		}
		if ps := processesWith(marker); len(ps) > 0 {
			t.Errorf("%d processes outlived the call, e.g. %q", len(ps), ps[0])
		}
	})
}

// limits.memory refuses a 2 GiB allocation, from the deployed profile and
// from the built-in defaults alike, and allows a modest one.
func TestMemoryLimit(t *testing.T) {
	requireLandlock(t, 3)
	const python = "/usr/bin/python3" // not $PATH's: it may be a shim in a home directory
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("this test needs %s: %v", python, err)
	}
	forCallers(t, func(t *testing.T, c caller) {
		cwd := c.dir(t)
		for _, tt := range []struct {
			name   string
			limits func(*Limits)
		}{
			{"deployed profile", func(*Limits) {}},
			{"built-in defaults", func(l *Limits) { *l = Limits{} }},
		} {
			pol := c.policy(t, cwd, func(p *Profile) { tt.limits(&p.Limits) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r := wait(t, c.command(t, ctx, pol, python, "-c", "b = bytearray(2 << 30)"), cwd)
			cancel()
			if r.code == 0 || !strings.Contains(r.stderr, "MemoryError") {
				t.Errorf("%s: 2 GiB allocation: exit %d, stderr %q; want a MemoryError", tt.name, r.code, r.stderr)
			}
			ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			r = wait(t, c.command(t, ctx, pol, python, "-c", "b = bytearray(256 << 20); print(len(b))"), cwd)
			cancel()
			if r.code != 0 || strings.TrimSpace(r.stdout) != fmt.Sprint(256<<20) {
				t.Errorf("%s: 256 MiB allocation: exit %d, stdout %q, stderr %q", tt.name, r.code, r.stdout, r.stderr)
			}
		}
	})
}

// open_files and file_size reach the tool as rlimits it cannot raise.
func TestFileLimits(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policyWith(t, func(p *Profile) { p.Limits = Limits{OpenFiles: 100, FileSize: 1 << 20} })
	r := sh(t, pol, e.cwd, `echo "n=$(ulimit -n) f=$(ulimit -f)"; ulimit -n 200 2>/dev/null && echo raised
head -c 2000000 /dev/zero > big; echo "size=$(wc -c < big)"`)
	if !strings.Contains(r.stdout, "n=100 f=2048\n") || strings.Contains(r.stdout, "raised") || !strings.Contains(r.stdout, "size=1048576") {
		t.Errorf("stdout %q, stderr %q; want n=100 f=2048 (512-byte blocks), no raise, a file cut at 1 MiB", r.stdout, r.stderr)
	}
}

// Enforcement says how the limits apply here; for root, only a pids cgroup
// can bound processes, and without one it says so.
func TestLimitsEnforcement(t *testing.T) {
	applied, missing := limitsEnforcement(DefaultLimits)
	all := strings.Join(append(applied, missing...), "\n")
	for _, w := range []string{"memory: 1.5GiB per", "RLIMIT_DATA", "processes: 512 per call"} {
		if !strings.Contains(all, w) {
			t.Errorf("enforcement %q lacks %q", all, w)
		}
	}
	_, cgErr := pidsCgroupParent()
	switch {
	case os.Getuid() != 0:
		if !strings.Contains(all, "RLIMIT_NPROC") {
			t.Errorf("non-root: %q lacks RLIMIT_NPROC", all)
		}
	case cgErr == nil:
		if !strings.Contains(all, "pids.max") || len(missing) > 0 {
			t.Errorf("root with a pids cgroup: applied %q, missing %q", applied, missing)
		}
	default:
		if len(missing) != 1 || !strings.Contains(missing[0], "exempts") {
			t.Errorf("root without a pids cgroup (%v): missing %q", cgErr, missing)
		}
	}
	e := Enforcement{Level: Full, ABI: 7, Unlimited: []string{"processes: x"}}
	if s := e.String(); !strings.Contains(s, "LIMITS NOT ENFORCED: processes: x") {
		t.Errorf("Enforcement.String %q does not say loudly what is not limited", s)
	}
}
