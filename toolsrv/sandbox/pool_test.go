//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
)

// testPool, when set, makes run (and so every test that confines a tool
// through it: the escape tests) go through pre-started helpers. It is set
// in a re-run of the test binary with poolTestEnv (TestEscapesThroughPool).
var testPool *Pool

const poolTestEnv = "SANDBOX_TEST_POOL"

func runPooled(t *testing.T, ctx context.Context, p *Pool, pol *Policy, dir, tool string, args ...string) result {
	t.Helper()
	c, err := p.Command(ctx, pol, tool, args)
	if err != nil {
		t.Fatalf("Pool.Command: %v", err)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr, c.Dir = &stdout, &stderr, dir
	if err := c.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	err = c.Wait()
	r := result{stdout.String(), stderr.String(), c.ExitCode()}
	var ee *ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("Wait: %v", err)
	}
	return r
}

// newTestPool is a pool for one test, closed at its end.
func newTestPool(t *testing.T) *Pool {
	t.Helper()
	p := NewPool(2)
	t.Cleanup(p.Close)
	return p
}

// The escape tests (the tool attacks the filesystem, the network, the
// helper's memory, signals and abstract sockets; exit statuses and
// limits), run again with every call through pre-started helpers.
func TestEscapesThroughPool(t *testing.T) {
	requireLandlock(t, 3)
	if testPool != nil {
		t.Skip("already running through the pool")
	}
	cmd := exec.Command(os.Args[0], "-test.count=1", "-test.v",
		"-test.run=^(TestFilesystem|TestNetwork|TestHelperFailures|TestHelperOutOfReach|TestNoDeviceNodes|TestSignalScope|TestAbstractSocketScope|TestMPTCPFilter|TestExitStatus|TestFileLimits)$")
	cmd.Env = append(os.Environ(), poolTestEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the escape tests through the pool: %v\n%s", err, out)
	}
	// Each test must have run, not been skipped or filtered out; but
	// TestNoDeviceNodes proves something only as root, and skips as
	// anyone else (the plain tier), through the pool as without it.
	names := []string{"TestFilesystem", "TestNetwork", "TestHelperFailures", "TestHelperOutOfReach",
		"TestSignalScope", "TestAbstractSocketScope", "TestMPTCPFilter", "TestExitStatus", "TestFileLimits"}
	if os.Getuid() == 0 {
		names = append(names, "TestNoDeviceNodes")
	}
	for _, name := range names {
		if !bytes.Contains(out, []byte("--- PASS: "+name+" ")) {
			t.Errorf("%s did not pass through the pool:\n%s", name, out)
		}
	}
}

// The tool's parent and process group are the helper's, and it holds no
// descriptor but stdin, stdout and stderr: not the call's socket.
func TestPoolProcess(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	c, err := newTestPool(t).Command(context.Background(), e.policy(t), "/bin/sh", []string{"-c",
		`read -r stat < /proc/self/stat; set -- $stat; echo "pid=$$ ppid=$4 pgrp=$5"; cd /proc/self/fd && echo "fds=" *; read -r _ || :`})
	if err != nil {
		t.Fatal(err)
	}
	c.Dir = e.cwd
	out, tree := runHeld(t, held{
		setIO:  func(in io.Reader, out, errw io.Writer) { c.Stdin, c.Stdout, c.Stderr = in, out, errw },
		start:  c.Start,
		wait:   c.Wait,
		helper: func() int { return c.Process.Pid },
	}, 2)
	var pid, ppid, pgrp int
	if _, err := fmt.Sscanf(out, "pid=%d ppid=%d pgrp=%d\n", &pid, &ppid, &pgrp); err != nil {
		t.Fatalf("parsing %q: %v", out, err)
	}
	checkParent(t, tree, c.Process.Pid, pid, ppid, pgrp)
	// The shell reads the directory itself: /proc/self is the tool's
	// alone. The glob's own descriptor is 3.
	if !strings.Contains(out, "fds= 0 1 2 3\n") {
		t.Errorf("the tool holds %q, want only 0 1 2 (and the glob's 3)", out)
	}
}

