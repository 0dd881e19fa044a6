package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/agent/backend"
	"ollie/ns"
	"ollie/ns/nsdir"

	"ollie/internal/lab"
	"ollie/internal/nstest"
)

// startTestDaemon runs a daemon in a fresh namespace directory and stops
// it when the test ends.
func startTestDaemon(t *testing.T) *Daemon {
	t.Helper()
	dir := nstest.ShortTempDir(t)
	d, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return d
}

// attachPeer attaches to d's namespace over a pipe as the given kind of
// peer presenting aname: what the kernel would prove of a real client is
// what peer says. Tests of real sandboxed tools are in attack_test.go.
func attachPeer(t *testing.T, d *Daemon, kind ns.PeerKind, uname, aname string) *client.Fsys {
	t.Helper()
	a, b := net.Pipe()
	go d.srv.ServeConn(a, ns.Peer{Kind: kind, UID: -1})
	c, err := client.NewConn(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fs, err := c.Attach(nil, uname, aname)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// attachAgent attaches as a tool of the agent with the given ID would:
// sandboxed, with the agent's capability.
func attachAgent(t *testing.T, d *Daemon, id string) *client.Fsys {
	t.Helper()
	e := d.ns.agents.get(id)
	if e == nil {
		t.Fatalf("no agent %s", id)
	}
	return attachPeer(t, d, ns.Sandboxed, id, e.token)
}

func TestSecondServerRefused(t *testing.T) {
	d := startTestDaemon(t)
	_, err := Start(Config{StateDir: t.TempDir(), Dir: filepath.Dir(d.Socket), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second daemon: got %v, want ErrAlreadyRunning", err)
	}
	if !strings.Contains(err.Error(), d.Socket) || !strings.Contains(err.Error(), "pid") {
		t.Errorf("error should name the socket and the holder's pid: %v", err)
	}
	// The first one still serves.
	fs := nstest.Attach(t, d.Socket, "")
	if got := nstest.ReadFile(t, fs, "session/idx"); got != "" {
		t.Errorf("idx = %q, want empty", got)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	sock := filepath.Join(dir, "ollie")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // a dead server's socket: the file stays, nobody answers
	if _, err := os.Lstat(sock); err != nil {
		t.Fatal("stale socket not left behind:", err)
	}
	d, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start over a stale socket: %v", err)
	}
	fs := nstest.Attach(t, sock, "")
	if !strings.Contains(nstest.ReadFile(t, fs, "help"), "session/new") {
		t.Error("help does not describe session/new")
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still present after shutdown: %v", err)
	}
}

func TestStartRefusals(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("not a socket", func(t *testing.T) {
		dir := nstest.ShortTempDir(t)
		os.WriteFile(filepath.Join(dir, "ollie"), []byte("x"), 0600)
		_, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: quiet})
		if err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("path too long", func(t *testing.T) {
		dir := filepath.Join(nstest.ShortTempDir(t), strings.Repeat("d", 110))
		_, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: quiet})
		if err == nil || !strings.Contains(err.Error(), "108") && !strings.Contains(err.Error(), "107-byte") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("directory of another user", func(t *testing.T) {
		if os.Getuid() != 0 {
			lab.Root(t, "giving a directory to another user")
		}
		dir := nstest.ShortTempDir(t)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: quiet})
		if !errors.Is(err, nsdir.ErrNotYours) || !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("got %v", err)
		}
	})
	// Others may have left a socket or a lock in it: refused, not mended.
	t.Run("world-writable directory refused", func(t *testing.T) {
		dir := nstest.ShortTempDir(t)
		os.Chmod(dir, 0777)
		_, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: quiet})
		if !errors.Is(err, nsdir.ErrNotPrivate) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("readable directory made private", func(t *testing.T) {
		dir := nstest.ShortTempDir(t)
		os.Chmod(dir, 0755)
		d, err := Start(Config{StateDir: t.TempDir(), Dir: dir, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Shutdown(context.Background())
		fi, _ := os.Stat(dir)
		if fi.Mode().Perm() != 0700 {
			t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
		}
		si, _ := os.Stat(d.Socket)
		if si.Mode().Perm() != 0600 {
			t.Errorf("socket mode %v, want 0600", si.Mode().Perm())
		}
	})
}

func TestSessions(t *testing.T) {
	d := startTestDaemon(t)
	fs := nstest.Attach(t, d.Socket, "")

	ev, err := fs.Open("event", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if _, err := ev.Write([]byte("session.*")); err != nil {
		t.Fatal(err)
	}

	name, err := nstest.RdWr(fs, "session/new", "name=proj cwd=/tmp")
	if err != nil || name != "proj\n" {
		t.Fatalf("session/new = %q, %v", name, err)
	}
	id := strings.TrimSpace(nstest.ReadFile(t, fs, "session/proj/id"))
	if len(id) != 36 {
		t.Fatalf("id %q is not a UUID", id)
	}
	if got, want := nstest.ReadFile(t, fs, "session/idx"), id+"\tproj\tfalse\ttrue\t-\t/tmp\tok\t-\n"; got != want {
		t.Errorf("idx = %q, want %q", got, want)
	}
	if got := nstest.ReadFile(t, fs, "aliases"); got != id+"\tsession/proj\n" {
		t.Errorf("aliases = %q", got)
	}
	env := nstest.ReadFile(t, fs, "session/proj/env")
	for _, want := range []string{"OLLIE_SESSION_ID=" + id, "OLLIE_SESSION_NAME=proj", "OLLIE_CWD=/tmp"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}

	// The ID is an invisible alias: it walks, but is not listed.
	if got := nstest.ReadFile(t, fs, "session/"+id+"/name"); got != "proj\n" {
		t.Errorf("name via alias = %q", got)
	}
	dirf, _ := fs.Open("session", plan9.OREAD)
	ents, _ := dirf.Dirreadall()
	dirf.Close()
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if strings.Join(names, " ") != "new idx proj" {
		t.Errorf("session/ lists %v", names)
	}

	// Rename by writing name; the old name is gone, the ID still works.
	if err := nstest.WriteFile(fs, "session/proj/name", "renamed\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.TryRead(fs, "session/proj/id"); err == nil {
		t.Error("old name still walks after rename")
	}
	if got := nstest.ReadFile(t, fs, "session/renamed/id"); strings.TrimSpace(got) != id {
		t.Errorf("renamed id = %q", got)
	}
	if err := nstest.WriteFile(fs, "session/renamed/name", "bad/name"); err == nil || !strings.Contains(err.Error(), "invalid session name") {
		t.Errorf("bad rename: %v", err)
	}

	// Bad requests say what was wrong.
	for req, want := range map[string]string{
		"name=renamed":       "taken",
		"colour=blue":        `unknown key "colour"`,
		"name=a cwd=rel":     "not an absolute path",
		"justaword":          "not key=value",
		"name=" + id[:36]:    "look like a session ID",
		"name=x remote=web1": "ollie -H fleet rdwr session/new",
	} {
		if _, err := nstest.RdWr(fs, "session/new", req); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("session/new %q: %v, want error containing %q", req, err, want)
		}
	}

	// Session controls.
	if got, err := nstest.RdWr(fs, "session/renamed/ctl", "pause"); err != nil || got != "ok\n" {
		t.Fatalf("pause: %q %v", got, err)
	}
	if got := nstest.ReadFile(t, fs, "session/renamed/paused"); got != "true\n" {
		t.Errorf("paused = %q", got)
	}
	if _, err := nstest.RdWr(fs, "session/renamed/ctl", "explode"); err == nil || !strings.Contains(err.Error(), "valid: help, kill, pause, resume") {
		t.Errorf("unknown session ctl: %v", err)
	}
	if _, err := nstest.RdWr(fs, "session/renamed/ctl", "kill"); err != nil {
		t.Fatal(err)
	}
	if got := nstest.ReadFile(t, fs, "session/idx"); got != "" {
		t.Errorf("idx after kill = %q", got)
	}

	// The subscription saw the whole life of the session, in order.
	want := []string{
		"session." + id + ".new proj",
		"session." + id + ".name renamed",
		"session." + id + ".paused true",
		"session." + id + ".kill renamed",
	}
	got := readLines(t, ev, len(want))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events = %q, want %q", got, want)
	}
}

// readLines reads n lines from f, failing the test if they do not come.
func readLines(t *testing.T, f *client.Fid, n int) []string {
	t.Helper()
	type result struct {
		lines []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var lines []string
		buf := make([]byte, 8192)
		for len(lines) < n {
			m, err := f.Read(buf)
			if err != nil {
				done <- result{lines, err}
				return
			}
			lines = append(lines, strings.Split(strings.TrimSuffix(string(buf[:m]), "\n"), "\n")...)
		}
		done <- result{lines, nil}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("after %q: %v", r.lines, r.err)
		}
		return r.lines
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %d lines", n)
	}
	return nil
}

