package toolsrv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readUntil reads p's output from offset 0 until it contains want.
func readUntil(t *testing.T, p *Proc, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(out), want) {
		n, err := p.Out.ReadAt(ctx, buf, int64(len(out)))
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading output %q: %v", out, err)
		}
		out = append(out, buf[:n]...)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("output %q lacks %q", out, want)
	}
	return string(out)
}

func TestProcs(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		"ticker": {`{"description": "Tick."}`, "#!/bin/sh\ni=0\nwhile true; do i=$((i+1)); echo tick $i; sleep 0.05; done\n"},
		"quick":  {echoMeta, "#!/bin/sh\ncat\necho done >&2\n"},
	})
	now := time.Unix(1000, 0)
	ps := &Procs{Runner: r, Now: func() time.Time { return now }}
	defer ps.Close()
	ctx := context.Background()

	tick, err := ps.Start(ctx, "ticker", json.RawMessage(`{"background": true}`))
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, tick, "tick 3\n")
	if tick.Status() != "running" || tick.Sandbox != "default" {
		t.Fatalf("status %q sandbox %q", tick.Status(), tick.Sandbox)
	}
	if err := ps.Dismiss(tick.ID); !errors.Is(err, ErrRunning) {
		t.Fatalf("dismiss a running process: %v", err)
	}
	if err := ps.Signal(tick.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, tick, "[ticker 1: killed by term]")
	if tick.Status() != "killed by term" {
		t.Errorf("status after term = %q; output %q", tick.Status(), out)
	}

	q, err := ps.Start(ctx, "quick", json.RawMessage(`{"text": "hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	out = readUntil(t, q, "[quick 2: exit status 0]")
	if !strings.HasPrefix(out, `{"text": "hi"}`) || !strings.Contains(out, "done\n") {
		t.Errorf("quick output %q", out)
	}
	if _, err := ps.Start(ctx, "quick", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "text") {
		t.Errorf("invalid background call: %v", err)
	}

	// Exited processes linger for Linger after their last read.
	if n := ps.Collect(); n != 0 {
		t.Fatalf("collected %d at once", n)
	}
	now = now.Add(5 * time.Minute)
	q.Seen(now)
	now = now.Add(6 * time.Minute)
	if n := ps.Collect(); n != 1 {
		t.Fatalf("collected %d, want the ticker only", n)
	}
	if _, err := ps.Get(tick.ID); !errors.Is(err, ErrNoProc) {
		t.Errorf("ticker still listed: %v", err)
	}
	if err := ps.Dismiss(q.ID); err != nil {
		t.Fatal(err)
	}
	if len(ps.List()) != 0 {
		t.Errorf("list after dismiss: %d", len(ps.List()))
	}
}

// TestProcsCloseKillsAll: Close, even the moment after Start, before the
// call's sandbox helper listens for signals, ends the call and every
// process it started, setsid or not, before it returns. Nothing is left,
// not even a zombie: the helper is their subreaper and reaps each before
// it exits. (A zombie in the call's group is a process orphaned to init,
// which some containers' init never reaps: the helper had dropped the
// kill, and the caller's SIGKILL after WaitDelay ended it outright.)
func TestProcsCloseKillsAll(t *testing.T) {
	marker := fmt.Sprintf("300.%06d", time.Now().UnixNano()%1e6)
	r, _ := runner(t, map[string][2]string{
		"hang": {`{"description": "Hang."}`, "#!/bin/sh\nsleep " + marker + " &\nsetsid sleep " + marker + " &\nsleep " + marker + "\n"},
	})
	ps := &Procs{Runner: r}
	p, err := ps.Start(context.Background(), "hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { ps.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not kill the background process")
	}
	if p.Running() {
		t.Fatal("still running after Close")
	}
	if st := p.Status(); st == "signal: killed" {
		t.Errorf("the call's helper was killed outright (%s), not ended by Close's kill", st)
	}
	if left := leftOf(p.pid, marker); len(left) > 0 {
		t.Errorf("left after Close:\n%s", strings.Join(left, "\n"))
		for _, l := range left {
			var pid int
			fmt.Sscan(l, &pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// leftOf lists the processes in process group pgid or whose command line
// holds marker, zombies included: "PID (COMM) STATE ppid PPID".
func leftOf(pgid int, marker string) []string {
	var left []string
	names, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range names {
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		// PID (COMM) STATE PPID PGRP ...: COMM may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		if f[2] == strconv.Itoa(pgid) || bytes.Contains(cmdline, []byte(marker)) {
			left = append(left, fmt.Sprintf("%s %s ppid %s", stat[:i+1], f[0], f[1]))
		}
	}
	return left
}