// The call's environment is filtered by the allowlist, as Command's is,
// and it runs in Dir with its stdin.
func TestPoolEnvDirStdin(t *testing.T) {
	requireLandlock(t, 3)
	t.Setenv("OLLIE_TEST_SECRET", "hunter2")
	t.Setenv("LC_TEST_PASSED", "yes")
	e := newEnv(t)
	c, err := newTestPool(t).Command(context.Background(), e.policy(t), "/bin/sh", []string{"-c",
		`read -r line; echo "secret=[$OLLIE_TEST_SECRET] lc=[$LC_TEST_PASSED] pwd=[$PWD] extra=[$EXTRA] dir=[$(pwd)] in=[$line]"`})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range c.Env {
		if strings.HasPrefix(kv, "OLLIE_TEST_SECRET=") {
			t.Errorf("the secret is in Call.Env")
		}
	}
	c.Env = append(c.Env, "PWD="+e.cwd, "EXTRA=leak")
	var stdout bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr, c.Dir = strings.NewReader("args\n"), &stdout, &stdout, e.cwd
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	want := fmt.Sprintf("secret=[] lc=[yes] pwd=[%s] extra=[] dir=[%s] in=[args]", e.cwd, e.cwd)
	if strings.TrimSpace(stdout.String()) != want {
		t.Errorf("got %q, want %q", stdout.String(), want)
	}
}

// startPooled starts a call through p and waits for the tool to print
// "ready"; rest waits for the call and returns the rest of its output.
func startPooled(t *testing.T, c *Call, dir string) (rest func() string) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	c.Stdout, c.Stderr, c.Dir = pw, &stderr, dir
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	br := bufio.NewReader(pr)
	if line, err := br.ReadString('\n'); line != "ready\n" {
		t.Fatalf("tool said %q (%v), stderr %q", line, err, stderr.String())
	}
	return func() string {
		b, _ := io.ReadAll(br)
		pr.Close()
		c.Wait()
		return string(b) + stderr.String()
	}
}

