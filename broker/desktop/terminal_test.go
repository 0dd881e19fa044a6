package desktop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"ollie/broker"
	"ollie/internal/await"
)

const terminalHelperEnv = "OLLIE_BROKER_TERMINAL_HELPER"

// TestTerminalHelperProcess is the broker in a child process, its
// standard input and output the slave side of a pty the test types into.
// It reports on stdout what the approver returned, the password only as a
// hash.
func TestTerminalHelperProcess(t *testing.T) {
	if os.Getenv(terminalHelperEnv) != "1" {
		return
	}
	a := &TerminalApprover{In: os.Stdin, Out: os.Stdout}
	ctx := context.Background()
	req := askRequest(true)
	for {
		ans, err := a.Approve(ctx, req)
		fmt.Printf("result: decision=%s err=%v unavailable=%v\n", ans.Decision, err, errors.Is(err, ErrUnavailable))
		if ans.Decision == broker.Deny || err != nil {
			break
		}
		for attempt, problem := 1, ""; attempt <= 2; attempt, problem = attempt+1, "wrong password" {
			pw, err := a.Password(ctx, req, attempt, problem)
			fmt.Printf("result: password sha256=%x len=%d denied=%v err=%v unavailable=%v\n", sha256.Sum256(pw), len(pw), errors.Is(err, broker.ErrDenied), err, errors.Is(err, ErrUnavailable))
			broker.Zero(pw)
		}
	}
	os.Exit(0)
}

// ptyChild runs TestTerminalHelperProcess on a new pty and collects all it
// writes there.
type ptyChild struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd

	mu  sync.Mutex
	out bytes.Buffer
	eof chan struct{}
}

func startPtyChild(t *testing.T) *ptyChild {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTerminalHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), terminalHelperEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	c := &ptyChild{t: t, master: master, cmd: cmd, eof: make(chan struct{})}
	go func() {
		defer close(c.eof)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			c.mu.Lock()
			c.out.Write(buf[:n])
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		master.Close()
	})
	return c
}

func (c *ptyChild) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// expect waits until the child has written want n times in all.
func (c *ptyChild) expect(want string, n int) {
	c.t.Helper()
	await.Until(c.t, 20*time.Second, fmt.Sprintf("%q (%d times) on the terminal", want, n),
		func() bool { return strings.Count(c.output(), want) >= n },
		func() string { return "it shows:\n" + c.output() })
}

func (c *ptyChild) typeLine(s string) {
	c.t.Helper()
	if _, err := c.master.Write([]byte(s + "\r")); err != nil {
		c.t.Fatal(err)
	}
}

// TestTerminalApproverPty drives the terminal approver as a person would,
// through a real pty: a wrong answer asked again, "always", a password
// (never shown on the terminal), a second password, then a denial.
func TestTerminalApproverPty(t *testing.T) {
	c := startPtyChild(t)
	const question = "approve: [o]nce / [a]lways (system_logs on db3) / [d]eny? "
	req := askRequest(true)

	c.expect(question, 1)
	if out := c.output(); !strings.Contains(strings.ReplaceAll(out, "\r\n", "\n"), req.Prompt()) {
		t.Fatalf("the request was not shown; the terminal shows:\n%s", out)
	}
	c.typeLine("maybe")
	c.expect("please answer o (once), a (always) or d (deny)", 1)
	c.expect(question, 2)
	c.typeLine("a")
	c.expect("result: decision=always err=<nil> unavailable=false", 1)

	const secret = "correct horse battery staple"
	c.expect(req.PasswordPrompt(1, ""), 1)
	c.typeLine(secret)
	c.expect("result: password", 1)
	c.expect(req.PasswordPrompt(2, "wrong password"), 1)
	c.typeLine(secret + "-2")
	c.expect("result: password", 2)

	c.expect(question, 3)
	c.typeLine("d")
	c.expect("result: decision=deny", 1)
	select {
	case <-c.eof:
	case <-time.After(20 * time.Second):
		t.Fatal("the helper did not exit")
	}

	out := c.output()
	if strings.Contains(out, "correct horse") {
		t.Errorf("the password was echoed on the terminal:\n%s", out)
	}
	for i, want := range []string{secret, secret + "-2"} {
		line := fmt.Sprintf("result: password sha256=%x len=%d denied=false err=<nil> unavailable=false", sha256.Sum256([]byte(want)), len(want))
		if !strings.Contains(out, line) {
			t.Errorf("password %d did not arrive intact; want %q in:\n%s", i+1, line, out)
		}
	}
	// The answers, typed with echo on, are shown as typed.
	for _, typed := range []string{"maybe", "a\r\n", "d\r\n"} {
		if !strings.Contains(out, typed) {
			t.Errorf("the answer %q was not echoed:\n%s", typed, out)
		}
	}
}

