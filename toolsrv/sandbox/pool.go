package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// warmArg, after helperArg, makes the binary a pre-started helper's
	// outer stage; warmConfineArg its confining stage.
	warmArg        = "warm"
	warmConfineArg = "warm-confine"
	// callFD is where a pre-started stage receives its call: a socket.
	callFD = 3
	// maxCall bounds a call: its policy, argv and environment.
	maxCall = 2 * maxPolicy
)

// A Pool keeps helpers started ahead of their calls, so that a call pays
// no Go process start: it is handed to a helper already waiting, which
// confines itself and execs the tool. Each helper takes one call; the
// pool starts the next in the background as each is taken. A helper
// started after a call builds that call's Landlock rules while it waits
// (all but its per-call rules, [PathRule.PerCall]), so that the next call
// under the same policy adds only its own.
//
// The helpers are children of the process that made the pool, and die
// with it: Pdeathsig, and the end of their socket to the pool (an idle
// helper exits when the pool closes or its process ends). Close ends
// every idle helper and waits for them; calls already handed over run on.
type Pool struct {
	ready chan *warmHelper
	size  int

	mu      sync.Mutex
	closed  bool
	pending sync.WaitGroup // refills and discards
	// An idle pool lets its helpers go (IdleAfter): drained until the
	// next call, which starts its helper itself and the rest in the
	// background.
	idle    time.Duration
	timer   *time.Timer
	drained bool
	// prep is the policy (without its per-call rules) of the last call,
	// which the helpers started since prepare for: a session's calls
	// share their profile and directory.
	prep []byte
}

// warmHelper is one pre-started helper and the pool's ends of its
// sockets: to the helper, which sends the call's status back on it, and to
// its confining stage, which the call goes to.
type warmHelper struct {
	proc *os.Process
	sock int
	call int
	prep []byte // the policy its stage was sent to prepare, nil if none
}

// discard ends an idle helper: with its sockets closed before a call it
// exits at once, and is reaped here.
func (h *warmHelper) discard() {
	unix.Close(h.call)
	unix.Close(h.sock)
	h.proc.Wait()
}

// NewPool returns a pool of size pre-started helpers, which it starts in
// the background. It returns nil where there is no pre-started helper
// (outside Linux): callers then use [Command].
func NewPool(size int) *Pool {
	if !poolSupported || size <= 0 {
		return nil
	}
	p := &Pool{ready: make(chan *warmHelper, size), size: size}
	for range size {
		p.refill()
	}
	return p
}

// IdleAfter has the pool end its waiting helpers once no call has
// started for d (0, the default, keeps them): an idle session then costs
// its host no helper processes, and its next call pays for starting one
// (the cold figure of BenchmarkDispatchVsBare) while the others start
// behind it.
func (p *Pool) IdleAfter(d time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = d
	p.touch()
}

// touch restarts the idle clock; p.mu is held.
func (p *Pool) touch() {
	if p.idle <= 0 || p.closed {
		return
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(p.idle, p.drain)
		return
	}
	p.timer.Reset(p.idle)
}

// drain ends the waiting helpers of a pool no call has used for its idle
// time, and keeps refills from starting others until the next call.
func (p *Pool) drain() {
	p.mu.Lock()
	if p.closed || p.drained {
		p.mu.Unlock()
		return
	}
	p.drained = true
	p.pending.Add(1)
	p.mu.Unlock()
	defer p.pending.Done()
	for {
		select {
		case h := <-p.ready:
			h.discard()
		default:
			return
		}
	}
}

// Drained reports whether the pool let its helpers go for being idle.
func (p *Pool) Drained() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drained
}

// refill starts one helper in the background and adds it to the pool.
func (p *Pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.drained {
		return
	}
	p.pending.Add(1)
	go func() {
		defer p.pending.Done()
		h, err := startWarm()
		if err != nil {
			return // the next call starts one itself, and reports why it cannot
		}
		p.mu.Lock()
		prep := p.prep
		p.mu.Unlock()
		if prep != nil && sendFramed(h.call, append([]byte{prepareTag}, prep...), nil) == nil {
			h.prep = prep
		}
		p.mu.Lock()
		if !p.closed && !p.drained {
			select {
			case p.ready <- h:
				p.mu.Unlock()
				return
			default:
			}
		}
		p.mu.Unlock()
		h.discard()
	}()
}

