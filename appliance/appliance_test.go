package appliance_test

// The listener against the real OpenSSH client: ssh -F /dev/null, a key of
// the test's own, a known_hosts of the test's own. No sshd is needed, nor
// root: these run in the plain tier wherever ssh is installed.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"

	"ollie/appliance"
	"ollie/host"
	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/ns/client"
	"ollie/shell"

	"ollie/internal/lab"
)

// helperEnv makes the test binary the ollie client: "rw" runs it with
// the daemon user's rights, "ro" after appliance.ReadOnly, as olliesrv
// ssh-readonly does.
const helperEnv = "OLLIE_SSHD_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "rw":
		os.Exit(shell.Main(os.Args[1:]))
	case "winsize":
		// Reports the terminal's size, and again at each SIGWINCH, until
		// its input ends.
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		report := func() {
			rows, cols, err := pty.Getsize(os.Stdin)
			fmt.Printf("size %dx%d %v\r\n", cols, rows, err)
		}
		report()
		go func() {
			for range winch {
				report()
			}
		}()
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "hang":
		// Says its pid, then waits for a signal, whatever its input does.
		fmt.Println(os.Getpid())
		signal.Ignore(syscall.SIGHUP)
		select {}
	case "env":
		fmt.Println(os.Getenv("XDG_STATE_HOME"))
		os.Exit(0)
	case "ro":
		if err := appliance.ReadOnly(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(shell.Main(os.Args[1:]))
	case "ro-hold", "agent", "agent-tool", "daemon", "flood":
		os.Exit(limitsHelper(os.Getenv(helperEnv)))
	}
	os.Exit(m.Run())
}

// syncBuffer is a log both the server and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// fixture is a daemon with its listener and a client key in
// authorized_keys.
type fixture struct {
	t          *testing.T
	dir        string // keys, known_hosts, authorized_keys
	ns         string // the namespace directory
	port       int
	key        string // the admin key's private file
	authKeys   string
	knownHosts string
	hostKey    string
	log        *syncBuffer
	srv        *appliance.Server
	helper     string                  // the helper's mode for every command; "" for rw or ro by the key
	configure  func(*appliance.Server) // if set, changes the server before it serves
}

func needSSH(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("ssh")
	lab.Need(t, err == nil, "the OpenSSH client (ssh)")
}

func start(t *testing.T) *fixture { t.Helper(); return startHelper(t, "") }

// startHelper starts a fixture whose every command is the helper in mode.
func startHelper(t *testing.T, mode string) *fixture {
	t.Helper()
	needSSH(t)
	return newFixture(t, mode, nil)
}

