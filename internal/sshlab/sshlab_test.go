package sshlab

import (
	"bufio"
	"strings"
	"testing"
	"time"
)

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

func TestKillConnections(t *testing.T) {
	l := Start(t, Config{})
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