// take returns a waiting helper, or starts one when none waits. The
// caller has the pool start another (refill) once the call is done.
func (p *Pool) take() (*warmHelper, error) {
	p.mu.Lock()
	closed, woke := p.closed, p.drained
	p.drained = false
	p.touch()
	p.mu.Unlock()
	if closed {
		return nil, errors.New("sandbox: the helper pool is closed")
	}
	if woke {
		// This call starts its own helper below; the others wait for
		// the next calls, as before the pool went idle.
		for range p.size - 1 {
			p.refill()
		}
	}
	select {
	case h := <-p.ready:
		return h, nil
	default:
		return startWarm()
	}
}

// expect has the helpers started from now on prepare for policy base
// (without its per-call rules, as splitPolicy makes it).
func (p *Pool) expect(base []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !bytes.Equal(p.prep, base) {
		p.prep = base
	}
}

// Idle returns how many helpers wait for a call.
func (p *Pool) Idle() int { return len(p.ready) }

// Close ends the idle helpers and waits for them and for helpers being
// started. Calls already running are not touched.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.pending.Wait() // no refill sends after this
	for {
		select {
		case h := <-p.ready:
			h.discard()
		default:
			return
		}
	}
}

// Command is [Command] through the pool: a call to run the tool at path
// with args under policy pol, handed at Start to a helper that is already
// waiting. What the call guarantees is what Command's does: the same
// limits, Landlock, subreaper, process group, signals, [Kill] and exit
// statuses. The returned Call is set up like Command's *exec.Cmd: Env
// holds the environment pol allows, to append to; set Stdin, Stdout,
// Stderr, Dir and WaitDelay before Start.
func (p *Pool) Command(ctx context.Context, pol *Policy, path string, args []string) (*Call, error) {
	if err := checkCall(pol, path); err != nil {
		return nil, err
	}
	if err := pol.Check(); err != nil {
		return nil, err
	}
	base, extra, err := splitPolicy(pol)
	if err != nil {
		return nil, err
	}
	if len(base) > maxPolicy {
		return nil, fmt.Errorf("sandbox: policy of %d bytes exceeds %d", len(base), maxPolicy)
	}
	return &Call{ctx: ctx, pool: p, path: path, argv: append([]string{path}, args...), base: base, extra: extra,
		Env: filterEnv(os.Environ(), pol.Env)}, nil
}

// A Call is a tool call run by a pre-started helper. Its fields mean what
// exec.Cmd's of the same names do.
type Call struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Dir            string
	Env            []string
	WaitDelay      time.Duration

	Process *os.Process // the helper; [Kill] it to end the call

	ctx   context.Context
	pool  *Pool
	path  string
	argv  []string
	base  []byte     // the policy without its per-call rules (splitPolicy)
	extra []PathRule // its per-call rules

	childFiles []*os.File // the call's ends, closed once handed over
	parentIO   []*os.File // ours, closed after Wait
	copies     []func() error
	copyErr    chan error
	waited     chan struct{}
	refill     *time.Timer
	sock       int // the helper's socket: the call's status comes on it
	call       int // the stage's socket: the status comes on it first where the stage is its call's init
	code       int // the exit status, once Wait has returned
	waitCalled bool
}

