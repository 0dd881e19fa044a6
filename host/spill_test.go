package host

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// TestSpillWithSession follows a session's cut tool output through the
// daemon: a dead daemon's area is swept at start, the model's note names
// a file in the session's private directory, and the directory goes with
// the session (ctl kill) and the daemon's area with the daemon.
func TestSpillWithSession(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo a lot.", "readOnly": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\ncat >/dev/null\nseq 1 20000\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)

	state := t.TempDir()
	dead := filepath.Join(state, "ollie-spill", "daemon-dead")
	if err := os.MkdirAll(filepath.Join(dead, "session-1"), 0700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dead, "lock"), nil, 0600) // no one holds it
	os.WriteFile(filepath.Join(dead, "session-1", "echo.stdout-1"), []byte("old output"), 0600)

	be := &twoStep{}
	d, err := Start(Config{StateDir: state, Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backends: func(name string) (backend.Backend, error) { return be, nil }})
	if err != nil {
		t.Fatal(err)
	}
	down := false
	defer func() {
		if !down {
			d.Shutdown(context.Background())
		}
	}()
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead daemon's %s survived the start: %v", dead, err)
	}
	area := d.spill.Dir
	if filepath.Dir(area) != filepath.Join(state, "ollie-spill") {
		t.Errorf("the daemon's area is %s, not under %s/ollie-spill", area, state)
	}

	fs := nstest.Attach(t, d.Socket, "")
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=coder profile=default"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "session/s/agent/coder/prompt", "hello"); err != nil {
		t.Fatal(err)
	}
	var result string
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	await.Poll(ctx, func() bool { // the second request carries the tool's result
		be.mu.Lock()
		defer be.mu.Unlock()
		if len(be.seen) >= 2 {
			msgs := be.seen[1]
			result = msgs[len(msgs)-1].Content
		}
		return result != ""
	})
	m := regexp.MustCompile(`the whole output is in (\S+)\]`).FindStringSubmatch(result)
	if m == nil {
		t.Fatalf("the model was not told where the whole output is: %q", result[max(0, len(result)-300):])
	}
	session := filepath.Dir(m[1])
	if filepath.Dir(session) != area || !strings.HasPrefix(filepath.Base(session), "session-") {
		t.Fatalf("the output is in %s, not in a session directory under %s", m[1], area)
	}
	if fi, err := os.Lstat(session); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0700 {
		t.Fatalf("the session's spill directory: %v %v, want 0700", fi, err)
	}
	if whole, err := os.ReadFile(m[1]); err != nil || !bytes.HasSuffix(whole, []byte("\n20000\n")) {
		t.Fatalf("the file the note names: %d bytes, %v", len(whole), err)
	}

	if _, err := nstest.RdWr(fs, "session/s/ctl", "kill"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(session); !os.IsNotExist(err) {
		t.Errorf("the session's spill directory outlived ctl kill: %v", err)
	}
	if _, err := os.Lstat(area); err != nil {
		t.Errorf("the daemon's area went with one session: %v", err)
	}
	d.Shutdown(context.Background())
	down = true
	if _, err := os.Lstat(area); !os.IsNotExist(err) {
		t.Errorf("the daemon's area outlived its shutdown: %v", err)
	}
}
