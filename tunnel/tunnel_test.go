package tunnel_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"ollie/internal/await"
	"ollie/internal/sshlab"
	"ollie/tunnel"
)

func TestMain(m *testing.M) {
	// The lab's keys are the only ones these tests should offer.
	os.Unsetenv("SSH_AUTH_SOCK")
	os.Exit(m.Run())
}

func opts(t testing.TB, l *sshlab.Lab) tunnel.Options {
	return tunnel.Options{ConfigFile: l.ConfigFile, Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func dial(t testing.TB, alias string, o tunnel.Options) *tunnel.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := tunnel.Dial(ctx, alias, o)
	if err != nil {
		t.Fatalf("Dial %s: %v", alias, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t testing.TB, c *tunnel.Client, cmd string) string {
	t.Helper()
	out, err := c.Run(context.Background(), cmd, nil)
	if err != nil {
		t.Fatalf("Run %q: %v", cmd, err)
	}
	return string(out)
}

// writeConfig writes an ssh config of extra lines followed by the lab's:
// ssh takes the first value of a key, so the extra lines win.
func writeConfig(t testing.TB, l *sshlab.Lab, extra string) string {
	b, err := os.ReadFile(l.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(f, []byte(extra+"\n"+string(b)), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func fingerprint(t testing.TB, pubLine string) string {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pubLine))
	if err != nil {
		t.Fatal(err)
	}
	return ssh.FingerprintSHA256(k)
}

func TestUnknownHostAndAcceptNew(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	kh := filepath.Join(t.TempDir(), "newdir", "known_hosts")
	o := opts(t, l)
	o.KnownHosts = []string{kh}

	_, err := tunnel.Dial(context.Background(), h.Name, o)
	var ue *tunnel.UnknownHostError
	if !errors.As(err, &ue) {
		t.Fatalf("Dial to an unknown host: %v, want an UnknownHostError", err)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{fingerprint(t, h.HostKeyPub), "ssh-ed25519", "--accept-new", kh, fmt.Sprintf("[%s]:%d", h.Addr, h.Port)} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if _, err := os.Stat(kh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refusing wrote known_hosts: %v", err)
	}
	if !tunnel.Permanent(err) {
		t.Error("an unknown host is not Permanent")
	}

	o.AcceptNew = true
	c := dial(t, h.Name, o)
	run(t, c, "true")
	c.Close()
	st, err := os.Stat(kh)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("known_hosts after AcceptNew: %v %v, want mode 0600", st, err)
	}
	if st, _ := os.Stat(filepath.Dir(kh)); st.Mode().Perm() != 0o700 {
		t.Errorf("known_hosts dir mode %v, want 0700", st.Mode().Perm())
	}
	b, _ := os.ReadFile(kh)
	if want := fmt.Sprintf("[%s]:%d %s\n", h.Addr, h.Port, h.HostKeyPub); string(b) != want {
		t.Errorf("known_hosts = %q, want %q", b, want)
	}

	o.AcceptNew = false
	run(t, dial(t, h.Name, o), "true")
	if b2, _ := os.ReadFile(kh); !bytes.Equal(b, b2) {
		t.Errorf("second dial changed known_hosts: %q", b2)
	}
}

func otherKey(t testing.TB) ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestChangedHostKey(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	addr := net.JoinHostPort(h.Addr, strconv.Itoa(h.Port))
	kh := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh, []byte("# a comment\n"+knownhosts.Line([]string{addr}, otherKey(t))+"\n"), 0o600)
	o := opts(t, l)
	o.KnownHosts = []string{kh}
	o.AcceptNew = true // a changed key is refused all the same

	_, err := tunnel.Dial(context.Background(), h.Name, o)
	var ce *tunnel.ChangedHostKeyError
	if !errors.As(err, &ce) {
		t.Fatalf("Dial with a changed key: %v, want a ChangedHostKeyError", err)
	}
	t.Log(err)
	if ce.File != kh || ce.Line != 2 {
		t.Errorf("error names %s line %d, want %s line 2", ce.File, ce.Line, kh)
	}
	for _, want := range []string{"CHANGED", kh, "line 2", "ssh-keygen -R", fingerprint(t, h.HostKeyPub)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if b, _ := os.ReadFile(kh); strings.Count(string(b), "\n") != 2 {
		t.Errorf("known_hosts was changed: %q", b)
	}
}

func TestHashedKnownHosts(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.HostKeyPub))
	if err != nil {
		t.Fatal(err)
	}
	addr := knownhosts.Normalize(net.JoinHostPort(h.Addr, strconv.Itoa(h.Port)))
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.HashHostname(addr) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	os.WriteFile(kh, []byte(line+"\n"), 0o600)
	o := opts(t, l)
	o.KnownHosts = []string{kh}
	run(t, dial(t, h.Name, o), "true")
}

func TestRun(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	c := dial(t, h.Name, opts(t, l))
	if got := run(t, c, "id -un; echo $HOME"); got != h.User+"\n"+h.Home+"\n" {
		t.Errorf("id/HOME: %q", got)
	}
	out, err := c.Run(context.Background(), "echo partial; echo oops >&2; exit 3", nil)
	var ee *tunnel.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exit 3: %v, want an ExitError", err)
	}
	if ee.Status != 3 || string(ee.Stderr) != "oops\n" || string(out) != "partial\n" {
		t.Errorf("ExitError %+v, stdout %q", ee, out)
	}
	if !strings.Contains(err.Error(), "exit status 3: oops") {
		t.Errorf("message %q", err)
	}
	out, err = c.Run(context.Background(), "tr a-z A-Z", strings.NewReader("hello\n"))
	if err != nil || string(out) != "HELLO\n" {
		t.Errorf("stdin: %q, %v", out, err)
	}

	// Only the context's end gives this error: a Run that waited for the
	// command would return its exit status.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Run(ctx, "sleep 30", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled Run: %v", err)
	}
	run(t, c, "true") // the connection outlives a cancelled command
}

