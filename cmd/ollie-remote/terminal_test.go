package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/broker"
)

// TestTerminalBroker: with "ollie-remote broker" running on a terminal,
// the keeper hands a host's request to it; the person sees the host the
// request came from (not the one it claims), approves, and types the sudo
// password, which the terminal does not echo.
func TestTerminalBroker(t *testing.T) {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	dir, err := os.MkdirTemp("", "orb")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	t.Setenv("OLLIE_REMOTE_DIR", dir)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no policy file: ask about everything

	cmd := exec.Command(remoteBin, "broker")
	cmd.Env = os.Environ()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		tty.Close()
	}()
	scr := watchTerminal(tty)
	waitFor := func(what string) { t.Helper(); scr.waitFor(t, what) }
	waitFor("answering the approval requests")

	// The keeper's side for host "web1": a forwarded socket served by
	// serveApprovals, whose own broker would deny (nobody to ask).
	l, err := net.Listen("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fallback := &broker.Broker{Approver: broker.Nobody{Reason: "no terminal broker"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go serveApprovals(fallback, "web1", l)

	c, err := net.Dial("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type asked struct {
		cv  *broker.Conversation
		ans broker.Answer
		err error
	}
	done := make(chan asked, 1)
	go func() {
		cv, ans, err := broker.Ask(ctx, c, &broker.Request{Host: "db9", Session: "s", Tool: "fix_nginx", Executable: "/x", Cwd: "/", Sudo: true})
		done <- asked{cv, ans, err}
	}()
	waitFor("[d]eny? ")
	prompt := scr.String()
	if i := strings.Index(prompt, "ollie: "); i < 0 || !strings.Contains(prompt[i:], "web1 asks to run as root") || strings.Contains(prompt[i:], "db9") {
		t.Errorf("the prompt does not name the connection's host:\n%s", prompt)
	}
	tty.Write([]byte("o\r"))
	a := <-done
	if a.err != nil || a.ans.Decision != broker.Once {
		t.Fatalf("answer %+v %v", a.ans, a.err)
	}
	pwc := make(chan []byte, 1)
	go func() {
		pw, err := a.cv.Password(ctx, 1, "")
		if err != nil {
			t.Error(err)
		}
		pwc <- pw
	}()
	waitFor("sudo password for root on web1, to run fix_nginx (asked by web1): ")
	tty.Write([]byte("Hunter2-secret\r"))
	if pw := <-pwc; string(pw) != "Hunter2-secret" {
		t.Errorf("password %q", pw)
	}
	a.cv.Close("ran")
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(scr.String(), "Hunter2") {
		t.Errorf("the terminal echoed the password:\n%s", scr)
	}
}

// terminalScreen is what a program wrote to its pseudo-terminal so far.
type terminalScreen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// watchTerminal collects everything tty's program writes.
func watchTerminal(tty *os.File) *terminalScreen {
	s := &terminalScreen{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			s.mu.Lock()
			s.buf.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *terminalScreen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits up to 15 s for what to appear on the screen.
func (s *terminalScreen) waitFor(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(s.String(), what) {
			return
		}
	}
	t.Fatalf("no %q on the terminal:\n%s", what, s)
}
