package toolsrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"ollie/ns/stream"
	"ollie/toolsrv/sandbox"
)

// DefaultLinger is how long an exited background process stays listed
// after its output was last read.
const DefaultLinger = 10 * time.Minute

// Errors of background-process control, for errors.Is.
var (
	ErrNoProc  = errors.New("toolsrv: no such process")
	ErrRunning = errors.New("toolsrv: process is still running")
)

// Procs owns a session's background processes: calls with background set
// run without a timeout, their output streams into Out while they run, and
// Close kills every one of them.
type Procs struct {
	Runner *Runner
	Linger time.Duration    // DefaultLinger when zero
	Now    func() time.Time // time.Now when nil

	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	procs  map[string]*Proc
	next   int
}

// A Proc is one background call.
type Proc struct {
	ID      string
	Tool    string
	Sandbox string
	Started time.Time
	Out     *stream.Stream // stdout and stderr as they come; closed at exit

	pid      int
	proc     *os.Process
	done     chan struct{}
	mu       sync.Mutex
	exit     int // valid once done is closed; -1 when killed by a signal
	reason   string
	lastSeen time.Time
}

func (ps *Procs) init() {
	ps.once.Do(func() {
		ps.ctx, ps.cancel = context.WithCancel(context.Background())
		ps.procs = map[string]*Proc{}
	})
}

func (ps *Procs) now() time.Time {
	if ps.Now != nil {
		return ps.Now()
	}
	return time.Now()
}

// Start validates, authorizes and starts a call in the background. Its
// error is for the model.
func (ps *Procs) Start(ctx context.Context, name string, args json.RawMessage) (*Proc, error) {
	return ps.StartFor(ctx, Caller{}, name, args)
}

// StartFor is Start for an agent, as Runner.RunFor is Run.
func (ps *Procs) StartFor(ctx context.Context, c Caller, name string, args json.RawMessage) (*Proc, error) {
	ps.init()
	r := ps.Runner
	c, err := r.caller(c)
	if err != nil {
		return nil, err
	}
	t, err := r.Tools.Tool(name)
	if err != nil {
		return nil, err
	}
	flags, own, err := t.Prepare(args)
	if err != nil {
		var ae *ArgError
		if errors.As(err, &ae) {
			return nil, errors.New(ae.Message())
		}
		return nil, err
	}
	flags.Background = true
	grant, err := r.authorize(ctx, c, t, flags, own)
	if err != nil {
		return nil, err
	}
	closeGrant := func(result string) {
		if grant != nil {
			grant.Close(result)
		}
	}
	scratch, err := os.MkdirTemp("", "ollie-proc-")
	if err != nil {
		closeGrant("failed")
		return nil, fmt.Errorf("cannot make a scratch directory: %w", err)
	}
	cmd, profile, err := r.command(ps.ctx, c, t, flags, own, scratch, grant)
	closeGrant("started")
	if err != nil {
		os.RemoveAll(scratch)
		return nil, err
	}
	defer cmd.done()
	p := &Proc{Tool: name, Sandbox: profile, Started: ps.now(), Out: stream.NewStream(0), done: make(chan struct{})}
	cmd.setOutput(p.Out, p.Out)
	if err := cmd.start(); err != nil {
		os.RemoveAll(scratch)
		return nil, fmt.Errorf("cannot start %s: %w", t.Path, err)
	}
	p.pid, p.proc = cmd.process().Pid, cmd.process()
	ps.mu.Lock()
	ps.next++
	p.ID = strconv.Itoa(ps.next)
	ps.procs[p.ID] = p
	ps.mu.Unlock()
	go func() {
		err := cmd.wait()
		cmd.endGroup()
		os.RemoveAll(scratch)
		p.mu.Lock()
		p.exit = cmd.exitCode()
		switch {
		case p.reason != "":
		case err != nil && p.exit < 0:
			p.reason = err.Error()
		default:
			p.reason = fmt.Sprintf("exit status %d", p.exit)
		}
		p.lastSeen = ps.now()
		reason := p.reason
		p.mu.Unlock()
		// Done before the trailer: whoever reads the trailer sees the
		// process as ended.
		close(p.done)
		fmt.Fprintf(p.Out, "\n[%s %s: %s]\n", p.Tool, p.ID, reason)
		p.Out.Close()
	}()
	return p, nil
}

// Get returns the process id.
func (ps *Procs) Get(id string) (*Proc, error) {
	ps.init()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.procs[id]
	if p == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoProc, id)
	}
	return p, nil
}

// List returns the processes, oldest first.
func (ps *Procs) List() []*Proc {
	ps.init()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	list := make([]*Proc, 0, len(ps.procs))
	for _, p := range ps.procs {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool {
		a, _ := strconv.Atoi(list[i].ID)
		b, _ := strconv.Atoi(list[j].ID)
		return a < b
	})
	return list
}

// Signal sends term (SIGTERM) or kill (SIGKILL) to the process. A
// sandboxed one's helper passes SIGTERM on to the tool, and for kill
// ends the tool and every process it started, setsid or not; an
// unsandboxed one's process group gets the signal.
func (ps *Procs) Signal(id string, sig syscall.Signal) error {
	p, err := ps.Get(id)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return fmt.Errorf("toolsrv: process %s has already exited (%s)", id, p.Status())
	default:
	}
	p.mu.Lock()
	p.reason = "killed by " + sigName(sig)
	p.mu.Unlock()
	switch {
	case strings.HasPrefix(p.Sandbox, "none"):
		return syscall.Kill(-p.pid, sig)
	case sig == syscall.SIGKILL:
		return sandbox.Kill(p.proc)
	}
	return p.proc.Signal(sig)
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGTERM {
		return "term"
	}
	return "kill"
}

// Dismiss forgets an exited process.
func (ps *Procs) Dismiss(id string) error {
	p, err := ps.Get(id)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	default:
		return fmt.Errorf("%w: %s (term or kill it first)", ErrRunning, id)
	}
	ps.mu.Lock()
	delete(ps.procs, id)
	ps.mu.Unlock()
	return nil
}

// Seen records a read of the process's output, which keeps an exited
// process listed for Linger more.
func (p *Proc) Seen(now time.Time) {
	p.mu.Lock()
	p.lastSeen = now
	p.mu.Unlock()
}

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Wait blocks until the process exits or ctx ends.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status is "running" or how the process ended.
func (p *Proc) Status() string {
	if p.Running() {
		return "running"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason
}

// resumeFrom is the last id given and how many processes are held (for
// a rest: see childState).
func (ps *Procs) resumeFrom() (last, held int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.next, len(ps.procs)
}

// Collect forgets exited processes whose output was last read, or which
// exited, more than Linger ago. It returns how many it forgot.
func (ps *Procs) Collect() int {
	ps.init()
	linger := ps.Linger
	if linger <= 0 {
		linger = DefaultLinger
	}
	now := ps.now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for id, p := range ps.procs {
		if p.Running() {
			continue
		}
		p.mu.Lock()
		old := now.Sub(p.lastSeen) > linger
		p.mu.Unlock()
		if old {
			delete(ps.procs, id)
			n++
		}
	}
	return n
}

// Close kills every process and waits for them to be reaped.
func (ps *Procs) Close() {
	ps.init()
	ps.cancel()
	for _, p := range ps.List() {
		<-p.done
	}
}
