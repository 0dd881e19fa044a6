package demohost

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/tunnel"
)

// fleet starts n hosts for a test with the client files written, and
// returns them with the tunnel options that reach them.
func fleet(t *testing.T, n int) (*Fleet, tunnel.Options, ClientFiles) {
	t.Helper()
	t.Setenv("SSH_AUTH_SOCK", "") // only the demo key
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	pub, err := NewClientKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Start(filepath.Join(dir, "hosts"), n, pub, &Options{Env: []string{"OLLIE_DEMO_EXTRA=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	cf, err := f.WriteClientFiles(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	return f, tunnel.Options{ConfigFile: cf.Config}, cf
}

func dial(t *testing.T, alias string, o tunnel.Options) *tunnel.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tunnel.Dial(ctx, alias, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestExec(t *testing.T) {
	f, o, _ := fleet(t, 2)
	ctx := context.Background()
	for _, h := range f.Hosts {
		c := dial(t, h.Name, o)
		out, err := c.Run(ctx, `printf '%s\n' "$HOME" "$NAMESPACE" "$XDG_STATE_HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$SHELL" "$OLLIE_DEMO_EXTRA" "$(pwd)" "${PATH%%:*}"`, nil)
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		want := []string{h.Home, h.NSDir, h.Home + "/.local/state", h.Home + "/.config", h.Home + "/.local/share", "/bin/sh", "yes", h.Home, h.Home + "/.local/bin"}
		if got := strings.Split(strings.TrimSpace(string(out)), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: environment\n got %q\nwant %q", h.Name, got, want)
		}
		// olliesrv's socket must fit in a sockaddr_un.
		if n := len(filepath.Join(h.NSDir, "ollie.lock")); n > 100 {
			t.Errorf("%s: NAMESPACE %s is too long for a socket (%d bytes)", h.Name, h.NSDir, n)
		}
	}
	if f.Hosts[0].Home == f.Hosts[1].Home || f.Hosts[0].NSDir == f.Hosts[1].NSDir || f.Hosts[0].Port == f.Hosts[1].Port {
		t.Error("two hosts share a home, a namespace or a port")
	}

	c := dial(t, "demo1", o)
	out, err := c.Run(ctx, "tr a-z A-Z", strings.NewReader("stdin reaches the command"))
	if err != nil || string(out) != "STDIN REACHES THE COMMAND" {
		t.Errorf("stdin: %q %v", out, err)
	}
	out, err = c.Run(ctx, "echo partial; echo oops >&2; exit 3", nil)
	var ee *tunnel.ExitError
	if !errors.As(err, &ee) || ee.Status != 3 || string(ee.Stderr) != "oops\n" || string(out) != "partial\n" {
		t.Errorf("exit 3: out %q, err %#v", out, err)
	}
	_, err = c.Run(ctx, "kill -USR1 $$", nil)
	if !errors.As(err, &ee) || ee.Signal != "USR1" {
		t.Errorf("a command killed by a signal: %#v", err)
	}
}

// A channel closed under a running command ends the command and what it
// started in its process group.
func TestChannelCloseKillsGroup(t *testing.T) {
	_, o, _ := fleet(t, 1)
	c := dial(t, "demo1", o)
	s, err := c.SSH().NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("sleep 300 & echo $!; wait"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if pid == 0 {
		t.Fatalf("the command did not start: %q, %v", line, err)
	}
	s.Close() // no signal sent: the close alone
	gone, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if !await.Poll(gone, func() bool { return syscall.Kill(pid, 0) != nil }) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("sleep outlived its channel")
	}

	// Cancelling Run (SIGTERM, then the close) ends the command too: only
	// the context's end gives this error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Run(ctx, "sleep 300", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled Run: %v", err)
	}
}

func TestSFTP(t *testing.T) {
	f, o, _ := fleet(t, 1)
	h := f.Hosts[0]
	c := dial(t, "demo1", o)
	sc, err := c.SFTP()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.Home, ".local/share/ollie/v1")
	if err := sc.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	w, err := sc.OpenFile(filepath.Join(dir, ".tmp"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("0123456789abcdef", 1<<14) // 256 KiB: many SFTP packets
	if _, err := w.ReadFrom(strings.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Chmod(filepath.Join(dir, ".tmp"), 0755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "olliesrv"), []byte("old"), 0644)
	// posix-rename replaces the target, as deploy's commit needs.
	if err := sc.PosixRename(filepath.Join(dir, ".tmp"), filepath.Join(dir, "olliesrv")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "olliesrv"))
	if err != nil || string(b) != payload {
		t.Fatalf("uploaded file: %d bytes, %v", len(b), err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "olliesrv")); fi.Mode().Perm() != 0755 {
		t.Errorf("mode %v", fi.Mode())
	}
	// Relative paths are in the home, as with sshd.
	r, err := sc.Open(".local/share/ollie/v1/olliesrv")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != payload {
		t.Errorf("read back %d bytes, %v", len(got), err)
	}
	if wd, err := sc.Getwd(); err != nil || wd != h.Home {
		t.Errorf("Getwd = %q, %v", wd, err)
	}
	if err := sc.Remove(filepath.Join(dir, "olliesrv")); err != nil {
		t.Error(err)
	}
}

// echoServer answers each line on a Unix socket with the line upper-cased.
func echoServer(t *testing.T, ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					io.WriteString(c, strings.ToUpper(sc.Text())+"\n")
				}
			}()
		}
	}()
}

