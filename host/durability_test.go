package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"9fans.net/go/plan9/client"

	"ollie/agent/backend"

	"ollie/internal/lab"
	"ollie/internal/nstest"
)

// tinyDisk mounts a 64 KiB tmpfs for the test, unmounted when it ends.
// Mounting needs root, which make test (the lab tier) has: there the test
// must run, so only an unprivileged run may skip it.
func tinyDisk(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		lab.Root(t, "mounting a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount a 64 KiB tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file until the disk holding dir is full, and returns a
// function that frees the space again.
func fill(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	f.Close()
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// padToPage writes the agent's plan so that the session file ends a few
// bytes short of a page: tmpfs takes writes into a page it has given a file
// even when it is full, so only then does the next record (any is longer
// than 48 bytes) need space it has not got, and it tears on the way, as a
// full disk leaves a line. It returns the plan.
func padToPage(t *testing.T, fs *client.Fsys, file string) string {
	t.Helper()
	size := func() int64 {
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	plan := "x"
	before := size()
	if err := nstest.WriteFile(fs, "session/full/agent/a/plan", plan); err != nil {
		t.Fatal(err)
	}
	// A record's length varies by a few bytes with its seq and time, so
	// aim at 8 bytes short and try again until within 48.
	for range 5 {
		after := size()
		if slack := 4096 - after%4096; slack <= 48 {
			return plan
		}
		overhead := after - before - int64(len(plan))
		need := 4096 - after%4096 - 8
		if need < overhead+1 {
			need += 4096
		}
		plan = strings.Repeat("x", int(need-overhead))
		before = after
		if err := nstest.WriteFile(fs, "session/full/agent/a/plan", plan); err != nil {
			t.Fatal(err)
		}
	}
	if slack := 4096 - size()%4096; slack > 48 {
		t.Fatalf("could not pad the session file to a few bytes short of a page: it has %d bytes", size())
	}
	return plan
}

// durableDaemon starts olliesrv keeping its sessions in state, with every
// backend be and no tools, and attaches as the admin.
func durableDaemon(t *testing.T, state string, be backend.Backend) (*Daemon, *client.Fsys) {
	t.Helper()
	d, err := Start(Config{StateDir: state, Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backends: func(string) (backend.Backend, error) { return be, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	return d, nstest.Attach(t, d.Socket, "")
}

// TestDiskFull runs a session on a disk that fills up, for real: every
// change is refused with an error naming the session file and applied only
// once written, the session says it cannot write, and once there is space
// again the same daemon writes again and a restart finds every change that
// succeeded.
func TestDiskFull(t *testing.T) {
	state := tinyDisk(t)
	data, _ := filepath.Abs("../data")
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "probe.meta"), []byte(`{"description": "A tool to load and unload."}`), 0644)
	os.WriteFile(filepath.Join(tools, "probe"), []byte("#!/bin/sh\necho probe\n"), 0755)
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	be := &twoStep{}
	d, fs := durableDaemon(t, state, be)
	if _, err := nstest.RdWr(fs, "session/new", "name=full cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/full/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	sid := strings.TrimSpace(nstest.ReadFile(t, fs, "session/full/id"))
	file := filepath.Join(state, sid+".jsonl")
	plan := padToPage(t, fs, file)

	free := fill(t, state)
	// Each refusal names the session file, never a temporary one, and why.
	refused := func(what string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s on a full disk succeeded", what)
		case !strings.Contains(err.Error(), file+":") || strings.Contains(err.Error(), ".create-"):
			t.Errorf("%s on a full disk: %v; want the error to name %s", what, err, file)
		case !strings.Contains(err.Error(), "no space left on device"):
			t.Errorf("%s on a full disk: %v; want it to say the disk is full", what, err)
		}
	}
	refused("renaming the session", nstest.WriteFile(fs, "session/full/name", "renamed"))
	if got := nstest.ReadFile(t, fs, "session/"+sid+"/name"); got != "full\n" {
		t.Errorf("a rename that was not written took effect: the session is named %q", got)
	}
	if idx := nstest.ReadFile(t, fs, "session/idx"); idxState(idx) != "unwritable" {
		t.Errorf("session/idx after a failed write = %q, want the state unwritable", idx)
	}
	refused("renaming the agent", nstest.WriteFile(fs, "session/full/agent/a/name", "b"))
	if got := nstest.ReadFile(t, fs, "session/full/agent/a/name"); got != "a\n" {
		t.Errorf("an agent rename that was not written took effect: the agent is named %q", got)
	}
	_, err := nstest.RdWr(fs, "session/full/agent/a/ctl", "model m")
	refused("switching the model", err)
	if cfg := nstest.ReadFile(t, fs, "session/full/agent/a/cfg"); strings.Contains(cfg, `"model": "m"`) {
		t.Errorf("a model switch that was not written took effect: %s", cfg)
	}
	_, err = nstest.RdWr(fs, "session/full/agent/a/ctl", "tool_unload probe")
	refused("unloading a tool", err)
	if got, _ := nstest.RdWr(fs, "session/full/agent/a/ctl", "tools"); !strings.Contains(got, "probe\t") {
		t.Errorf("a tool_unload that was not written took effect: %q", got)
	}
	_, err = nstest.RdWr(fs, "session/full/agent/a/ctl", "agent coding")
	refused("switching the profile", err)
	if got, _ := nstest.RdWr(fs, "session/full/agent/a/ctl", "agent"); got != "default\n" {
		t.Errorf("a profile switch that was not written took effect: %q", got)
	}
	_, err = nstest.RdWr(fs, "session/full/agent/a/ctl", "inject remember this")
	refused("injecting", err)
	_, err = nstest.RdWr(fs, "session/full/agent/a/ctl", "clear")
	refused("clearing the history", err)
	refused("writing the plan", nstest.WriteFile(fs, "session/full/agent/a/plan", "1. wait"))
	if got := nstest.ReadFile(t, fs, "session/full/agent/a/plan"); got != plan {
		t.Errorf("a plan that was not written took effect: %q", got)
	}
	_, err = nstest.RdWr(fs, "session/full/ctl", "save")
	refused("ctl save", err)
	if _, err := nstest.RdWr(fs, "session/new", "name=another cwd=/tmp"); err == nil || !strings.Contains(err.Error(), state+"/") ||
		strings.Contains(err.Error(), ".create-") || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("a new session on a full disk: %v; want the error to name its session file and the full disk", err)
	}
	if idx := nstest.ReadFile(t, fs, "session/idx"); strings.Count(idx, "\n") != 1 {
		t.Errorf("session/idx after a failed session/new = %q, want only the first session", idx)
	}

	free()
	if got, err := nstest.RdWr(fs, "session/full/ctl", "save"); err != nil || got != "saved: "+file+"\n" {
		t.Errorf("ctl save once there is space: %q %v", got, err)
	}
	if idx := nstest.ReadFile(t, fs, "session/idx"); idxState(idx) != "ok" {
		t.Errorf("session/idx once the file takes writes = %q, want the state ok", idx)
	}
	if err := nstest.WriteFile(fs, "session/full/name", "renamed"); err != nil {
		t.Errorf("renaming once there is space: %v", err)
	}
	if err := nstest.WriteFile(fs, "session/renamed/agent/a/name", "b"); err != nil {
		t.Errorf("renaming the agent once there is space: %v", err)
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// What was refused is not in the file; what succeeded after is.
	d, fs = durableDaemon(t, state, be)
	if idx := nstest.ReadFile(t, fs, "session/idx"); !strings.HasPrefix(idx, sid+"\trenamed\t") || idxState(idx) != "ok" || strings.Count(idx, "\n") != 1 {
		t.Errorf("restored session/idx = %q", idx)
	}
	if got := nstest.ReadFile(t, fs, "session/renamed/agent/b/plan"); got != plan {
		t.Errorf("restored plan %q, want the one before the disk was full", got)
	}
	if cfg := nstest.ReadFile(t, fs, "session/renamed/agent/b/cfg"); strings.Contains(cfg, `"model": "m"`) {
		t.Errorf("restored model switch that was refused: %s", cfg)
	}
	if log := nstest.ReadFile(t, fs, "session/renamed/agent/b/log"); strings.Contains(log, "remember this") {
		t.Errorf("restored an injection that was refused: %s", log)
	}
	if st := nstest.ReadFile(t, fs, "status"); !strings.Contains(st, "\ndamaged 0\n") || !strings.Contains(st, "\nprotection protected paths ") {
		t.Errorf("status after the restart, with no damage and the protection mode:\n%s", st)
	}
	d.Shutdown(context.Background())
}

// TestDamagedSessionFiles: session files that cannot be restored show in
// session/idx and status, not only in the log, and the others come back.
func TestDamagedSessionFiles(t *testing.T) {
	state := t.TempDir()
	d, fs := durableDaemon(t, state, &twoStep{})
	if _, err := nstest.RdWr(fs, "session/new", "name=good cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	good := strings.TrimSpace(nstest.ReadFile(t, fs, "session/good/id"))
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	const (
		badHeader = "0b7c5f2e-0000-4000-8000-000000000001"
		badMiddle = "0b7c5f2e-0000-4000-8000-000000000002"
		newer     = "0b7c5f2e-0000-4000-8000-000000000003"
	)
	now := time.Now().UTC().Format(time.RFC3339)
	files := map[string]string{
		badHeader: "{\"kind\":\"head",
		badMiddle: `{"kind":"header","storageVersion":1,"id":"` + badMiddle + `","createdAt":"` + now + `","meta":{"name":"m","cwd":"/tmp"}}` + "\n" +
			"garbage\n" +
			`{"kind":"session.paused","seq":2,"time":"` + now + `","paused":true}` + "\n",
		newer: `{"kind":"header","storageVersion":99,"id":"` + newer + `","createdAt":"` + now + `"}` + "\n",
	}
	for id, content := range files {
		if err := os.WriteFile(filepath.Join(state, id+".jsonl"), []byte(content), 0600); err != nil {
			t.Fatal(err)
		}
	}

	_, fs = durableDaemon(t, state, &twoStep{})
	idx := nstest.ReadFile(t, fs, "session/idx")
	for _, want := range []string{
		good + "\tgood\tfalse\ttrue\t-\t/tmp\tok\t-\n",
		badHeader + "\t-\t-\tfalse\t-\t-\tdamaged\t-\n",
		badMiddle + "\t-\t-\tfalse\t-\t-\tdamaged\t-\n",
		newer + "\t-\t-\tfalse\t-\t-\tnewer\t-\n",
	} {
		if !strings.Contains(idx, want) {
			t.Errorf("session/idx lacks %q:\n%s", want, idx)
		}
	}
	st := nstest.ReadFile(t, fs, "status")
	want := "damaged 3\ndamaged_files " + badHeader + ".jsonl " + badMiddle + ".jsonl " + newer + ".jsonl\n"
	if !strings.Contains(st, want) {
		t.Errorf("status:\n%s\nwant it to hold:\n%s", st, want)
	}
	if !strings.Contains(st, "\nsessions 1\n") {
		t.Errorf("status counts the damaged files as sessions:\n%s", st)
	}
	for id, content := range files {
		if got, _ := os.ReadFile(filepath.Join(state, id+".jsonl")); string(got) != content {
			t.Errorf("the damaged file %s was changed: %q", id, got)
		}
	}
}

// idxState is the state column of session/idx's first line:
// id, name, paused, connected, remote, cwd, state, yolo.
func idxState(idx string) string {
	line, _, _ := strings.Cut(idx, "\n")
	if f := strings.Split(line, "\t"); len(f) > 6 {
		return f[6]
	}
	return ""
}
