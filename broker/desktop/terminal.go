package desktop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"ollie/broker"
)

// TerminalApprover asks on the terminal that runs the broker, for a
// desktop without a display or a person who prefers it.
//
// Approve prints the request and reads an answer line (o, a or d), asking
// again until it gets one. Password reads a line with echo turned off,
// and refuses, rather than echo a password, when In is not a terminal.
//
// One conversation holds the terminal at a time. When a request's context
// ends while the person is typing, the call returns at once; the terminal
// is released when the read ends, at once if In supports deadlines (a
// terminal opened with os.Open does), else when the person presses Enter,
// and that answer is not used.
//
// A terminal that hangs up or reaches its end (^D) is gone for good: the
// prompt it was showing and every later one return ErrUnavailable, not a
// denial, so that a relayed request goes to another approver; Gone tells
// the broker's owner, so that it stops taking requests.
type TerminalApprover struct {
	In  *os.File
	Out io.Writer

	mu sync.Mutex

	goneOnce  sync.Once
	gmu       sync.Mutex    // not mu: that one is held across a prompt
	gone      chan struct{} // closed when In hung up or ended
	goneErr   error         // why, set before gone is closed
	watchOnce sync.Once
}

// Gone is closed once the terminal is gone: a read ended (end of input,
// or an error such as a hung-up terminal's), or In reports a hang-up,
// which it watches for from the first call on, so that an idle broker
// notices too.
func (t *TerminalApprover) Gone() <-chan struct{} {
	t.goneOnce.Do(t.initGone)
	t.watchOnce.Do(func() {
		if t.In != nil {
			go t.watchHangup()
		}
	})
	return t.gone
}

func (t *TerminalApprover) initGone() { t.gone = make(chan struct{}) }

// lose records that the terminal is gone, the first cause only.
func (t *TerminalApprover) lose(cause error) {
	t.goneOnce.Do(t.initGone)
	t.gmu.Lock()
	defer t.gmu.Unlock()
	select {
	case <-t.gone:
	default:
		t.goneErr = cause
		close(t.gone)
	}
}

// unavailable is the error of a prompt on a terminal that is gone, or nil.
func (t *TerminalApprover) unavailable() error {
	t.goneOnce.Do(t.initGone)
	select {
	case <-t.gone:
		return fmt.Errorf("broker: the broker's terminal is gone (%v): %w", t.goneErr, ErrUnavailable)
	default:
		return nil
	}
}

// lost records that a read of In failed for a reason other than the
// request's end, and returns the error a prompt gives for it.
func (t *TerminalApprover) lost(err error) error {
	if errors.Is(err, io.EOF) {
		err = errors.New("end of input")
	}
	t.lose(err)
	return t.unavailable()
}

// watchHangup polls In for a hang-up (a closed pseudo-terminal, a pipe
// whose writer went away) without reading from it, until the terminal is
// gone.
func (t *TerminalApprover) watchHangup() {
	for t.unavailable() == nil {
		hup := false
		err := withFd(t.In, func(fd int) error {
			fds := []unix.PollFd{{Fd: int32(fd)}} // no events: only POLLHUP, POLLERR, POLLNVAL
			n, err := unix.Poll(fds, 500)
			if errors.Is(err, unix.EINTR) {
				return nil
			}
			hup = n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
			return err
		})
		if err != nil || hup {
			if err == nil {
				err = errors.New("hung up")
			}
			t.lose(err)
			return
		}
	}
}

// maxTerminalLine bounds an answer or a password typed on the terminal.
const maxTerminalLine = 1024

// Approve asks once / always / deny on the terminal.
func (t *TerminalApprover) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	return onTerminal(t, ctx, func() (broker.Answer, error) {
		ans, err := t.approve(ctx, req)
		if ctx.Err() != nil {
			fmt.Fprintf(t.Out, "\nollie: request %s was withdrawn; that answer is not used.\n", req.IDName())
		}
		return ans, err
	})
}

// onTerminal runs ask with the terminal to itself once it is free, unless
// ctx ends first: a request withdrawn while it waits for the terminal is
// never shown, and one withdrawn while it is shown is let go at once.
func onTerminal[T any](t *TerminalApprover, ctx context.Context, ask func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if ctx.Err() != nil {
			done <- result{err: context.Cause(ctx)}
			return
		}
		if err := t.unavailable(); err != nil {
			done <- result{err: err}
			return
		}
		v, err := ask()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var none T
		return none, context.Cause(ctx)
	}
}