// Start hands the call to a waiting helper (or, when none waits, one
// started now).
func (c *Call) Start() error {
	if c.Process != nil {
		return errors.New("sandbox: call already started")
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	fail := func(err error) error {
		closeFiles(c.childFiles)
		closeFiles(c.parentIO)
		return err
	}
	stdin, err := c.input()
	if err != nil {
		return fail(err)
	}
	stdout, err := c.output(c.Stdout)
	if err != nil {
		return fail(err)
	}
	stderr := stdout
	if !sameWriter(c.Stderr, c.Stdout) {
		if stderr, err = c.output(c.Stderr); err != nil {
			return fail(err)
		}
	}
	fds := []int{int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd())}
	c.pool.expect(c.base)
	// A helper that died while it waited (killed by someone) fails the
	// hand-over; the next one is tried.
	for attempt := 1; ; attempt++ {
		h, err := c.pool.take()
		if err != nil {
			return fail(err)
		}
		m := callMsg{Path: c.path, Argv: c.argv, Env: c.Env, Dir: c.Dir, Extra: c.extra}
		if h.prep != nil && bytes.Equal(h.prep, c.base) {
			m.Prepared = true
		} else {
			m.Policy = c.base
		}
		msg, err := json.Marshal(m)
		if err != nil {
			return fail(err)
		}
		err = errors.New("the helper had died")
		if h.alive() {
			err = sendFramed(h.call, append([]byte{callTag}, msg...), fds)
		}
		if err == nil {
			c.Process, c.sock, c.call = h.proc, h.sock, h.call
			break
		}
		unix.Close(h.call)
		unix.Close(h.sock)
		c.pool.refill()
		h.proc.Kill()
		h.proc.Wait()
		if attempt == 3 {
			return fail(fmt.Errorf("sandbox: handing the call to a helper: %w", err))
		}
	}
	closeFiles(c.childFiles)
	c.copyErr = make(chan error, len(c.copies))
	for _, f := range c.copies {
		go func() { c.copyErr <- f() }()
	}
	c.waited = make(chan struct{})
	go c.watch()
	// The next helper starts when this call is done, or refillAfter into
	// it: starting one costs two Go process starts, which on a small
	// machine would take the CPU from the call that was meant not to wait.
	c.refill = time.AfterFunc(refillAfter, c.pool.refill)
	return nil
}

// refillAfter is how long a call may run before the pool starts the
// helper that replaces the one it took, if the call has not ended by then.
const refillAfter = 100 * time.Millisecond

// watch ends the call when its context does: Kill, then SIGKILL to the
// helper if it has not exited WaitDelay later.
func (c *Call) watch() {
	select {
	case <-c.waited:
		return
	case <-c.ctx.Done():
	}
	Kill(c.Process)
	if c.WaitDelay <= 0 {
		return
	}
	t := time.NewTimer(c.WaitDelay)
	defer t.Stop()
	select {
	case <-c.waited:
	case <-t.C:
		c.Process.Kill()
	}
}

// Wait waits for the call to end: for the status the helper sends once
// the tool and every process it started are gone (or, if the helper died
// without sending it, for the helper's exit), and for the call's output
// to be copied, at most WaitDelay longer when WaitDelay is set. The
// helper is reaped in the background: it is about to exit.
func (c *Call) Wait() error {
	if c.Process == nil {
		return errors.New("sandbox: call not started")
	}
	if c.waitCalled {
		return errors.New("sandbox: Wait was already called")
	}
	c.waitCalled = true
	code, err := c.status()
	close(c.waited)
	if c.refill.Stop() {
		c.pool.refill()
	}
	c.code = code
	var timeout <-chan time.Time
	if c.WaitDelay > 0 {
		t := time.NewTimer(c.WaitDelay)
		defer t.Stop()
		timeout = t.C
	}
	var copyErr error
	for left := len(c.copies); left > 0; {
		select {
		case e := <-c.copyErr:
			left--
			if copyErr == nil {
				copyErr = e
			}
		case <-timeout:
			// Something the call passed its output to outlives it: stop
			// reading, as exec.Cmd does past WaitDelay.
			closeFiles(c.parentIO)
			copyErr = exec.ErrWaitDelay
			timeout = nil
		}
	}
	closeFiles(c.parentIO)
	switch {
	case err != nil:
		return err
	case code != 0:
		return &ExitError{Code: code}
	}
	return copyErr
}