// newFixture starts a fixture for clients of the test's own (no OpenSSH
// client needed): every command is the helper in mode, and configure, if
// set, changes the server before it serves.
func newFixture(t *testing.T, mode string, configure func(*appliance.Server)) *fixture {
	t.Helper()
	dir := t.TempDir()
	// A Unix socket path has at most 107 bytes: the namespace goes under
	// a short directory of its own.
	nsDir, err := os.MkdirTemp("", "sshd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(nsDir) })
	d, err := host.Start(host.Config{Dir: nsDir, StateDir: filepath.Join(dir, "state"), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	f := &fixture{t: t, dir: dir, ns: nsDir, authKeys: filepath.Join(dir, "authorized_keys"),
		knownHosts: filepath.Join(dir, "known_hosts"), hostKey: filepath.Join(dir, "hostkey", appliance.HostKeyFile), log: &syncBuffer{}, helper: mode,
		configure: configure}
	var pub string
	f.key, pub = f.newKey("admin")
	f.authorize("", pub)
	f.serve()
	return f
}

// serve starts a listener on the fixture's host key (again, after a
// restart).
func (f *fixture) serve() {
	t := f.t
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f.srv = &appliance.Server{
		HostKey:        f.hostKey,
		AuthorizedKeys: f.authKeys,
		Namespace:      f.ns,
		Ollie: func(args []string, readOnly bool) *exec.Cmd {
			cmd := exec.Command(exe, args...)
			mode := "rw"
			if readOnly {
				mode = "ro"
			}
			if f.helper != "" {
				mode = f.helper
			}
			cmd.Env = []string{helperEnv + "=" + mode}
			return cmd
		},
		Env:      []string{"HOME=" + f.dir, "XDG_STATE_HOME=" + filepath.Join(f.dir, "xdgstate"), "PATH=" + os.Getenv("PATH")},
		KeyState: filepath.Join(f.dir, "keystate"),
		Log:      slog.New(slog.NewTextHandler(f.log, nil)),
	}
	if f.configure != nil {
		f.configure(f.srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.port = ln.Addr().(*net.TCPAddr).Port
	srv := f.srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { f.stop(srv, served) })
}

func (f *fixture) stop(srv *appliance.Server, served chan error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		f.t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, appliance.ErrServerClosed) {
		f.t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
}

// newKey writes an ed25519 key to dir/name (OpenSSH format, 0600) and
// returns its file and its authorized_keys line.
func (f *fixture) newKey(name string) (file, pub string) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, name)
	if err != nil {
		f.t.Fatal(err)
	}
	file = filepath.Join(f.dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0600); err != nil {
		f.t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		f.t.Fatal(err)
	}
	return file, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
}

// authorize appends a key's line, with options, to authorized_keys.
func (f *fixture) authorize(options, pub string) {
	af, err := os.OpenFile(f.authKeys, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		f.t.Fatal(err)
	}
	defer af.Close()
	if options != "" {
		options += " "
	}
	fmt.Fprintln(af, options+pub)
}

// sshArgs are the client's arguments for key, before the command.
func (f *fixture) sshArgs(key string, extra ...string) []string {
	args := []string{"-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + f.knownHosts, "-o", "StrictHostKeyChecking=accept-new",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-p", strconv.Itoa(f.port)}
	args = append(args, extra...)
	return append(args, "127.0.0.1")
}

// run runs ssh with key and the remote command, stdin as given, and
// returns its output and exit status.
func (f *fixture) run(key, stdin string, sshOpts []string, command ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(f.sshArgs(key, sshOpts...), command...)...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		f.t.Fatalf("ssh: %v", err)
	}
	return o.String(), e.String(), code
}

func TestExecRunsOllieSubcommands(t *testing.T) {
	f := start(t)
	for _, c := range []struct {
		cmd  []string
		want string
		code int
	}{
		{[]string{"ls", "/"}, "status\n", 0},
		{[]string{"ollie", "ls", "/"}, "session/\n", 0},
		{[]string{"read", "status"}, "sessions 0\n", 0},
		{[]string{"read", "nonexistent"}, "", 1},
		{[]string{"ls", "a", "b"}, "", 2}, // the client's usage error, passed on
	} {
		out, errOut, code := f.run(f.key, "", nil, c.cmd...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("ssh %q: exit %d, out %q, err %q; want exit %d and %q", c.cmd, code, out, errOut, c.code, c.want)
		}
	}
	// Standard input reaches the command: a write the namespace answers.
	out, errOut, code := f.run(f.key, "name=overssh\n", nil, "write", "session/new")
	if code != 0 {
		t.Fatalf("write session/new: exit %d: %s %s", code, out, errOut)
	}
	out, _, _ = f.run(f.key, "", nil, "ls", "session")
	if !strings.Contains(out, "overssh") {
		t.Errorf("after write session/new, ls session = %q, want the session overssh", out)
	}
}

func TestExecRefusesOtherCommands(t *testing.T) {
	f := start(t)
	for _, cmd := range [][]string{{"/bin/sh"}, {"sh", "-c", "id"}, {"olliesrv", "stop"}, {"-a", "/tmp/x", "ls"}} {
		out, errOut, code := f.run(f.key, "", nil, cmd...)
		if code != appliance.ExitRefused || out != "" || !strings.Contains(errOut, "ollie commands only") {
			t.Errorf("ssh %q: exit %d, out %q, err %q; want exit %d and the refusal", cmd, code, out, errOut, appliance.ExitRefused)
		}
	}
	// Logged once per kind, key and address, however often refused.
	f.run(f.key, "", nil, "/bin/sh")
	if n := strings.Count(f.log.String(), `what="exec of /bin/sh"`); n != 1 {
		t.Errorf("exec of /bin/sh logged %d times, want once:\n%s", n, f.log)
	}
	if !strings.Contains(f.log.String(), "key=SHA256:") || !strings.Contains(f.log.String(), "from=127.0.0.1") {
		t.Errorf("refusal log lacks the key's fingerprint or the source address:\n%s", f.log)
	}
}

// sshOnPTY runs ssh -tt on a pty of the test's, as a person would.
// waitFor waits for what on the pty, doing each (if given) before every
// look.
func (f *fixture) sshOnPTY(size *pty.Winsize) (cmd *exec.Cmd, ptmx *os.File, waitFor func(what string, each ...func())) {
	t := f.t
	cmd = exec.Command("ssh", f.sshArgs(f.key, "-tt")...)
	ptmx, err := pty.StartWithSize(cmd, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); cmd.Process.Kill() })
	var seen syncBuffer
	go io.Copy(&seen, ptmx)
	return cmd, ptmx, func(what string, each ...func()) {
		t.Helper()
		await.Until(t, 20*time.Second, fmt.Sprintf("%q through the pty", what),
			func() bool {
				for _, e := range each {
					e()
				}
				return strings.Contains(seen.String(), what)
			},
			func() string { return fmt.Sprintf("saw %q", seen.String()) })
	}
}

