package agent

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
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// DefaultPromptTimeout bounds each prompt command when [PromptEnv.Timeout]
// is zero. It is a bound against a command that hangs, not a speed
// expected: a busy host (where agents are wanted most) once took over 5 s
// to run the starter profile's context.sh, and the agent did not start.
const DefaultPromptTimeout = 20 * time.Second

// MaxPromptSize bounds a resolved system prompt, in bytes: far more than any
// model's context should spend on instructions, small enough that a command
// that runs away (cat of the wrong file, yes) is caught.
const MaxPromptSize = 256 << 10

// PromptEnv is where an agent's prompt commands run and what they are told.
// Each command runs with /bin/sh -c in Cwd, with olliesrv's environment,
// then Env, then these variables:
//
//	OLLIE          the data directory (Data)
//	OLLIE_CWD      the agent's working directory (Cwd)
//	PWD            the same
//	OLLIE_SESSION  the session's ID (Session)
//	OLLIE_AGENT    the agent's ID (Agent)
//	OLLIE_PROFILE  the profile's name
type PromptEnv struct {
	Data    string        // "" means DataDir()
	Cwd     string        // absolute; required
	Session string        // ID, which the namespace accepts wherever a name goes
	Agent   string        // ID
	Env     []string      // more variables as KEY=value, e.g. the session's
	Timeout time.Duration // per command; 0 means DefaultPromptTimeout
}

func (env PromptEnv) data() string {
	if env.Data == "" {
		return DataDir()
	}
	return env.Data
}

// environ is the whole environment of a command run for the profile named
// profile: the caller's variables first, so that ollie's own win.
func environ(extra []string, data, cwd, session, agent, profile string, more ...string) []string {
	return append(append(os.Environ(), extra...), append([]string{
		"OLLIE=" + data,
		"OLLIE_CWD=" + cwd,
		"PWD=" + cwd,
		"OLLIE_SESSION=" + session,
		"OLLIE_AGENT=" + agent,
		"OLLIE_PROFILE=" + profile,
	}, more...)...)
}

// A PromptError says why a profile's prompt did not resolve.
type PromptError struct {
	Profile  string // the profile's name
	File     string // and its file
	Index    int    // of the command in "prompt"; -1 for the prompt as a whole
	Command  string
	ExitCode int    // -1 when the command did not exit by itself or did not run
	Stderr   string // what the command wrote to stderr, bounded
	Err      error
}

