package toolsrv

import (
	"context"
	"encoding/json"
	"errors"
	"io"
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

func TestProcsCloseKillsAll(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		"hang": {`{"description": "Hang."}`, "#!/bin/sh\nsleep 300 &\nsleep 300\n"},
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
	if err := syscall.Kill(-p.pid, 0); err == nil {
		t.Fatalf("process group %d survived Close", p.pid)
	}
}