func TestWindowSize(t *testing.T) {
	f := startHelper(t, "winsize")
	_, ptmx, waitFor := f.sshOnPTY(&pty.Winsize{Rows: 40, Cols: 100})
	waitFor("size 100x40 <nil>")
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	waitFor("size 132x50 <nil>")
}

func TestShellOnPTY(t *testing.T) {
	f := start(t)
	cmd, ptmx, waitFor := f.sshOnPTY(&pty.Winsize{Rows: 40, Cols: 100})
	waitFor("ollie:/% ")
	io.WriteString(ptmx, "ls\r")
	waitFor("toolerrors")
	// A read of a stream blocks until Ctrl-C, which the pty makes a
	// SIGINT for the shell, which flushes the read.
	io.WriteString(ptmx, "cat event\r")
	// The read is under way once an event comes through it: setting the
	// bypass policy to what it is publishes one.
	fs := nstest.Attach(t, filepath.Join(f.ns, "ollie"), "")
	policy := nstest.ReadFile(t, fs, "bypass/policy")
	waitFor("bypass.policy", func() { nstest.WriteFile(fs, "bypass/policy", policy) })
	io.WriteString(ptmx, "\x03")
	waitFor("^C\r\n\x1b[J\x1b[2K\rollie:/% ") // the prompt again: the read ended
	io.WriteString(ptmx, "exit\r")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ssh -tt: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ssh -tt did not end after exit")
	}
}

func TestRefusedLogins(t *testing.T) {
	f := start(t)
	stranger, _ := f.newKey("stranger")
	far, farPub := f.newKey("far")
	f.authorize(`from="10.0.0.0/8,192.168.*"`, farPub)
	near, nearPub := f.newKey("near")
	f.authorize(`from="10.0.0.0/8,127.0.0.*"`, nearPub)
	for _, c := range []struct {
		name string
		key  string
		opts []string
		logs string
	}{
		{"password", f.key, []string{"-o", "PreferredAuthentications=password,keyboard-interactive", "-o", "PubkeyAuthentication=no"}, "what=handshake"},
		{"a key not in authorized_keys", stranger, nil, `what="key not in authorized_keys"`},
		{"a from= mismatch", far, nil, "from= does not match"},
	} {
		out, errOut, code := f.run(c.key, "", c.opts, "read", "status")
		if code != 255 || out != "" || !strings.Contains(errOut, "Permission denied") {
			t.Errorf("%s: exit %d, out %q, err %q; want 255 and Permission denied", c.name, code, out, errOut)
		}
		waitLog(t, f.log, c.logs)
	}
	if out, errOut, code := f.run(near, "", nil, "read", "status"); code != 0 || !strings.Contains(out, "version") {
		t.Errorf("a from= match: exit %d, out %q, err %q; want it let in", code, out, errOut)
	}
}