func (t *TerminalApprover) approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	fmt.Fprintf(t.Out, "\n%s", req.Prompt())
	var buf [maxTerminalLine]byte
	for {
		fmt.Fprintf(t.Out, "approve: [o]nce / [a]lways (%s on %s) / [d]eny? ", req.ToolName(), req.HostName())
		n, err := t.readLine(ctx, buf[:])
		switch {
		case errors.Is(err, errLineTooLong): // asked again below
		case err != nil && ctx.Err() == nil:
			fmt.Fprintln(t.Out)
			return broker.Answer{}, t.lost(err) // not a denial: another approver may ask
		case err != nil:
			return broker.Answer{}, err
		}
		switch strings.ToLower(strings.TrimSpace(string(buf[:n]))) {
		case "o", "once", "y", "yes":
			return broker.Answer{Decision: broker.Once}, nil
		case "a", "always":
			return broker.Answer{Decision: broker.Always}, nil
		case "d", "deny", "n", "no":
			return broker.Answer{Decision: broker.Deny, Reason: deniedByPerson}, nil
		}
		fmt.Fprintln(t.Out, "please answer o (once), a (always) or d (deny)")
	}
}

// Password reads the password with echo off.
func (t *TerminalApprover) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	if err := t.unavailable(); err != nil {
		return nil, err
	}
	if t.In == nil || !isTerminal(t.In) {
		return nil, fmt.Errorf("broker: the broker's input is not a terminal, and a password typed there would be shown; refusing to read one: %w", broker.ErrDenied)
	}
	return onTerminal(t, ctx, func() ([]byte, error) {
		pw, err := t.password(ctx, req.PasswordPrompt(attempt, problem))
		if ctx.Err() != nil {
			broker.Zero(pw)
			fmt.Fprintf(t.Out, "ollie: request %s was withdrawn; that password is not used.\n", req.IDName())
			return nil, context.Cause(ctx)
		}
		return pw, err
	})
}

func (t *TerminalApprover) password(ctx context.Context, prompt string) ([]byte, error) {
	var saved *term.State
	err := withFd(t.In, func(fd int) error {
		var err error
		if saved, err = term.GetState(fd); err != nil {
			return err
		}
		// Echo goes off before the prompt is shown, as sudo does, so
		// that a password typed ahead of the prompt is not shown either.
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		tio.Lflag &^= unix.ECHO
		tio.Lflag |= unix.ICANON | unix.ISIG
		tio.Iflag |= unix.ICRNL
		return unix.IoctlSetTermios(fd, unix.TCSETS, tio)
	})
	if saved != nil {
		defer withFd(t.In, func(fd int) error { return term.Restore(fd, saved) })
	}
	if err != nil {
		// A terminal that hung up has no settings to read.
		return nil, t.lost(fmt.Errorf("terminal %s: %w", t.In.Name(), err))
	}

	fmt.Fprint(t.Out, prompt)
	var buf [maxTerminalLine]byte
	defer broker.Zero(buf[:])
	n, err := t.readLine(ctx, buf[:])
	fmt.Fprintln(t.Out) // the Enter was not echoed
	switch {
	case errors.Is(err, errLineTooLong):
		return nil, fmt.Errorf("broker: the password typed is longer than %d bytes: %w", maxTerminalLine, broker.ErrDenied)
	case err != nil && ctx.Err() == nil:
		return nil, t.lost(err) // not a denial: another approver may ask
	case err != nil:
		return nil, err
	}
	pw := make([]byte, n)
	copy(pw, buf[:n])
	return pw, nil
}

var errLineTooLong = errors.New("line too long")

// withFd runs f on the file's descriptor without File.Fd, which would put
// the file in blocking mode for good and so end its read deadlines, the
// way a withdrawn request frees the terminal.
func withFd(file *os.File, f func(fd int) error) error {
	rc, err := file.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	is := false
	withFd(f, func(fd int) error { is = term.IsTerminal(fd); return nil })
	return is
}

// readLine reads one line into buf, one byte at a time so that nothing
// after the newline is taken from the terminal (the next prompt's answer
// may already be typed) and nothing of it is copied elsewhere. The newline
// and a carriage return before it are dropped. A line longer than buf is
// read to its end and errLineTooLong returned. When ctx ends and In takes
// deadlines, the read stops at once.
func (t *TerminalApprover) readLine(ctx context.Context, buf []byte) (int, error) {
	if ctx.Err() != nil {
		return 0, context.Cause(ctx) // what is typed next is for the next prompt
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		t.In.SetReadDeadline(time.Now())
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
		t.In.SetReadDeadline(time.Time{})
	}()

	var c [1]byte
	n, long := 0, false
	for {
		m, err := t.In.Read(c[:])
		if m == 1 {
			if c[0] == '\n' {
				break
			}
			if n < len(buf) {
				buf[n] = c[0]
				n++
			} else {
				long = true
			}
			continue
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
			return 0, context.Cause(ctx)
		}
		if errors.Is(err, io.EOF) && n > 0 {
			break // a last line without its newline
		}
		return 0, err
	}
	c[0] = 0
	if long {
		return 0, errLineTooLong
	}
	if n > 0 && buf[n-1] == '\r' {
		buf[n-1] = 0
		n--
	}
	return n, nil
}

func (t *TerminalApprover) String() string {
	if t.In == nil {
		return "terminal (none)"
	}
	return "terminal " + t.In.Name()
}