// TestRunOutputLimit: a command that prints without end (a hostile host's
// probe sent 1.5 GiB) is stopped at the limit with an *OutputError, quickly
// and without the output growing the caller; under the limit, or on
// standard error, nothing changes.
func TestRunOutputLimit(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	c := dial(t, l.Host(0).Name, opts(t, l))

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// cat /dev/zero never ends by itself: the OutputError says Run
	// stopped it at the limit.
	out, err := c.Run(context.Background(), "exec cat /dev/zero", nil)
	var oe *tunnel.OutputError
	if !errors.As(err, &oe) || oe.Limit != tunnel.DefaultMaxOutput || oe.Alias != l.Host(0).Name || out != nil {
		t.Fatalf("endless output: %d bytes, %v; want an OutputError naming the host", len(out), err)
	}
	if !strings.Contains(err.Error(), l.Host(0).Name) || !strings.Contains(err.Error(), "cat /dev/zero") {
		t.Errorf("message %q does not name the host and the command", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 64<<20 {
		t.Errorf("Run allocated %d MiB for a 1 MiB limit", grew>>20)
	}

	out, err = c.RunLimit(context.Background(), "head -c 1000 /dev/zero", nil, 1000)
	if err != nil || len(out) != 1000 {
		t.Errorf("exactly the limit: %d bytes, %v", len(out), err)
	}
	if _, err = c.RunLimit(context.Background(), "head -c 1001 /dev/zero", nil, 1000); !errors.As(err, &oe) {
		t.Errorf("one byte past the limit: %v", err)
	}
	// Standard error past its 64 KiB is discarded, not an error.
	_, err = c.Run(context.Background(), "head -c 10000000 /dev/zero >&2; exit 4", nil)
	var ee *tunnel.ExitError
	if !errors.As(err, &ee) || ee.Status != 4 || len(ee.Stderr) != 64<<10 {
		t.Errorf("stderr flood: %v", err)
	} else if strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("stderr flood message spans lines")
	}
	run(t, c, "true") // the connection outlives a stopped command
}

func TestSFTP(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	c := dial(t, h.Name, opts(t, l))
	sc, err := c.SFTP()
	if err != nil {
		t.Fatal(err)
	}
	if sc2, _ := c.SFTP(); sc2 != sc {
		t.Error("SFTP opened a second client")
	}
	p := h.Home + "/sftp-test.txt"
	f, err := sc.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("ollie "), 50000)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := run(t, c, "sha256sum < sftp-test.txt; stat -c %U sftp-test.txt; rm sftp-test.txt"); !strings.HasSuffix(got, h.User+"\n") {
		t.Errorf("file written over SFTP: %q", got)
	}
	run(t, c, "printf 'from run' > run.txt")
	f, err = sc.Open(h.Home + "/run.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "from run" {
		t.Errorf("read over SFTP: %q", b)
	}
}

