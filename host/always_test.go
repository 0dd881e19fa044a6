package host

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9/client"

	"ollie/broker"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// TestBypassAlwaysKept: "always" written to bypass/pending is kept in the
// host's always file, and after the daemon restarts, the tool's next
// request is approved without waiting in bypass/pending; another tool
// still waits. (The test binary asks the gate itself: it is the daemon's
// executable and not sandboxed, as toolsrv is.)
func TestBypassAlwaysKept(t *testing.T) {
	always := filepath.Join(t.TempDir(), "config", "ollie", "bypass-always")
	dir := nstest.ShortTempDir(t)
	state := t.TempDir()
	start := func() (*Daemon, *client9) {
		t.Helper()
		d, err := Start(Config{StateDir: state, Dir: dir, AlwaysFile: always, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return d, &client9{t: t, d: d}
	}
	stop := func(d *Daemon) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	}

	d, c := start()
	answer := c.ask("fix_nginx")
	id := c.pending()
	if err := nstest.WriteFile(c.fs(), "bypass/pending/"+id, "always"); err != nil {
		t.Fatal(err)
	}
	if a := <-answer; a.Decision != broker.Always {
		t.Fatalf("the request answered always: %+v", a)
	}
	b, err := os.ReadFile(always)
	if err != nil || !strings.Contains(string(b), "\nfix_nginx\n") || !strings.Contains(string(b), "answered for request") {
		t.Fatalf("the always file: %v\n%s", err, b)
	}
	if fi, err := os.Stat(always); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the always file's mode: %v, %v", fi, err)
	}
	stop(d)

	d, c = start()
	defer stop(d)
	select {
	case a := <-c.ask("fix_nginx"):
		if a.Decision != broker.Once || !strings.Contains(a.Reason, "always") {
			t.Errorf("after a restart: %+v, want approved always", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("after a restart the tool approved always waited")
	}
	other := c.ask("other_tool")
	if err := nstest.WriteFile(c.fs(), "bypass/pending/"+c.pending(), "deny"); err != nil {
		t.Fatal(err)
	}
	if a := <-other; a.Decision != broker.Deny {
		t.Errorf("another tool: %+v, want it parked and denied", a)
	}
	if b, _ := os.ReadFile(always); strings.Count(string(b), "fix_nginx\n") != 1 || strings.Contains(string(b), "other_tool") {
		t.Errorf("the always file after the restart:\n%s", b)
	}
}

// client9 asks d's gate and reads its namespace.
type client9 struct {
	t *testing.T
	d *Daemon
}

func (c *client9) fs() *client.Fsys { return nstest.Attach(c.t, c.d.Socket, "") }

// ask sends a request for tool to the gate, as toolsrv does.
func (c *client9) ask(tool string) chan broker.Answer {
	c.t.Helper()
	conn, err := net.Dial("unix", filepath.Join(filepath.Dir(c.d.Socket), "elevate"))
	if err != nil {
		c.t.Fatal(err)
	}
	out := make(chan broker.Answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cv, a, err := broker.Ask(ctx, conn, &broker.Request{Session: "s", Tool: tool, Executable: "/bin/" + tool, Cwd: "/"})
		if err != nil {
			a = broker.Answer{Decision: "error", Reason: err.Error()}
		} else {
			cv.Close("ran")
		}
		out <- a
	}()
	return out
}

// pending waits for one request in bypass/pending and returns its id.
func (c *client9) pending() string {
	c.t.Helper()
	fs := c.fs()
	var id string
	await.Until(c.t, 10*time.Second, "a request in bypass/pending", func() bool {
		id = onlyPending(fs)
		return id != ""
	})
	return id
}