// status reads the call's status: from the stage, which as the init of
// the call's own pid namespace sends it once the call's last process is
// reaped and before its own exit, the namespace's teardown and the
// helper's; else (the stage exec'd the tool, or was killed) from the
// helper's socket; without either, it is the helper's own exit status
// (128+N for signal N, as the helper reports a tool's). The helper is
// reaped either way: in the background, as it is about to exit, unless
// the call was ended through its context.
func (c *Call) status() (int, error) {
	code, ok := readStatus(c.call)
	unix.Close(c.call)
	early := ok
	if !ok {
		code, ok = readStatus(c.sock)
	}
	unix.Close(c.sock)
	if ok && (early || c.ctx.Err() == nil) {
		go c.Process.Wait()
		return code, nil
	}
	if ok {
		// Killed: the call returns once its helper is gone too, so that
		// nothing of it is left, not even a zombie, when the caller (a
		// session's toolsrv closing) goes on.
		c.Process.Wait()
		return code, nil
	}
	state, err := c.Process.Wait()
	if err != nil {
		return -1, err
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return state.ExitCode(), nil
}

// readStatus reads a status of 4 bytes from the socket fd; ok is false
// when the socket closes before one came.
func readStatus(fd int) (code int, ok bool) {
	var b [4]byte
	got := 0
	for got < len(b) {
		n, err := unix.Read(fd, b[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0, false
		}
		got += n
	}
	return int(int32(binary.BigEndian.Uint32(b[:]))), true
}

// ExitCode returns the call's exit status once Wait has returned: the
// tool's, 128+N if signal N ended it, 126 if the sandbox refused to run
// it; -1 before.
func (c *Call) ExitCode() int {
	if !c.waitCalled {
		return -1
	}
	return c.code
}

// An ExitError is a call that exited with a status other than 0.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// smallInput is what a pipe surely holds without a reader: Linux's
// default pipe holds 64 KiB, and a pipe made for a process that has
// reached its limit of pipe memory holds a page.
const smallInput = 4096

// input returns the call's stdin: the caller's file, /dev/null, or a pipe
// fed from Stdin.
func (c *Call) input() (*os.File, error) {
	if f, ok := c.Stdin.(*os.File); ok {
		return f, nil
	}
	if c.Stdin == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		c.childFiles = append(c.childFiles, f)
		return f, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.childFiles = append(c.childFiles, r)
	// A call's arguments (a few hundred bytes) fit the pipe: written
	// whole now, they need no goroutine to feed them, nor one to wait for.
	if b, ok := c.Stdin.(interface{ Len() int }); ok && b.Len() <= smallInput {
		_, err := io.Copy(w, c.Stdin)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return r, err
	}
	c.parentIO = append(c.parentIO, w)
	c.copies = append(c.copies, func() error {
		_, err := io.Copy(w, c.Stdin)
		if errors.Is(err, unix.EPIPE) || errors.Is(err, os.ErrClosed) {
			err = nil // the tool did not read it all, as exec.Cmd allows
		}
		if cerr := w.Close(); err == nil && !errors.Is(cerr, os.ErrClosed) {
			err = cerr
		}
		return err
	})
	return r, nil
}

// output returns the descriptor a stream of the call writes to: the
// caller's file, /dev/null, or a pipe copied to w.
func (c *Call) output(w io.Writer) (*os.File, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		c.childFiles = append(c.childFiles, f)
		return f, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c.childFiles = append(c.childFiles, pw)
	c.parentIO = append(c.parentIO, r)
	c.copies = append(c.copies, func() error {
		_, err := io.Copy(w, r)
		if errors.Is(err, os.ErrClosed) {
			err = nil // closed past WaitDelay; Wait says so
		}
		return err
	})
	return pw, nil
}

// sameWriter reports whether a and b are the same writer, as exec.Cmd
// decides when Stdout and Stderr share a pipe.
func sameWriter(a, b io.Writer) (same bool) {
	if a == nil || b == nil {
		return false
	}
	defer func() { recover() }() // incomparable dynamic types
	return a == b
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