func TestRootCtl(t *testing.T) {
	d := startTestDaemon(t)
	fs := nstest.Attach(t, d.Socket, "")
	if _, err := nstest.RdWr(fs, "ctl", "frobnicate"); err == nil || !strings.Contains(err.Error(), "valid: help, invalidate, kill") {
		t.Errorf("unknown ctl: %v", err)
	}
	if got, err := nstest.RdWr(fs, "ctl", "invalidate"); err != nil || got != "ok\n" {
		t.Errorf("invalidate: %q %v", got, err)
	}
	// A plain read of event blocks until the next event, then ends.
	done := make(chan string)
	ev, err := fs.Open("event", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		b, _ := io.ReadAll(ev)
		done <- string(b)
	}()
	if _, err := nstest.RdWr(fs, "session/new", "name=x"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if !strings.HasPrefix(got, "session.") || !strings.HasSuffix(got, ".new x\n") {
			t.Errorf("event read = %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("event read did not return after an event")
	}
	// Non-admin users cannot use the server ctl.
	other := attachPeer(t, d, ns.Sandboxed, "mallory", "")
	if _, err := nstest.RdWr(other, "ctl", "kill"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("mallory ctl kill: %v", err)
	}
	// kill shuts the daemon down.
	if got, err := nstest.RdWr(fs, "ctl", "kill"); err != nil || got != "shutting down\n" {
		t.Fatalf("kill: %q %v", got, err)
	}
	select {
	case <-d.killed:
	case <-time.After(5 * time.Second):
		t.Fatal("ctl kill did not ask the daemon to stop")
	}
}

// TestPeerCredentials checks the Unix socket's trust boundary: a process
// of another OS user that reaches the socket is disconnected before it
// can speak 9P.
func TestPeerCredentials(t *testing.T) {
	if os.Getuid() != 0 {
		lab.Root(t, "running a client as another user")
	}
	d := startTestDaemon(t)
	// Open the path so that only the peer check stands in the way.
	os.Chmod(filepath.Dir(d.Socket), 0755)
	os.Chmod(d.Socket, 0777)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bindir, err := os.MkdirTemp("", "bin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bindir)
	os.Chmod(bindir, 0755)
	copyExe := filepath.Join(bindir, "peer.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyExe, data, 0755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copyExe, "-test.run=^TestHelperDial$", "-test.v")
	cmd.Env = append(os.Environ(), "OLLIE_TEST_DIAL="+d.Socket)
	cmd.SysProcAttr = nobody()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "dial: connected") || !strings.Contains(string(out), "version: ") || strings.Contains(string(out), "version: ok") {
		t.Fatalf("another user's client was not refused:\n%s", out)
	}
	// The owner still gets in.
	fs := nstest.Attach(t, d.Socket, "")
	nstest.ReadFile(t, fs, "help")
}

// TestHelperDial is run by TestPeerCredentials as another user.
func TestHelperDial(t *testing.T) {
	sock := os.Getenv("OLLIE_TEST_DIAL")
	if sock == "" {
		return // not run as a helper
	}
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Log("dial: connected")
	_, err = client.NewConn(nc)
	if err != nil {
		t.Logf("version: %v", err)
		return
	}
	t.Log("version: ok")
}

// TestTCPUntrusted checks that the optional TCP listener serves the same
// namespace but never grants the admin bypass.
func TestTCPUntrusted(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	d, err := Start(Config{StateDir: t.TempDir(), Dir: dir, TCP: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	c, err := client.Dial("tcp", d.TCP.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, user := range []string{"", "admin"} {
		fs, err := c.Attach(nil, user, "")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(nstest.ReadFile(t, fs, "help"), "session/") {
			t.Error("help over TCP lacks session/")
		}
		if _, err := nstest.RdWr(fs, "ctl", "kill"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("uname %q over TCP: ctl kill: %v, want permission denied", user, err)
		}
	}
	select {
	case <-d.killed:
		t.Fatal("a TCP client stopped the server")
	default:
	}
}

// TestInvalidateBackends checks that ctl invalidate reads backends.json
// again: a good edit takes effect at once, and a bad one is reported
// there, naming the file, while the backends already loaded stay.
// backendsDaemon starts olliesrv on a backends.json of its own naming
// the backend "first", and returns the admin's attach and how to write
// the file.
func backendsDaemon(t *testing.T) (*client.Fsys, func(string)) {
	t.Helper()
	conf := t.TempDir()
	file := filepath.Join(conf, "ollie", "backends.json")
	os.MkdirAll(filepath.Dir(file), 0700)
	write := func(text string) {
		if err := os.WriteFile(file, []byte(text), 0600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"XDG_CONFIG_HOME": conf}
	load := func() (*backend.Registry, error) {
		return backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	}
	write(`{"backends": {"first": {"type": "openai", "url": "http://127.0.0.1:1/v1", "model": "m1"}}}`)
	reg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: reg, LoadBackends: load,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	fs := nstest.Attach(t, d.Socket, "")
	if got := nstest.ReadFile(t, fs, "backends"); !strings.HasPrefix(got, "first\t") {
		t.Fatalf("backends = %q", got)
	}
	return fs, write
}

func TestInvalidateBackends(t *testing.T) {
	fs, write := backendsDaemon(t)

	write(`{"backends": {"second": {"type": "openai", "url": "http://127.0.0.1:1/v1", "model": "m2"}}}`)
	if got, err := nstest.RdWr(fs, "ctl", "invalidate"); err != nil || got != "ok\n" {
		t.Fatalf("invalidate after a good edit: %q %v", got, err)
	}
	if got := nstest.ReadFile(t, fs, "backends"); !strings.HasPrefix(got, "second\t") || strings.Contains(got, "first") {
		t.Errorf("backends after the edit = %q", got)
	}

	write(`{"backends": {"third": {"type": "openai", "modle": "m3"}}}`)
	_, err := nstest.RdWr(fs, "ctl", "invalidate")
	if err == nil || !strings.Contains(err.Error(), "backends.json") || !strings.Contains(err.Error(), "modle") {
		t.Errorf("invalidate after a bad edit: %v, want an error naming the file and the field", err)
	}
	if got := nstest.ReadFile(t, fs, "backends"); !strings.HasPrefix(got, "second\t") {
		t.Errorf("a bad edit replaced the backends: %q", got)
	}
}

// TestBackendsEditRead (issue 31, item 6): an edit of backends.json is
// read at the next use of the backends, without ctl invalidate; a bad
// edit keeps the backends already loaded.
func TestBackendsEditRead(t *testing.T) {
	fs, write := backendsDaemon(t)
	write(`{"backends": {"second": {"type": "openai", "url": "http://127.0.0.1:1/v1", "model": "m2"}}}`)
	if got := nstest.ReadFile(t, fs, "backends"); !strings.HasPrefix(got, "second\t") || strings.Contains(got, "first") {
		t.Errorf("backends after an edit, without invalidate = %q", got)
	}
	write(`{"backends": {"third": {"type": "openai", "modle": "m3"}}}`)
	if got := nstest.ReadFile(t, fs, "backends"); !strings.HasPrefix(got, "second\t") {
		t.Errorf("a bad edit replaced the backends: %q", got)
	}
}