func TestDialUnix(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	// sshd connects as the login user: the socket must be theirs to open.
	sock := filepath.Join(l.Dir, "echo.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o666)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(conn, conn); conn.Close() }()
		}
	}()
	c := dial(t, h.Name, opts(t, l))
	conn, err := c.DialUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintln(conn, "ping")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Errorf("echo through the socket: %q, %v", line, err)
	}
	if _, err := c.DialUnix(filepath.Join(l.Dir, "nonexistent.sock")); err == nil {
		t.Error("DialUnix to a missing socket worked")
	}
}

// serveOnce answers every forwarded connection with a line.
func serveLine(ln net.Listener, line string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintln(conn, line)
		conn.Close()
	}
}

func readSock(t testing.TB, path string) string {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect to the forwarded socket: %v", err)
	}
	defer conn.Close()
	b, _ := io.ReadAll(conn)
	return string(b)
}

func TestListenUnix(t *testing.T) {
	for _, unlink := range []string{"yes", "no"} {
		t.Run("StreamLocalBindUnlink="+unlink, func(t *testing.T) {
			l := sshlab.Start(t, sshlab.Config{Sshd: []string{"StreamLocalBindUnlink " + unlink}})
			h := l.Host(0)
			o := opts(t, l)
			path := h.Home + "/fwd.sock"
			for i := 0; i < 2; i++ {
				// A connection that ends without cancelling leaves the socket
				// file behind, as a crashed ollie-remote would.
				c := dial(t, h.Name, o)
				ln, err := c.ListenUnix(path)
				if err != nil {
					t.Fatalf("ListenUnix #%d: %v", i+1, err)
				}
				go serveLine(ln, fmt.Sprint("listener ", i+1))
				// The socket is on this machine: connect to it as the host would.
				if got := readSock(t, path); got != fmt.Sprintf("listener %d\n", i+1) {
					t.Errorf("through forward #%d: %q", i+1, got)
				}
				c.Close()
				if _, err := os.Lstat(path); err != nil {
					t.Logf("socket after close: %v", err)
				}
			}
		})
	}
}

// sshdOwnsPeer reports whether the TCP connection whose client side is
// 127.0.0.x:port belongs to one of pids (by socket inode).
func sshdOwnsPeer(t testing.TB, clientPort int, pids []int) bool {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var inode string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		local := f[1]
		if p, err := strconv.ParseUint(local[strings.IndexByte(local, ':')+1:], 16, 32); err == nil && int(p) == clientPort {
			inode = f[9]
		}
	}
	if inode == "" {
		t.Fatalf("no TCP socket with local port %d", clientPort)
	}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == "socket:["+inode+"]" {
				return true
			}
		}
	}
	return false
}