func TestForcedCommand(t *testing.T) {
	f := start(t)
	forced, pub := f.newKey("forced")
	f.authorize(`command="read status",no-pty`, pub)
	out, errOut, code := f.run(forced, "", nil, "ls", "/")
	if code != 0 || !strings.Contains(out, "sessions 0") || strings.Contains(out, "toolerrors") {
		t.Errorf("a key with command=\"read status\" asking for ls /: exit %d, out %q, err %q; want status", code, out, errOut)
	}
	// no-pty: the pty is refused, which OpenSSH's client, asked for one
	// with -t, takes as the end.
	out, errOut, code = f.run(forced, "", []string{"-tt"})
	if code != 255 || !strings.Contains(errOut, "PTY allocation request failed") || out != "" {
		t.Errorf("a no-pty key with -tt: exit %d, out %q, err %q; want the pty refused", code, out, errOut)
	}
	waitLog(t, f.log, "pty for a no-pty key")
	bad, badPub := f.newKey("badforced")
	f.authorize(`command="/bin/sh -c id"`, badPub)
	if out, _, code := f.run(bad, "", nil, "ls", "/"); code != appliance.ExitRefused || out != "" {
		t.Errorf("a forced /bin/sh: exit %d, out %q; want it refused", code, out)
	}
}

func TestReadOnlyKey(t *testing.T) {
	f := start(t)
	ro, pub := f.newKey("reader")
	f.authorize(appliance.ReadOnlyOption, pub)
	if out, errOut, code := f.run(ro, "", nil, "read", "status"); code != 0 || !strings.Contains(out, "version") {
		t.Errorf("read-only key, read status: exit %d, out %q, err %q", code, out, errOut)
	}
	out, errOut, code := f.run(ro, "name=y\n", nil, "write", "session/new")
	if code != 1 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("read-only key, write session/new: exit %d, out %q, err %q; want 1 and permission denied", code, out, errOut)
	}
	// The admin key writes the same file.
	if _, errOut, code := f.run(f.key, "name=y\n", nil, "write", "session/new"); code != 0 {
		t.Errorf("admin key, write session/new: exit %d: %s", code, errOut)
	}
	// A forward would reach the socket as the daemon's user: refused.
	local := filepath.Join(f.ns, "ro-local")
	fwd := exec.Command("ssh", f.sshArgs(ro, "-N", "-o", "ExitOnForwardFailure=yes", "-L", local+":"+filepath.Join(f.ns, "ollie"))...)
	fwd.Start()
	defer func() { fwd.Process.Kill(); fwd.Wait() }()
	if c, err := dialWhenThere(local); err == nil {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Error("a read-only key's direct-streamlocal carried bytes")
		}
		c.Close()
	}
	waitLog(t, f.log, "direct-streamlocal by a key that may not forward")
}

// dialWhenThere dials a Unix socket ssh -L is about to make.
func dialWhenThere(path string) (c net.Conn, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	await.Poll(ctx, func() bool {
		c, err = net.Dial("unix", path)
		return err == nil
	})
	return c, err
}

// waitLog waits for what in the log, and fails t (going on) if it never
// comes.
func waitLog(t *testing.T, log *syncBuffer, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if !await.Poll(ctx, func() bool { return strings.Contains(log.String(), what) }) {
		t.Errorf("%q not logged:\n%s", what, log)
	}
}

