package sshlab

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary a server run inside an isolated host's
// namespace: "serve ADDR" greets each connection with one line.
const helperEnv = "SSHLAB_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := strings.Fields(os.Getenv(helperEnv)); len(h) == 2 && h[0] == "serve" {
		ln, err := net.Listen("tcp", h[1])
		if err != nil {
			fmt.Println("err:", err)
			os.Exit(1)
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			fmt.Fprintln(c, "hello from inside")
			c.Close()
		}
	}
	os.Exit(m.Run())
}

func TestLab(t *testing.T) {
	t0 := time.Now()
	l := Start(t, Config{Hosts: MaxHosts})
	t.Logf("%d hosts up in %v", MaxHosts, time.Since(t0))
	for _, h := range []*Host{l.Host(0), l.Host(MaxHosts - 1)} {
		out, err := l.SSH(h.Name, "id -un; echo $HOME").CombinedOutput()
		if err != nil {
			t.Fatalf("ssh %s: %v: %s", h.Name, err, out)
		}
		if got := strings.Fields(string(out)); len(got) != 2 || got[0] != h.User || got[1] != h.Home {
			t.Errorf("ssh %s: got %q, want %s %s", h.Name, out, h.User, h.Home)
		}
	}
}

func TestExtraPathAndSudo(t *testing.T) {
	l := Start(t, Config{Hosts: 2, UserPrefix: "olabsu", Password: "pw-sshlab", Sudoers: true, ExtraPath: map[int][]string{1: {"/opt/sshlab-test"}}})
	out, err := l.SSH(l.Host(1).Name, "echo $PATH").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "/opt/sshlab-test:") {
		t.Errorf("PATH on h12: %q, %v", out, err)
	}
	out, err = l.SSH(l.Host(0).Name, "echo $PATH").CombinedOutput()
	if err != nil || strings.Contains(string(out), "/opt/sshlab-test") {
		t.Errorf("PATH on h11: %q, %v", out, err)
	}
	cmd := l.SSH(l.Host(0).Name, "sudo -S -p '' id -u")
	cmd.Stdin = strings.NewReader("pw-sshlab\n")
	out, err = cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("sudo with password: %q, %v", out, err)
	}
	cmd = l.SSH(l.Host(0).Name, "sudo -S -p '' id -u")
	cmd.Stdin = strings.NewReader("wrong\n")
	if out, err = cmd.CombinedOutput(); err == nil {
		t.Errorf("sudo with a wrong password worked: %q", out)
	}
}

// TestKillConnections, on a host on loopback and on an isolated one, whose
// connections are in its own namespace's table.
func TestKillConnections(t *testing.T) {
	for _, isolated := range []bool{false, true} {
		t.Run(fmt.Sprintf("isolated=%v", isolated), func(t *testing.T) { testKillConnections(t, isolated) })
	}
}

func testKillConnections(t *testing.T, isolated bool) {
	l := Start(t, Config{Isolated: isolated})
	h := l.Host(0)
	// Killed once the session runs its command, not after 300 ms: a
	// connection killed while sshd is still setting it up is another test.
	cmd := l.SSH(h.Name, "echo running; exec sleep 30")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "running\n" {
		t.Fatalf("the session said %q, %v", line, err)
	}
	if n := h.KillConnections(); n == 0 {
		t.Fatal("no connection processes found")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ssh exited 0 after its connection was killed")
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("ssh still running 10s after KillConnections")
	}
	if out, err := l.SSH(h.Name, "true").CombinedOutput(); err != nil {
		t.Errorf("sshd not listening after KillConnections: %v: %s", err, out)
	}
	h.Restart()
	if out, err := l.SSH(h.Name, "true").CombinedOutput(); err != nil {
		t.Errorf("after Restart: %v: %s", err, out)
	}
}

// TestShell: a host's user gets the login shell the lab is given, and the
// others keep bash; the lab puts bash back when it stops.
func TestShell(t *testing.T) {
	var l *Lab
	t.Run("lab", func(t *testing.T) {
		l = Start(t, Config{Hosts: 2, UserPrefix: "olabsh", Shell: map[int]string{1: "/bin/dash"}})
		for i, want := range []string{"bash", "dash"} {
			// $0 is the shell sshd ran the command with.
			out, err := l.SSH(l.Host(i).Name, `echo $0`).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Errorf("ssh %s: %q %v, want %s", l.Host(i).Name, out, err, want)
			}
		}
	})
	if l == nil {
		return
	}
	if s, err := userShell(l.Host(1).User); err != nil || s != "/bin/bash" {
		t.Errorf("after the lab, %s's shell is %q %v", l.Host(1).User, s, err)
	}
}