// TestTerminalApproverEOF: end of input (^D) at the question, or at the
// password prompt, is not a person's answer: the terminal is gone, that
// prompt and every later one return ErrUnavailable at once, so that a
// relayed request goes to another approver, and Gone is closed.
func TestTerminalApproverEOF(t *testing.T) {
	t.Run("question", func(t *testing.T) {
		c := startPtyChild(t)
		c.expect("[d]eny? ", 1)
		c.master.Write([]byte{4}) // ^D: end of input
		c.expect("result: decision= err=broker: the broker's terminal is gone (end of input): broker: nobody is there to ask unavailable=true", 1)
	})
	t.Run("password", func(t *testing.T) {
		c := startPtyChild(t)
		c.expect("[d]eny? ", 1)
		c.typeLine("o")
		c.expect(askRequest(true).PasswordPrompt(1, ""), 1)
		c.master.Write([]byte{4})
		c.expect("result: password", 2)
		c.expect("result: decision=", 2)
		out := c.output()
		if n := strings.Count(out, "denied=false err=broker: the broker's terminal is gone (end of input): broker: nobody is there to ask unavailable=true"); n != 2 {
			t.Errorf("after ^D at the password prompt, %d of 2 password asks were unavailable:\n%s", n, out)
		}
		if strings.Contains(out, askRequest(true).PasswordPrompt(2, "wrong password")) || strings.Count(out, "[d]eny? ") != 1 {
			t.Errorf("a gone terminal was prompted again:\n%s", out)
		}
		if !strings.HasSuffix(strings.TrimSpace(out), "unavailable=true") {
			t.Errorf("the next question was not unavailable:\n%s", out)
		}
	})
}

// TestTerminalApproverHangup: a terminal that hangs up while idle (its
// pseudo-terminal's master closed) closes Gone without a prompt, and the
// next prompt is unavailable without reading.
func TestTerminalApproverHangup(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	a := &TerminalApprover{In: tty, Out: io.Discard}
	gone := a.Gone()
	select {
	case <-gone:
		t.Fatal("gone before the hang-up")
	case <-time.After(100 * time.Millisecond):
	}
	master.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("a hung-up terminal was not noticed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.Approve(ctx, askRequest(false)); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "hung up") {
		t.Errorf("Approve on a hung-up terminal: %v, want ErrUnavailable", err)
	}
	if _, err := a.Password(ctx, askRequest(true), 1, ""); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Password on a hung-up terminal: %v, want ErrUnavailable", err)
	}
}

// TestTerminalApproverCancel checks that a withdrawn request frees the
// terminal at once when it takes deadlines, says so, and turns echo back
// on.
func TestTerminalApproverCancel(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	var mu sync.Mutex
	var shown bytes.Buffer
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			shown.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	waitShown := func(want string, n int) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%q shown %d times", want, n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Count(shown.String(), want) >= n
		})
	}
	a := &TerminalApprover{In: tty, Out: tty}
	req := askRequest(true)

	for i, gate := range []string{"approve", "password"} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			var err error
			if gate == "approve" {
				_, err = a.Approve(ctx, req)
			} else {
				_, err = a.Password(ctx, req, 1, "")
			}
			done <- err
		}()
		if gate == "approve" {
			waitShown("[d]eny? ", 1)
		} else {
			waitShown(req.PasswordPrompt(1, ""), 1)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v, want context.Canceled", gate, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return when its request was withdrawn", gate)
		}
		waitShown("request req-1 was withdrawn", i+1)
	}

	// The terminal is free again and its echo restored: the next request
	// gets the next answer typed.
	ans := make(chan broker.Answer, 1)
	go func() {
		a2, err := a.Approve(context.Background(), req)
		if err != nil {
			t.Errorf("after withdrawals: %v", err)
		}
		ans <- a2
	}()
	master.Write([]byte("o\r"))
	select {
	case got := <-ans:
		if got.Decision != broker.Once {
			t.Errorf("after withdrawals: %+v, want once", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal stayed taken after the withdrawn requests")
	}
	var tio *unix.Termios
	if err := withFd(tty, func(fd int) (err error) { tio, err = unix.IoctlGetTermios(fd, unix.TCGETS); return err }); err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO == 0 {
		t.Error("echo stayed off after a withdrawn password prompt")
	}
}

// TestTerminalApproverNotATerminal reads the answers from a pipe: the
// question may be answered there, a password is never read from it.
func TestTerminalApproverNotATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var out bytes.Buffer
	a := &TerminalApprover{In: r, Out: &out}
	w.Write([]byte("always\nhunter2\n"))
	ans, err := a.Approve(context.Background(), askRequest(true))
	if err != nil || ans.Decision != broker.Always {
		t.Fatalf("answer from a pipe: %+v, %v", ans, err)
	}
	pw, err := a.Password(context.Background(), askRequest(true), 1, "")
	if !errors.Is(err, broker.ErrDenied) || pw != nil {
		t.Fatalf("password from a pipe: %q, %v; want ErrDenied", pw, err)
	}
	if !strings.Contains(err.Error(), "not a terminal") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	// The password line was left where it was.
	w.Close()
	rest, _ := io.ReadAll(r)
	if string(rest) != "hunter2\n" {
		t.Errorf("the pipe holds %q after the refusal, want the line untouched", rest)
	}
	if strings.Contains(out.String(), "hunter2") {
		t.Errorf("the password was written out: %s", out.String())
	}
}