func TestForwards(t *testing.T) {
	f := start(t)
	// -R and a stream-local forward elsewhere: refused at once.
	other := filepath.Join(f.dir, "elsewhere.sock")
	for _, c := range []struct {
		name, spec, logs string
	}{
		{"-R tcp", "0:127.0.0.1:1", "request tcpip-forward"},
		{"-R to another socket", other + ":" + filepath.Join(f.dir, "x.sock"), "streamlocal-forward of " + other},
		{"-R to another name in the namespace directory", filepath.Join(f.ns, "evil") + ":" + filepath.Join(f.dir, "x.sock"), "streamlocal-forward of"},
	} {
		_, errOut, code := f.run(f.key, "", []string{"-N", "-o", "ExitOnForwardFailure=yes", "-R", c.spec})
		if code != 255 || !strings.Contains(errOut, "forwarding failed") {
			t.Errorf("%s: exit %d, err %q; want 255 and forwarding failed", c.name, code, errOut)
		}
		if !strings.Contains(f.log.String(), c.logs) {
			t.Errorf("%s: %q not logged:\n%s", c.name, c.logs, f.log)
		}
	}
	if _, err := os.Stat(other); err == nil {
		t.Errorf("%s was made", other)
	}

	// -L tcp and -L to another socket: each connection is refused.
	tcpFwd := freePort(t)
	sock := filepath.Join(f.dir, "l.sock")
	otherTarget := replyingSocket(t, filepath.Join(f.dir, "target.sock"), "reached")
	nsLocal := filepath.Join(f.dir, "ns.sock")
	fwd := exec.Command("ssh", f.sshArgs(f.key, "-N", "-o", "ExitOnForwardFailure=yes",
		"-L", fmt.Sprintf("127.0.0.1:%d:127.0.0.1:%d", tcpFwd, f.port),
		"-L", sock+":"+otherTarget,
		"-L", nsLocal+":"+filepath.Join(f.ns, "ollie"),
		"-R", filepath.Join(f.ns, "broker-0123abcd")+":"+otherTarget)...)
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { fwd.Process.Kill(); fwd.Wait() }()
	for _, c := range []struct{ name, network, addr, logs string }{
		{"-L tcp", "tcp", fmt.Sprintf("127.0.0.1:%d", tcpFwd), "channel direct-tcpip"},
		{"-L to another socket", "unix", sock, "direct-streamlocal to " + otherTarget},
	} {
		var conn net.Conn
		var err error
		await.Until(t, 15*time.Second, fmt.Sprintf("%s: ssh listening on %s", c.name, c.addr), func() bool {
			conn, err = net.Dial(c.network, c.addr)
			return err == nil
		}, func() string { return fmt.Sprint(err) })
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(conn)
		conn.Close()
		if len(b) != 0 {
			t.Errorf("%s: read %q through a refused forward", c.name, b)
		}
		waitLog(t, f.log, c.logs)
	}

	// The namespace socket is reachable, and a broker-* forward listens
	// in the namespace directory and reaches back.
	c, err := dialWhenThere(nsLocal)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	nc, err := client.Dial(nsLocal)
	if err != nil {
		t.Fatalf("9P through -L to the namespace socket: %v", err)
	}
	b, err := nc.ReadAll(context.Background(), "status")
	nc.Close()
	if err != nil || !bytes.Contains(b, []byte("version")) {
		t.Errorf("status through the forward: %q, %v", b, err)
	}
	bc, err := dialWhenThere(filepath.Join(f.ns, "broker-0123abcd"))
	if err != nil {
		t.Fatalf("the broker forward: %v", err)
	}
	got, _ := bufio.NewReader(bc).ReadString('\n')
	bc.Close()
	if got != "reached" {
		t.Errorf("through the broker forward: %q, want reached", got)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestHostKeyKeptAcrossRestarts(t *testing.T) {
	f := start(t)
	if _, errOut, code := f.run(f.key, "", nil, "read", "status"); code != 0 {
		t.Fatalf("first login: %d %s", code, errOut)
	}
	st, err := os.Stat(f.hostKey)
	if err != nil || st.Mode().Perm() != 0600 {
		t.Fatalf("host key file: %v, %v; want 0600", st.Mode(), err)
	}
	b, err := os.ReadFile(f.knownHosts)
	if err != nil {
		t.Fatal(err)
	}
	_, _, seen, _, _, err := ssh.ParseKnownHosts(b)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := appliance.Fingerprint(f.hostKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := ssh.FingerprintSHA256(seen); got != fp {
		t.Errorf("the client saw %s, Fingerprint says %s", got, fp)
	}
	// A restart on another port: known_hosts names the host by port, so
	// name it again with the key the client saw, and insist on it.
	old := f.port
	f.serve()
	line := strings.Replace(string(b), fmt.Sprintf("[127.0.0.1]:%d", old), fmt.Sprintf("[127.0.0.1]:%d", f.port), 1)
	if err := os.WriteFile(f.knownHosts, []byte(line), 0600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := f.run(f.key, "", []string{"-o", "StrictHostKeyChecking=yes"}, "read", "status"); code != 0 {
		t.Errorf("after a restart the host key changed: exit %d: %s", code, errOut)
	}
}

// TestStatePerKey: each key's commands keep their state (the shell's
// history) apart, under KeyState.
func TestStatePerKey(t *testing.T) {
	f := startHelper(t, "env")
	other, pub := f.newKey("other")
	f.authorize(appliance.ReadOnlyOption, pub)
	a, _, _ := f.run(f.key, "", nil, "ls")
	b, _, _ := f.run(other, "", nil, "ls")
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	base := filepath.Join(f.dir, "keystate") + "/"
	if !strings.HasPrefix(a, base) || !strings.HasPrefix(b, base) || a == b {
		t.Errorf("XDG_STATE_HOME of two keys: %q and %q; want two directories under %s", a, b, base)
	}
	if again, _, _ := f.run(f.key, "", nil, "ls"); strings.TrimSpace(again) != a {
		t.Errorf("one key's XDG_STATE_HOME: %q, then %q", a, again)
	}
}

// TestClosedChannelEndsCommand: a client that goes away takes its command
// with it, even one that ignores SIGHUP and its input.
func TestClosedChannelEndsCommand(t *testing.T) {
	f := startHelper(t, "hang")
	cmd := exec.Command("ssh", append(f.sshArgs(f.key), "ls")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no pid from the command: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !await.Poll(ctx, func() bool { return syscall.Kill(pid, 0) != nil }) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("command pid %d still runs after its client went away", pid)
	}
}

// TestStaleSocketReplaced: a socket left at a forward's path by a dead
// listener (no forward of this server holds it) is replaced, as the
// keeper needs after the listener restarts; a socket another connection
// forwards now, and a file that is not a socket, are left alone.
func TestStaleSocketReplaced(t *testing.T) {
	f := start(t)
	target := replyingSocket(t, filepath.Join(f.dir, "target.sock"), "reached\n")
	models := filepath.Join(f.ns, "models.sock")
	stale, err := net.Listen("unix", models)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	fwd := exec.Command("ssh", f.sshArgs(f.key, "-N", "-o", "ExitOnForwardFailure=yes", "-R", models+":"+target)...)
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { fwd.Process.Kill(); fwd.Wait() }()
	var got string
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	await.Poll(ctx, func() bool {
		if c, err := net.Dial("unix", models); err == nil {
			got, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
		}
		return got == "reached\n"
	})
	if got != "reached\n" {
		t.Fatalf("the forward over a stale socket: read %q", got)
	}
	// Held by that connection: a second one may not take it.
	if _, errOut, code := f.run(f.key, "", []string{"-N", "-o", "ExitOnForwardFailure=yes", "-R", models + ":" + target}); code != 255 || !strings.Contains(errOut, "forwarding failed") {
		t.Errorf("a second forward of a held socket: exit %d, %q", code, errOut)
	}
	// A file that is not a socket is never removed.
	plain := filepath.Join(f.ns, "broker-plainfile")
	os.WriteFile(plain, []byte("keep"), 0600)
	if _, _, code := f.run(f.key, "", []string{"-N", "-o", "ExitOnForwardFailure=yes", "-R", plain + ":" + target}); code != 255 {
		t.Errorf("a forward over a plain file: exit %d, want 255", code)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Errorf("the plain file at a forward's path holds %q now", b)
	}
}

// replyingSocket listens on path until the test ends, writing reply to
// each connection and closing it; it returns path.
func replyingSocket(t *testing.T, path, reply string) string {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(reply))
			c.Close()
		}
	}()
	return path
}

// TestHostKeyMadeOnceAtOnce: daemons starting at once on a host with no
// key yet all load the one key the first of them made, and none reads a
// key file before it is whole.
func TestHostKeyMadeOnceAtOnce(t *testing.T) {
	for round := range 20 {
		file := filepath.Join(t.TempDir(), "hostkey", appliance.HostKeyFile)
		const n = 8
		fps := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				s, err := appliance.LoadHostKey(file)
				if err == nil {
					fps[i] = ssh.FingerprintSHA256(s.PublicKey())
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: daemon %d: %v", round, i, errs[i])
			}
			if fps[i] != fps[0] {
				t.Fatalf("round %d: daemon %d loaded %s, daemon 0 %s", round, i, fps[i], fps[0])
			}
		}
		ents, err := os.ReadDir(filepath.Dir(file))
		if err != nil || len(ents) != 1 {
			t.Fatalf("round %d: the key's directory holds %v (%v), want the key alone", round, ents, err)
		}
	}
}