// TestIsolated: an isolated host's sshd is reached with the real ssh
// client at its namespace's address; what its commands try, the internet
// and a name lookup, fails at once and is counted; a server on its
// namespace's loopback is reached by its commands and not by the desktop;
// a Unix socket forwarded back to the desktop (as the approval socket is)
// works; and a host on loopback in the same test is as before.
func TestIsolated(t *testing.T) {
	l := Start(t, Config{UserPrefix: "olabiso", Isolated: true})
	plain := Start(t, Config{UserPrefix: "olabiso"})
	h := l.Host(0)
	if !strings.HasPrefix(h.Addr, "10.201.") || h.Port != 22 || h.Netns == "" || h.Net == nil || h.Net.Addr != h.Addr {
		t.Fatalf("isolated host: addr %s port %d netns %q", h.Addr, h.Port, h.Netns)
	}
	ssh := func(cmd string) (string, error) {
		out, err := l.SSH(h.Name, cmd).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := ssh("id -un"); err != nil || out != h.User {
		t.Fatalf("ssh %s id -un: %q %v", h.Name, out, err)
	}
	if a, d := h.Outbound(); a != 0 {
		t.Fatalf("outbound after an SSH session: %d, %s", a, d)
	}

	// Each attempt is given 5 s: refused, it fails at once.
	t0 := time.Now()
	if out, err := ssh("timeout 5 bash -c 'echo > /dev/tcp/1.1.1.1/443'"); err == nil || !strings.Contains(out, "Network is unreachable") {
		t.Errorf("1.1.1.1:443 from the host: %q %v, want Network is unreachable", out, err)
	}
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("reaching 1.1.1.1 took %v: it should fail at once", d)
	}
	t0 = time.Now()
	if out, err := ssh("timeout 5 getent hosts example.com"); err == nil {
		t.Errorf("the host resolved example.com: %q", out)
	}
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("the name lookup took %v: it should fail at once", d)
	}
	a, d := h.Outbound()
	t.Logf("outbound: %d: %s", a, d)
	for _, want := range []string{"udp " + h.Net.Peer + ":53 ×", "no route 1 (IPv4 1, IPv6 0)"} {
		if !strings.Contains(d, want) {
			t.Errorf("outbound %d %q lacks %q", a, d, want)
		}
	}

	// A server on the namespace's loopback, as a scripted Ollama would be.
	srv := h.Net.Command(os.Args[0])
	srv.Env = append(os.Environ(), helperEnv+"=serve 127.0.0.1:7072")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "listening\n" {
		t.Fatalf("server inside: %q %v", line, err)
	}
	if got, err := ssh("exec 3<>/dev/tcp/127.0.0.1/7072; cat <&3"); got != "hello from inside" {
		t.Errorf("the host's 127.0.0.1:7072: %q %v", got, err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(h.Addr, "7072"), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("the desktop reached the host's loopback server at %s:7072", h.Addr)
	}
	if a2, d2 := h.Outbound(); a2 != a {
		t.Errorf("loopback counted: outbound %d (%s), was %d", a2, d2, a)
	}

	// A Unix socket on the host forwarded to one on the desktop.
	sock := filepath.Join(t.TempDir(), "desk.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello from the desktop")
			c.Close()
		}
	}()
	remote := h.Home + "/fwd.sock"
	fwd := l.SSH("-o", "ExitOnForwardFailure=yes", "-R", remote+":"+sock, h.Name,
		`python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.makefile().readline().strip())' `+remote)
	if got, err := fwd.CombinedOutput(); strings.TrimSpace(string(got)) != "hello from the desktop" {
		t.Errorf("forwarded Unix socket: %q %v", got, err)
	}
	if a2, d2 := h.Outbound(); a2 != a {
		t.Errorf("the forwarded socket counted: outbound %d (%s), was %d", a2, d2, a)
	}

	// The host on loopback beside it.
	p := plain.Host(0)
	if out, err := plain.SSH(p.Name, "id -un").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != p.User || !strings.HasPrefix(p.Addr, "127.0.0.") {
		t.Errorf("plain host %s: %q %v", p.Addr, out, err)
	}
	if a, _ := p.Outbound(); a != -1 || p.Netns != "" {
		t.Errorf("plain host: Outbound %d, Netns %q", a, p.Netns)
	}
}