// SIGTERM to the helper reaches the tool; Kill ends a tool that ignores
// it, and what it started (setsid or not), at once; the end of the
// call's context does the same.
func TestPoolSignals(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policy(t)
	p := newTestPool(t)
	ctx := context.Background()

	c, err := p.Command(ctx, pol, "/bin/sh", []string{"-c", `trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done`})
	if err != nil {
		t.Fatal(err)
	}
	rest := startPooled(t, c, e.cwd)
	c.Process.Signal(syscall.SIGTERM)
	if out := rest(); c.ExitCode() != 3 || !strings.Contains(out, "got TERM") {
		t.Errorf("after SIGTERM: exit %d, output %q; want 3 and got TERM", c.ExitCode(), out)
	}

	for _, how := range []string{"Kill", "context"} {
		marker := fmt.Sprintf("%d.%d", 30, time.Now().UnixNano()%1e6)
		cctx, cancel := context.WithCancel(ctx)
		c, err = p.Command(cctx, pol, "/bin/sh", []string{"-c", `trap '' TERM; setsid sleep ` + marker + ` >/dev/null 2>&1 & sleep 0.2; echo ready; while :; do sleep 0.05; done`})
		if err != nil {
			t.Fatal(err)
		}
		c.WaitDelay = 5 * time.Second
		rest = startPooled(t, c, e.cwd)
		c.Process.Signal(syscall.SIGTERM) // ignored
		if how == "Kill" {
			if err := Kill(c.Process); err != nil {
				t.Fatal(err)
			}
		} else {
			cancel()
		}
		ended := make(chan struct{})
		go func() { rest(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			c.Process.Signal(syscall.SIGKILL)
			t.Fatalf("%s: the call still runs 30 s later", how)
		}
		cancel()
		if c.ExitCode() != 128+9 {
			t.Errorf("after %s: exit %d, want 137", how, c.ExitCode())
		}
		if ps := processesWith(marker); len(ps) > 0 {
			t.Errorf("processes outlived %s: %q", how, ps)
		}
	}
}

// A setsid'd and a double-forked setsid'd child end with the call.
func TestPoolDescendantsEndWithCall(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	t.Cleanup(func() { killWriters(e.cwd) })
	files := []string{filepath.Join(e.cwd, "setsid"), filepath.Join(e.cwd, "double")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := newTestPool(t).Command(ctx, e.policy(t), "/bin/sh", append([]string{"-c", escapeScript, "sh"}, files...))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr, c.Dir = &stdout, &stderr, e.cwd
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	err = c.Wait()
	if err != nil || !strings.Contains(stdout.String(), "started uid=") {
		t.Fatalf("%v: stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	if ps := processesWith(e.cwd); len(ps) > 0 {
		t.Errorf("processes outlived the call: %q", ps)
	}
}

// limits.processes stops a fork bomb through the pool too: for root the
// helper's cgroup, made before the call, gets the call's pids.max.
func TestPoolForkBombStopped(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policyWith(t, func(p *Profile) { p.Limits.Processes = 64 })
	marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1e6)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	begin := time.Now()
	r := runPooled(t, ctx, newTestPool(t), pol, e.cwd, "/bin/sh", "-c",
		`i=0; while [ $i -lt 5000 ]; do sleep `+marker+` & i=$((i+1)); done; echo all started; wait`)
	if r.code == 0 || strings.Contains(r.stdout, "all started") || !strings.Contains(r.stderr, "fork") {
		t.Errorf("fork bomb: exit %d, stdout %q, stderr %q; want it stopped by a failed fork", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(begin); d > 60*time.Second {
		t.Errorf("the call took %v: it waited for the processes it started", d)
	}
	if ps := processesWith(marker); len(ps) > 0 {
		t.Errorf("%d processes outlived the call, e.g. %q", len(ps), ps[0])
	}
}

// A helper that died while it waited is passed over: the call goes to the
// next.
func TestPoolDeadHelper(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	p := newTestPool(t)
	await.Until(t, 10*time.Second, "the pool filling", func() bool { return p.Idle() >= 2 })
	h := <-p.ready
	h.proc.Kill()
	h.proc.Wait()
	p.ready <- h
	if r := runPooled(t, context.Background(), p, e.policy(t), e.cwd, "/bin/sh", "-c", "echo ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("after a dead helper: %+v", r)
	}
}

// A waiting stage listens for the signals it forwards before its call
// comes (off the call's path), but a signal then still ends it at once,
// as it did when nothing listened; the next call goes to another helper.
func TestPoolWaitingStageSignalled(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	p := newTestPool(t)
	await.Until(t, 10*time.Second, "the pool filling", func() bool { return p.Idle() >= 2 })
	h := <-p.ready
	// The stage is the child of whichever of the helper's threads started
	// it, once it has.
	var children []byte
	await.Until(t, 10*time.Second, "the helper's confining stage", func() bool {
		children = nil
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", h.proc.Pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			children = append(children, b...)
		}
		return len(bytes.TrimSpace(children)) > 0
	})
	var stage int
	if _, err := fmt.Sscan(string(children), &stage); err != nil {
		t.Fatalf("the helper's confining stage: %q: %v", children, err)
	}
	// Waiting for its call: a signal before the stage's runtime has
	// installed its handlers would be dropped, as for any pid namespace's
	// init without one.
	var wchan []byte
	await.Until(t, 10*time.Second, "the stage waiting for its call", func() bool {
		wchan, _ = os.ReadFile(fmt.Sprintf("/proc/%d/wchan", stage))
		return strings.Contains(string(wchan), "unix_stream_read")
	}, func() string { return fmt.Sprintf("stage %d (of %q) waits in %q", stage, children, wchan) })
	if err := syscall.Kill(stage, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The outer stage reaps it and exits.
	waited := make(chan *os.ProcessState, 1)
	go func() {
		state, _ := h.proc.Wait()
		waited <- state
	}()
	var state *os.ProcessState
	select {
	case state = <-waited:
	case <-time.After(10 * time.Second):
		h.proc.Kill()
		t.Fatal("the signalled stage still waits for a call 10 s later")
	}
	if code := state.ExitCode(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("the helper exited %d, want %d (its stage ended by SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	p.ready <- h
	if r := runPooled(t, context.Background(), p, e.policy(t), e.cwd, "/bin/sh", "-c", "echo ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("after a signalled stage: %+v", r)
	}
}

// An idle pool lets its helpers go, and its next call starts one itself
// and works as any other; the pool is full again behind it.
func TestPoolIdleLetsHelpersGo(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	p := newTestPool(t)
	await.Until(t, 10*time.Second, "the pool filling", func() bool { return p.Idle() >= 2 })
	var pids []int
	for range 2 {
		h := <-p.ready
		pids = append(pids, h.proc.Pid)
		p.ready <- h
	}
	p.IdleAfter(200 * time.Millisecond)
	await.Until(t, 10*time.Second, "the idle pool letting its helpers go", func() bool {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return p.Drained() && p.Idle() == 0
	})
	// Long enough not to go idle again during the call.
	p.IdleAfter(time.Hour)
	if r := runPooled(t, context.Background(), p, e.policy(t), e.cwd, "/bin/sh", "-c", "echo ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("the first call after idling: %+v", r)
	}
	if p.Drained() {
		t.Error("still drained after a call")
	}
	await.Until(t, 10*time.Second, "the pool filling again", func() bool { return p.Idle() == 2 })
}
