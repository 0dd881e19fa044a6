package remote

import (
	"bytes"
	"context"
	"fmt"
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
	"golang.org/x/sys/unix"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/await"
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

	tty, scr := startTerminalBroker(t)
	waitFor := func(what string) { t.Helper(); scr.waitFor(t, what) }

	// The keeper's side for host "web1": a forwarded socket served by
	// desktop.ServeApprovals, whose own broker would deny (nobody to ask).
	l, err := net.Listen("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fallback := &desktop.Broker{Approver: desktop.NewHandoff(desktop.Nobody{Reason: "no terminal broker"}, log), Log: log}
	go desktop.ServeApprovals(fallback, "web1", l, nil)

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
	// The terminal echoes a line before the program reading it gets it, so
	// any echo of the password is on the screen before the prompt of a
	// request asked after the password was read.
	c2, err := net.Dial("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, ans, err := broker.Ask(ctx, c2, &broker.Request{Session: "s", Tool: "after_password", Executable: "/x", Cwd: "/"})
		done <- asked{nil, ans, err}
	}()
	waitFor("(after_password on web1) / [d]eny? ")
	if strings.Contains(scr.String(), "Hunter2") {
		t.Errorf("the terminal echoed the password:\n%s", scr)
	}
	tty.Write([]byte("d\r"))
	if a := <-done; a.err != nil || a.ans.Decision != broker.Deny {
		t.Errorf("the request after the password: %+v %v", a.ans, a.err)
	}
}

// terminalScreen is what a program wrote to its pseudo-terminal so far.
type terminalScreen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// watchTerminal collects everything tty's program writes.
// startTerminalBroker runs "ollie-remote broker" on a pty until the test
// ends, and returns the pty and its screen once the broker is answering.
func startTerminalBroker(t *testing.T) (*os.File, *terminalScreen) {
	t.Helper()
	cmd := exec.Command(remoteBin, "broker")
	cmd.Env = os.Environ()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		tty.Close()
	})
	scr := watchTerminal(tty)
	scr.waitFor(t, "answering the approval requests")
	return tty, scr
}

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
	await.Until(t, 15*time.Second, fmt.Sprintf("no %q on the terminal", what), func() bool {
		return strings.Contains(s.String(), what)
	}, s.String)
}

// TestTerminalBrokerLetsGo: "ollie-remote broker" whose terminal hangs up
// (its pty closed, as when its tmux session ends) or reaches its end (^D)
// exits, and the request it was showing is not denied: the keeper asks
// its other approver (here a test askpass) for it, the password too, and
// for every request after.
func TestTerminalBrokerLetsGo(t *testing.T) {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	for _, how := range []string{"hang-up", "end of input", "hang-up while idle"} {
		t.Run(how, func(t *testing.T) {
			dir := privateRemoteDir(t)
			t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no policy file: ask about everything
			program, asked := askpass(t, t.TempDir(), "Hunter2-secret", true)
			t.Setenv("OLLIE_ASKPASS", program)
			var log lockedBuffer
			b := desktop.KeeperBroker(slog.New(slog.NewTextHandler(&log, nil)))
			socks := approvalSockets(t, b, dir, "web1")

			cmd := exec.Command(remoteBin, "broker")
			cmd.Env = os.Environ()
			tty := startHangable(t, cmd)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				cmd.Process.Kill()
				<-exited
				tty.Close()
			}()
			scr := watchTerminal(tty)
			scr.waitFor(t, "answering the approval requests")

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ask := func(tool string) (*broker.Conversation, broker.Answer, error) {
				c, err := net.Dial("unix", socks["web1"])
				if err != nil {
					t.Fatal(err)
				}
				return broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: tool, Executable: "/x", Cwd: "/", Sudo: true})
			}
			type asked1 struct {
				cv  *broker.Conversation
				ans broker.Answer
				err error
			}
			first := make(chan asked1, 1)
			if how != "hang-up while idle" {
				go func() {
					cv, ans, err := ask("fix_nginx")
					first <- asked1{cv, ans, err}
				}()
				scr.waitFor(t, "[d]eny? ")
			}
			if how == "end of input" {
				tty.Write([]byte{4}) // ^D
			} else {
				tty.Close()
			}
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Errorf("the broker exited with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the broker still runs 10 s after the %s:\n%s", how, scr)
			}
			if _, err := os.Stat(desktop.TerminalSocket()); err == nil {
				t.Error("the terminal broker's socket is still there")
			}

			if how == "hang-up while idle" {
				close(first)
			}
			if a, ok := <-first; !ok {
				// Nothing was showing.
			} else if a.err != nil || a.ans.Decision != broker.Once {
				t.Fatalf("the request showing at the %s: %+v, %v; want it approved by askpass", how, a.ans, a.err)
			} else {
				pw, err := a.cv.Password(ctx, 1, "")
				if string(pw) != "Hunter2-secret" || err != nil {
					t.Errorf("its password: %q, %v; want askpass's", pw, err)
				}
				a.cv.Close("ran")
				if seen, _ := os.ReadFile(asked); !strings.Contains(string(seen), "web1 asks to run as root") || !strings.Contains(string(seen), "sudo password for root on web1, to run fix_nginx") {
					t.Errorf("askpass was asked:\n%s", seen)
				}
			}

			cv, ans, err := ask("next_tool")
			if err != nil || ans.Decision != broker.Once {
				t.Fatalf("the next request: %+v, %v; want askpass's approval", ans, err)
			}
			cv.Close("ran")
			if b, _ := os.ReadFile(asked); !strings.Contains(string(b), "next_tool") {
				t.Errorf("the next request did not reach askpass:\n%s", b)
			}
		})
	}
}

// startHangable starts cmd on a new pty and returns its master, which,
// unlike pty.Start's, closes at once while being read: closing it hangs
// the terminal up, as a terminal emulator or tmux does when it ends.
// (pty.Start's master is in blocking mode, and a blocked read keeps it
// open.)
func startHangable(t *testing.T, cmd *exec.Cmd) *os.File {
	t.Helper()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(tty.Fd()))
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	tty.Close()
	return os.NewFile(uintptr(fd), "ptmx")
}