func (e *PromptError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent: profile %q", e.Profile)
	if e.File != "" {
		fmt.Fprintf(&b, " (%s)", e.File)
	}
	if e.Index >= 0 {
		fmt.Fprintf(&b, ": prompt[%d] %s", e.Index, quoteCommand(e.Command))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if s := oneLine(e.Stderr); s != "" {
		b.WriteString(": ")
		b.WriteString(s)
	}
	return b.String()
}

func (e *PromptError) Unwrap() error { return e.Err }

// ResolvePrompt runs the profile's prompt commands in order and returns
// their standard output, concatenated: the agent's system prompt. An output
// that does not end in a newline gets one, so that fragments never run
// into each other.
//
// Any failure is an error and no prompt: a command that exits non-zero,
// times out, writes something other than UTF-8 text, or pushes the prompt
// past MaxPromptSize; and commands that all succeed but together write
// only white space. An agent whose instructions were silently lost would
// act on a half-written prompt, which is worse than not starting: a
// fragment that may legitimately have nothing to say exits 0 (`|| true`).
// A profile with no prompt commands resolves to "" without error.
func ResolvePrompt(ctx context.Context, p *Profile, env PromptEnv) (string, error) {
	fail := func(i int, command string, r shellResult, err error) error {
		return &PromptError{Profile: p.Name, File: p.File, Index: i, Command: command, ExitCode: r.exitCode, Stderr: r.stderr, Err: err}
	}
	if len(p.Prompt) == 0 {
		return "", nil
	}
	if !filepath.IsAbs(env.Cwd) {
		return "", fail(-1, "", shellResult{exitCode: -1}, fmt.Errorf("the working directory %q is not an absolute path", env.Cwd))
	}
	timeout := env.Timeout
	if timeout <= 0 {
		timeout = DefaultPromptTimeout
	}
	vars := environ(env.Env, env.data(), env.Cwd, env.Session, env.Agent, p.Name)
	var b strings.Builder
	for i, command := range p.Prompt {
		r := shellCmd{command: command, dir: env.Cwd, env: vars, timeout: timeout, maxOut: MaxPromptSize - b.Len()}.run(ctx)
		switch {
		case errors.Is(r.err, errTooMuchOutput):
			return "", fail(i, command, r, fmt.Errorf("the prompt would be longer than %d KiB", MaxPromptSize>>10))
		case r.err != nil:
			return "", fail(i, command, r, r.err)
		case r.exitCode != 0:
			return "", fail(i, command, r, fmt.Errorf("exit status %d", r.exitCode))
		case !utf8.ValidString(r.stdout):
			return "", fail(i, command, r, errors.New("its output is not UTF-8 text"))
		}
		b.WriteString(r.stdout)
		if r.stdout != "" && !strings.HasSuffix(r.stdout, "\n") {
			b.WriteByte('\n')
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", fail(-1, "", shellResult{exitCode: -1}, fmt.Errorf("the %d prompt commands wrote nothing: the agent would have no instructions", len(p.Prompt)))
	}
	return b.String(), nil
}

// quoteCommand shows a command in an error, shortened.
func quoteCommand(c string) string {
	c = oneLine(c)
	if len(c) > 100 {
		c = c[:100] + "…"
	}
	return "`" + c + "`"
}

// oneLine joins the lines of s with "; ", for an error message.
func oneLine(s string) string {
	lines := strings.FieldsFunc(strings.TrimSpace(s), func(r rune) bool { return r == '\n' })
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}

// A shellCmd is one command of a profile: a prompt command or a hook.
type shellCmd struct {
	command string
	dir     string
	env     []string // the whole environment
	stdin   []byte   // nil: /dev/null
	timeout time.Duration
	maxOut  int // bytes of stdout; more is errTooMuchOutput
}

type shellResult struct {
	stdout   string
	stderr   string // the first maxStderr bytes
	exitCode int    // -1 when it did not exit by itself
	err      error  // nil when it exited, whatever the code
	took     time.Duration
}

// maxStderr bounds the stderr kept: enough for an error message.
const maxStderr = 4 << 10

// errTooMuchOutput is what an overflowError is.
var errTooMuchOutput = errors.New("too much output")

type overflowError int

func (e overflowError) Error() string {
	n := int(e)
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("wrote more than %d MiB to stdout", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("wrote more than %d KiB to stdout", n>>10)
	}
	return fmt.Sprintf("wrote more than %d bytes to stdout", n)
}

func (e overflowError) Is(target error) bool { return target == errTooMuchOutput }

// timeoutError is a command's timeout: a context.DeadlineExceeded that says
// how long it was.
type timeoutError time.Duration

func (e timeoutError) Error() string { return fmt.Sprintf("timed out after %v", time.Duration(e)) }
func (e timeoutError) Unwrap() error { return context.DeadlineExceeded }

// run runs the command in its own process group. The group is killed when
// the timeout passes, ctx ends or stdout overflows, and once the command
// has exited, so that nothing it started outlives it.
func (c shellCmd) run(ctx context.Context) shellResult {
	begin := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, stop := context.WithTimeoutCause(ctx, c.timeout, timeoutError(c.timeout))
	defer stop()

	r := shellResult{exitCode: -1}
	fail := func(err error) shellResult {
		r.err, r.took = err, time.Since(begin)
		return r
	}
	// exec would blame /bin/sh for a missing directory.
	if fi, err := os.Stat(c.dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", c.dir)
		}
		return fail(fmt.Errorf("the working directory: %w", err))
	}

	// The command writes into pipes of ours rather than exec's, so that
	// Wait returns when the shell exits, not when the last process holding
	// the pipes does.
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return fail(err)
	}
	defer errR.Close()

	cmd := exec.CommandContext(tctx, "/bin/sh", "-c", c.command)
	cmd.Dir = c.dir
	cmd.Env = c.env
	if c.stdin != nil {
		cmd.Stdin = bytes.NewReader(c.stdin)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // for stdin, should something else hold it
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		return fail(fmt.Errorf("cannot start /bin/sh: %w", err))
	}
	stdout := &capped{max: c.maxOut, overflow: func() { cancel(overflowError(c.maxOut)) }}
	stderr := &capped{max: maxStderr}
	var copies sync.WaitGroup
	copies.Go(func() { io.Copy(stdout, outR) })
	copies.Go(func() { io.Copy(stderr, errR) })

	pid := cmd.Process.Pid
	werr := cmd.Wait()
	// Kill what the command left running. The group outlives its leader
	// while any member lives, so its ID is not reused yet; ESRCH says there
	// was nothing left.
	syscall.Kill(-pid, syscall.SIGKILL)
	// A process that left the group (setsid) may still hold the pipes: take
	// what it writes in the next second, then stop reading.
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	grace := time.NewTimer(time.Second)
	select {
	case <-copied:
	case <-grace.C:
		outR.Close()
		errR.Close()
		<-copied
	}
	grace.Stop()
	r.took = time.Since(begin)
	r.stdout, r.stderr = stdout.buf.String(), stderr.buf.String()
	if stderr.over {
		r.stderr += "…"
	}
	ps := cmd.ProcessState
	switch {
	case stdout.over || (ps != nil && !ps.Exited() && context.Cause(tctx) != nil):
		r.err = context.Cause(tctx)
	case ps != nil && ps.Exited():
		r.exitCode = ps.ExitCode()
	case ps != nil:
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.err = fmt.Errorf("killed by signal %d (%v)", ws.Signal(), ws.Signal())
		} else {
			r.err = werr
		}
	default:
		r.err = werr
	}
	return r
}

// capped keeps the first max bytes written to it. Writes past max still
// succeed, so that the writer is not stopped by a broken pipe first;
// overflow, if set, is called once.
type capped struct {
	buf      bytes.Buffer
	max      int
	over     bool
	overflow func()
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		if !c.over {
			c.over = true
			if c.overflow != nil {
				c.overflow()
			}
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}
