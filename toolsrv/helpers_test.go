//go:build linux

package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/lab"
)

// procChildren lists the processes whose parent is pid and whose command
// line holds each of the words.
func procChildren(pid int, words ...string) []int {
	var out []int
	for p, parent := range lab.Parents() {
		if parent != pid {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		line := strings.ReplaceAll(string(cmdline), "\x00", " ")
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			out = append(out, p)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie has ended).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// waitingHelpers waits until the toolsrv child pid has n helpers waiting,
// each with its confining stage, and returns every one of their pids.
func waitingHelpers(t testing.TB, pid, n int) (helpers, stages []int) {
	t.Helper()
	await.Until(t, 10*time.Second, fmt.Sprintf("toolsrv %d having %d helpers waiting, each with its stage", pid, n), func() bool {
		helpers, stages = procChildren(pid, "__ollie_sandbox", "warm"), nil
		for _, h := range helpers {
			stages = append(stages, procChildren(h, "__ollie_sandbox", "warm-confine")...)
		}
		if len(helpers) != n || len(stages) != n {
			return false
		}
		// Each stage reads its socket: it has started, and closed what
		// it was started with to get there (the gate of its cgroup).
		for _, st := range stages {
			if w, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", st)); !strings.Contains(string(w), "unix_stream_read") {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("helpers %v, stages %v", helpers, stages) })
	return helpers, stages
}

func waitGone(t *testing.T, what string, pids []int) {
	t.Helper()
	for _, p := range pids {
		await.Until(t, 10*time.Second, fmt.Sprintf("%s %d ending with its toolsrv", what, p), func() bool { return !alive(p) })
	}
}

// A session's toolsrv runs sandboxed calls through helpers it started
// ahead of them, and refills the pool after each call.
func TestChildHelperPool(t *testing.T) {
	c, _ := spawnChild(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
	pid := c.current().cmd.Process.Pid
	before, _ := waitingHelpers(t, pid, helperPoolSize)
	res, err := c.Call(context.Background(), "echo", json.RawMessage(`{"text": "pooled"}`))
	if err != nil || res.Failed || !strings.Contains(res.Output, "pooled") || res.Sandbox != "default" {
		t.Fatalf("call: %+v %v", res, err)
	}
	after, _ := waitingHelpers(t, pid, helperPoolSize)
	used := 0
	for _, h := range before {
		if !slices.Contains(after, h) {
			used++
		}
	}
	if used != 1 {
		t.Errorf("helpers before the call %v, after %v: want exactly one taken and replaced", before, after)
	}
}

// A waiting helper holds nothing of the toolsrv's: no environment, the
// root directory, and no descriptor but its socket, /dev/null and the log.
func TestHelperCleanState(t *testing.T) {
	c, _ := spawnChild(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
	helpers, stages := waitingHelpers(t, c.current().cmd.Process.Pid, helperPoolSize)
	for _, p := range append(helpers, stages...) {
		dir := "/proc/" + strconv.Itoa(p)
		env, err := os.ReadFile(dir + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			// GORACE only in a race build (raceGORACE), as make test sets
			// it; the sandbox's own word that calls get their own /proc.
			if kv != "" && kv != "GOMAXPROCS=1" && kv != raceGORACE() && kv != "OLLIE_SANDBOX_OWN_PROC=1" {
				t.Errorf("helper %d has %q in its environment", p, kv)
			}
		}
		if cwd, err := os.Readlink(dir + "/cwd"); err != nil || cwd != "/" {
			t.Errorf("helper %d works in %q (%v), want /", p, cwd, err)
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			target, _ := os.Readlink(dir + "/fd/" + fd.Name())
			switch {
			case target == "/dev/null", strings.HasPrefix(target, "socket:"), strings.HasPrefix(target, "anon_inode:"):
			case strings.HasPrefix(target, "/sys/fs/cgroup/"): // the Go runtime's, for GOMAXPROCS
			case strings.HasPrefix(target, "mnt:[") && !sameNS(target, c.current().cmd.Process.Pid):
				// Its own stage's mount namespace, held so that its
				// teardown is off the call's path (holdMountNS).
			case fd.Name() == "2": // the toolsrv's log
			default:
				t.Errorf("helper %d holds fd %s: %s", p, fd.Name(), target)
			}
		}
	}
}

// The pool's helpers die with their toolsrv, killed outright or closed.
func TestHelpersDieWithChild(t *testing.T) {
	t.Run("killed", func(t *testing.T) {
		c, _ := spawnChild(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
		helpers, stages := waitingHelpers(t, c.current().cmd.Process.Pid, helperPoolSize)
		c.current().cmd.Process.Kill()
		waitGone(t, "helper", helpers)
		waitGone(t, "confining stage", stages)
	})
	t.Run("closed", func(t *testing.T) {
		c, _ := spawnChild(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
		helpers, stages := waitingHelpers(t, c.current().cmd.Process.Pid, helperPoolSize)
		c.Close()
		waitGone(t, "helper", helpers)
		waitGone(t, "confining stage", stages)
	})
}

// An idle connection found broken is replaced: the operation reconnects
// instead of failing.
func TestChildReconnects(t *testing.T) {
	c, _ := spawnChild(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
	ctx := context.Background()
	if _, err := c.ReadFile(ctx, "tools"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	idle := slices.Clone(c.idle)
	c.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d idle connections after one operation, want 1", len(idle))
	}
	idle[0].conn.Close() // as a connection the child dropped
	if b, err := c.ReadFile(ctx, "tools"); err != nil || !strings.HasPrefix(string(b), "echo\t") {
		t.Fatalf("after a broken idle connection: %q %v", b, err)
	}
	// An error the child answers is the operation's: no second try.
	if _, err := c.ReadFile(ctx, "no/such/file"); err == nil {
		t.Fatal("reading a missing file succeeded")
	}
}

// sameNS reports whether the namespace link target is the one process pid is in.
func sameNS(target string, pid int) bool {
	own, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	return own == target
}
