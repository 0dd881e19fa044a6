package desktop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"ollie/broker"
)

// AskpassApprover asks through an askpass program, the convention OpenSSH
// and sudo already use, so that ssh-askpass, ksshaskpass and the like work
// unchanged.
//
// The program runs with the prompt as its only argument, no standard
// input, and the caller's environment. For the elevation gate
// SSH_ASKPASS_PROMPT=confirm is set: exit status 0 approves this request
// once, any other status denies. As an extension an askpass written for
// ollie may print "always" on its standard output and exit 0 to approve
// the tool on that host from now on; ssh-askpass prints nothing and so can
// only approve once. For the credential gate SSH_ASKPASS_PROMPT is removed:
// the program prints the password on its standard output (one trailing
// newline is removed) and exits 0, or exits non-zero when the person
// declines.
type AskpassApprover struct {
	// Program is the askpass to run: a path, or a name looked up in PATH.
	Program string
}

// AskpassProgram returns the askpass to use from the environment:
// OLLIE_ASKPASS, or else SSH_ASKPASS when a display is there to show it
// (OpenSSH uses SSH_ASKPASS only then, too). It returns "" when there is
// none.
func AskpassProgram() string {
	if p := os.Getenv("OLLIE_ASKPASS"); p != "" {
		return p
	}
	if p := os.Getenv("SSH_ASKPASS"); p != "" && haveDisplay() {
		return p
	}
	return ""
}

func haveDisplay() bool {
	return os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != ""
}

// askpassAlways is what an ollie-aware askpass prints to approve always.
const askpassAlways = "always"

// Approve runs the askpass in confirm mode.
func (a *AskpassApprover) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	if a.Program == "" {
		return broker.Answer{}, errors.New("broker: askpass: no program configured (set OLLIE_ASKPASS)")
	}
	res, err := runHelper(ctx, a.Program, []string{req.Prompt()}, "SSH_ASKPASS_PROMPT=confirm")
	if err != nil {
		return broker.Answer{}, err
	}
	defer broker.Zero(res.out)
	if res.code != 0 {
		return broker.Answer{Decision: broker.Deny, Reason: deniedByPerson}, nil
	}
	if string(trimNewline(res.out)) == askpassAlways {
		return broker.Answer{Decision: broker.Always}, nil
	}
	return broker.Answer{Decision: broker.Once}, nil
}

// Password runs the askpass in its ordinary mode and returns what it
// printed.
func (a *AskpassApprover) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	if a.Program == "" {
		return nil, errors.New("broker: askpass: no program configured (set OLLIE_ASKPASS)")
	}
	res, err := runHelper(ctx, a.Program, []string{req.PasswordPrompt(attempt, problem)}, "")
	if err != nil {
		return nil, err
	}
	if res.code != 0 {
		broker.Zero(res.out)
		return nil, fmt.Errorf("broker: askpass %s exited with status %d: %w", a.Program, res.code, broker.ErrDenied)
	}
	return trimNewline(res.out), nil
}

func (a *AskpassApprover) String() string { return "askpass " + a.Program }

// deniedByPerson is the reason the model reads when a person said no.
const deniedByPerson = "denied by the person at the desktop"

// trimNewline drops one trailing newline, as sudo does with an askpass
// answer: a password may end in spaces, so nothing else is trimmed.
func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b[n-1] = 0
		return b[:n-1]
	}
	return b
}

const (
	// maxHelperOutput bounds what a helper may print: a password or a
	// button label, never more.
	maxHelperOutput = 4096
	// maxHelperStderr bounds the diagnostics kept from a helper.
	maxHelperStderr = 2048
	// helperWaitDelay is how long a helper has after SIGTERM, and its
	// output after it exits, before both are cut off.
	helperWaitDelay = 2 * time.Second
)

// helperResult is what a helper program said. out is a slice of its own,
// exactly as long as the output, that the caller zeroes.
type helperResult struct {
	out    []byte
	code   int
	stderr string
}

// ErrHelperOutput is returned when a helper prints more than a password or
// an answer could be.
var ErrHelperOutput = errors.New("broker: helper printed too much")

// runHelper runs a dialog or askpass program with no standard input and
// reads its standard output into a fixed buffer that is zeroed afterwards:
// the output may be a password, and a growing buffer would leave copies of
// it behind. setenv ("NAME=value") is added to the environment, and
// SSH_ASKPASS_PROMPT is never inherited. A non-zero exit is not an error;
// failing to start, being killed, or ctx ending is.
func runHelper(ctx context.Context, program string, args []string, setenv string) (helperResult, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return helperResult{}, fmt.Errorf("broker: %s: %w", program, err)
	}
	defer r.Close()

	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Env = helperEnv(setenv)
	cmd.Stdout = w
	stderr := &cappedBuffer{max: maxHelperStderr}
	cmd.Stderr = stderr
	// Its own process group, so that a helper's children (a shell
	// script's dialog) go when it is cancelled.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = helperWaitDelay
	if err := cmd.Start(); err != nil {
		w.Close()
		return helperResult{}, fmt.Errorf("broker: cannot run %s: %w", program, err)
	}
	w.Close()

	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		// A grandchild may still hold the pipe: give it a moment, then
		// stop reading.
		r.SetReadDeadline(time.Now().Add(helperWaitDelay))
		waited <- err
	}()

	var scratch [maxHelperOutput + 1]byte
	defer broker.Zero(scratch[:])
	n, rerr := readUntilEOF(r, scratch[:])
	r.Close()
	werr := <-waited
	if ctx.Err() != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return helperResult{}, fmt.Errorf("broker: %s: %w", program, context.Cause(ctx))
	}
	if n > maxHelperOutput {
		return helperResult{}, fmt.Errorf("%w: %s wrote more than %d bytes", ErrHelperOutput, program, maxHelperOutput)
	}
	if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		return helperResult{}, fmt.Errorf("broker: reading from %s: %w", program, rerr)
	}
	res := helperResult{code: 0, stderr: stderr.String()}
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || ee.ExitCode() < 0 {
			return helperResult{}, fmt.Errorf("broker: %s: %w%s", program, werr, stderrSuffix(res.stderr))
		}
		res.code = ee.ExitCode()
	}
	res.out = make([]byte, n)
	copy(res.out, scratch[:n])
	return res, nil
}

// readUntilEOF fills buf until EOF or until it is full.
func readUntilEOF(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func helperEnv(setenv string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SSH_ASKPASS_PROMPT=") {
			env = append(env, kv)
		}
	}
	if setenv != "" {
		env = append(env, setenv)
	}
	return env
}

func stderrSuffix(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return ": " + s
}

// cappedBuffer keeps the first max bytes written to it and discards the
// rest, so that a chatty helper cannot grow the broker.
type cappedBuffer struct {
	max int
	buf bytes.Buffer
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string { return c.buf.String() }

// programName is a helper's name without its directory, for messages and
// for telling zenity from kdialog.
func programName(p string) string { return filepath.Base(p) }