func roundTrip(t *testing.T, c net.Conn, line string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != strings.ToUpper(line)+"\n" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
}

func TestDialUnix(t *testing.T) {
	f, o, _ := fleet(t, 1)
	sock := filepath.Join(f.Hosts[0].NSDir, "echo")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoServer(t, ln)
	c := dial(t, "demo1", o)
	conn, err := c.DialUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn, "through the tunnel")
	conn.Close()
	if _, err := c.DialUnix(filepath.Join(f.Hosts[0].NSDir, "nothing-here")); err == nil {
		t.Error("a socket that does not exist was dialled")
	}
}

func TestListenUnix(t *testing.T) {
	f, o, _ := fleet(t, 1)
	c := dial(t, "demo1", o)
	sock := filepath.Join(f.Hosts[0].NSDir, "broker")
	ln, err := c.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	echoServer(t, ln)
	// A process on the host reaches the client through the socket.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, conn, "back to the desktop")
	conn.Close()
	ln.Close()
	await.Until(t, 5*time.Second, "the socket to go once the forward was cancelled", func() bool {
		_, err := os.Stat(sock)
		return errors.Is(err, os.ErrNotExist)
	})
}

func TestKeepaliveAnswered(t *testing.T) {
	_, o, _ := fleet(t, 1)
	c := dial(t, "demo1", o)
	done := make(chan error, 1)
	go func() {
		_, _, err := c.SSH().SendRequest("keepalive@openssh.com", true, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("keepalive@openssh.com was not answered")
	}
}

func TestOnlyTheClientKey(t *testing.T) {
	f, o, cf := fleet(t, 1)
	other := filepath.Join(t.TempDir(), "other")
	if _, err := NewClientKey(other); err != nil {
		t.Fatal(err)
	}
	h := f.Hosts[0]
	cfg := "Host stranger\n  HostName 127.0.0.1\n  Port " + strconv.Itoa(h.Port) + "\n  User " + h.User +
		"\n  IdentityFile " + other + "\n  IdentitiesOnly yes\n  UserKnownHostsFile " + cf.KnownHosts + "\n"
	file := filepath.Join(t.TempDir(), "config")
	os.WriteFile(file, []byte(cfg), 0600)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ae *tunnel.AuthError
	if _, err := tunnel.Dial(ctx, "stranger", tunnel.Options{ConfigFile: file}); !errors.As(err, &ae) {
		t.Errorf("another key: %v", err)
	}
	if _, err := tunnel.Dial(ctx, "someoneelse@demo1", o); !errors.As(err, &ae) {
		t.Errorf("another user: %v", err)
	}
}

// The files written work with OpenSSH's own client too.
func TestOpenSSHClient(t *testing.T) {
	f, _, cf := fleet(t, 2)
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatal("no ssh client (openssh-client) on PATH")
	}
	out, err := exec.Command(ssh, "-F", cf.Config, "-o", "BatchMode=yes", "demo2", "echo", "$HOME").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != f.Hosts[1].Home {
		t.Errorf("ssh -F %s demo2 echo $HOME: %v\n%s", cf.Config, err, out)
	}
}