func TestProxyJump(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{Hosts: 3})
	h11, h12, h13 := l.Host(0), l.Host(1), l.Host(2)
	cfg := writeConfig(t, l, "Host h12\n  ProxyJump h11\n\nHost h13\n  ProxyJump h11,h12\n")
	o := opts(t, l)
	o.ConfigFile = cfg

	c := dial(t, h12.Name, o)
	if got := c.Target().ProxyJump; len(got) != 1 || got[0] != "h11" {
		t.Errorf("Target().ProxyJump = %v", got)
	}
	sc := strings.Fields(run(t, c, "id -un; echo $SSH_CONNECTION"))
	if len(sc) != 5 || sc[0] != h12.User {
		t.Fatalf("on h12: %q", sc)
	}
	port, _ := strconv.Atoi(sc[2])
	if !sshdOwnsPeer(t, port, h11.Pids()) {
		t.Errorf("h12's client (port %d) is not h11's sshd: not jumped", port)
	}

	c13 := dial(t, h13.Name, o)
	sc = strings.Fields(run(t, c13, "id -un; echo $SSH_CONNECTION"))
	if len(sc) != 5 || sc[0] != h13.User {
		t.Fatalf("on h13: %q", sc)
	}
	port, _ = strconv.Atoi(sc[2])
	if !sshdOwnsPeer(t, port, h12.Pids()) {
		t.Errorf("h13's client (port %d) is not h12's sshd", port)
	}

	// The hop's host key is checked too.
	kh := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh, []byte(fmt.Sprintf("[%s]:%d %s\n", h12.Addr, h12.Port, h12.HostKeyPub)), 0o600)
	o.KnownHosts = []string{kh}
	_, err := tunnel.Dial(context.Background(), h12.Name, o)
	var ue *tunnel.UnknownHostError
	if !errors.As(err, &ue) || ue.Alias != "h11" {
		t.Errorf("jump host with an unknown key: %v, want an UnknownHostError for h11", err)
	}
}

func TestAgent(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agentCmd := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agentCmd.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	await.Until(t, 10*time.Second, "ssh-agent making its socket", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	add := exec.Command("ssh-add", l.ClientKey)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}
	t.Setenv("SSH_AUTH_SOCK", sock)

	// No identity file at all: only the agent holds the key.
	b, _ := os.ReadFile(l.ConfigFile)
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "IdentityFile") && !strings.Contains(line, "IdentitiesOnly") {
			keep = append(keep, line)
		}
	}
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	os.WriteFile(cfg, []byte(strings.Join(keep, "\n")), 0o644)
	o := opts(t, l)
	o.ConfigFile = cfg
	run(t, dial(t, h.Name, o), "true")

	// IdentitiesOnly keeps the agent's keys that are not IdentityFiles back.
	o.ConfigFile = writeConfig(t, l, fmt.Sprintf("Host %s\n  IdentityFile %s\n  IdentitiesOnly yes\n", h.Name, filepath.Join(t.TempDir(), "missing")))
	b, _ = os.ReadFile(o.ConfigFile)
	keep = keep[:0]
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, l.ClientKey) {
			keep = append(keep, line)
		}
	}
	os.WriteFile(o.ConfigFile, []byte(strings.Join(keep, "\n")), 0o644)
	_, err := tunnel.Dial(context.Background(), h.Name, o)
	var ae *tunnel.AuthError
	if !errors.As(err, &ae) || len(ae.Tried) != 0 {
		t.Errorf("IdentitiesOnly with the agent's key not listed: %v", err)
	}
}

// A host with an RSA and an ed25519 key, known by one of them: unless the
// client asks for that key's algorithm, the server may show the other, and
// a known_hosts check would cry CHANGED. (x/crypto prefers RSA to ed25519.)
func TestHostKeyAlgorithms(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := ssh.MarshalPrivateKey(rk, "")
	rsaFile := filepath.Join(t.TempDir(), "ssh_host_rsa_key")
	os.WriteFile(rsaFile, pem.EncodeToMemory(blk), 0o600)
	rsaPub, _ := ssh.NewPublicKey(&rk.PublicKey)

	l := sshlab.Start(t, sshlab.Config{Sshd: []string{"HostKey " + rsaFile}})
	h := l.Host(0)
	o := opts(t, l)
	run(t, dial(t, h.Name, o), "true") // the lab's known_hosts has the ed25519 key

	kh := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh, []byte(knownhosts.Line([]string{net.JoinHostPort(h.Addr, strconv.Itoa(h.Port))}, rsaPub)+"\n"), 0o600)
	o.KnownHosts = []string{kh}
	run(t, dial(t, h.Name, o), "true")
}
