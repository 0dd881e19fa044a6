package desktop

// The terminal broker of a fleet run: while "ollie-remote fleet run" shows
// its live view, it answers on TerminalSocket in place of "ollie-remote
// broker", and puts the same question from many hosts of the run to the
// person once.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"ollie/broker"
	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

// RunConfig is what a fleet run tells its broker.
type RunConfig struct {
	// Session is the run's session name, the same on every host
	// ("fleet-r1a2b"). A request is of the run when its SessionName is
	// this and its Host is one of Hosts.
	Session string
	// Hosts are the run's hosts, named as ollie-remote up names them (the
	// keeper's name for the connection a request came over).
	Hosts []string
	// In and Out are the person's terminal. In should be a terminal
	// opened with os.Open or os.OpenFile ("/dev/tty"), which takes read
	// deadlines, so that a withdrawn prompt frees it at once; a
	// password is never read from an In that is not a terminal.
	In  *os.File
	Out io.Writer
	// Pause is called before a prompt is drawn, and Resume once no
	// prompt shows or waits to: the live view stops redrawing between
	// them. Pause returns once the view has stopped drawing, and leaves
	// the terminal as a prompt needs it (in its ordinary, line-by-line
	// mode). Either may be called before the view first draws (the
	// BECOME password is asked by StartRunBroker); neither may call the
	// RunBroker. Nil: nothing is paused.
	Pause, Resume func()
	// AskBecomePass asks the sudo password once, when the run starts,
	// and gives it to the run's hosts (Ansible's -K, --ask-become-pass).
	// Without it each host's password is asked when its sudo is.
	AskBecomePass bool
	// Window is how long a request of the run waits for the same request
	// from other hosts before it is shown, when no prompt is up; 0 means
	// DefaultGroupWindow.
	Window time.Duration
	// Log hears of refused connections and of each password given from
	// memory (host and request, never the password). Nil: discarded.
	Log *slog.Logger
}

// DefaultGroupWindow is RunConfig.Window's default: short enough not to be
// noticed before a prompt, long enough for the hosts of a run, started
// together, to ask together.
const DefaultGroupWindow = 300 * time.Millisecond

// ErrBrokerElsewhere is returned by StartRunBroker when another terminal
// broker already answers on TerminalSocket: the keeper asks there, one
// request at a time, and the run goes on without a broker of its own.
var ErrBrokerElsewhere = errors.New("another terminal broker answers")

// errRunEnded ends what the run's broker was asking when it stops. It is
// ErrUnavailable: the keeper then asks its other approvers.
var errRunEnded = fmt.Errorf("broker: the fleet run's broker stopped: %w", ErrUnavailable)

// RunBroker is the terminal broker of a fleet run (StartRunBroker). It
// answers what the keeper relays to TerminalSocket, as "ollie-remote
// broker" does, with two differences for the requests of its run:
//
//   - Approvals are grouped. Requests of the run that ask for the same
//     thing (the same tool, with sudo or not, with bypass or not) and
//     arrive while a prompt is up, or within Window of the first, are
//     shown as one list, one line per host. The person approves the first
//     host, or every host listed, or denies the first, or every one
//     listed. "Every listed host" covers the hosts on the list shown and
//     no other: a host asking after the list was drawn is asked again.
//     Input typed before the list was drawn is dropped, so that it is
//     never answered ahead. A group down to one request is asked as
//     "ollie-remote broker" asks it.
//   - With AskBecomePass, the password typed when the run starts answers
//     the first password ask of each of the run's requests; a second
//     (the host said it was wrong) is asked for that host, and so is
//     every later one of that host's. It is kept in memory only, zeroed
//     by Close, and each caller is handed a copy.
//
// Other requests (other sessions, other hosts) are asked one at a time as
// "ollie-remote broker" asks them (TerminalApprover behind a Queue); and
// every prompt, grouped or not, takes its turn on the one terminal.
type RunBroker struct {
	cfg   RunConfig
	hosts map[string]bool
	term  *TerminalApprover
	queue *Queue // requests not of the run, and passwords asked per host
	scr   *screen
	b     *Broker

	ctx    context.Context // ends when the broker stops, errRunEnded
	cancel context.CancelCauseFunc
	done   chan struct{}
	stop   sync.Once

	l      net.Listener
	sock   os.FileInfo // the socket file this broker made, to remove only that
	work   sync.WaitGroup
	connMu sync.Mutex
	conns  map[net.Conn]bool

	mu     sync.Mutex
	open   map[groupKey]*group // groups not shown yet
	asking map[string][]string // host → the tools of its requests of the run waiting for an answer

	pmu   sync.Mutex
	pass  []byte                   // the run's BECOME password; nil when none
	given map[*broker.Request]bool // requests given it, until they end
	wrong map[string]bool          // hosts that said it was wrong

	restore func()
}

// StartRunBroker listens on TerminalSocket, asks the BECOME password if
// cfg.AskBecomePass, and serves until Close. When another terminal
// broker already answers it returns an error wrapping ErrBrokerElsewhere,
// which says so for the person, and serves nothing; the run's requests
// are then asked there.
func StartRunBroker(ctx context.Context, cfg RunConfig) (*RunBroker, error) {
	switch {
	case cfg.Session == "":
		return nil, errors.New("broker: a run's broker needs the run's session name")
	case cfg.In == nil || cfg.Out == nil:
		return nil, errors.New("broker: a run's broker needs a terminal to ask on")
	case cfg.AskBecomePass && !isTerminal(cfg.In):
		return nil, errors.New("broker: -ask-become-pass needs a terminal to read the password with echo off, and the input is not one")
	}
	if err := paths.PreparePrivateDir(paths.RemoteDir()); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	sock := TerminalSocket()
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		msg := "this run's approvals are asked there, one request at a time"
		if cfg.AskBecomePass {
			msg += ", and its sudo passwords per host (-ask-become-pass is not used)"
		}
		return nil, fmt.Errorf("broker: %w on %s: %s", ErrBrokerElsewhere, sock, msg)
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // Close removes it only if it is still ours
	fi, _ := os.Stat(sock)

	rb := &RunBroker{
		cfg:     cfg,
		hosts:   map[string]bool{},
		term:    &TerminalApprover{In: cfg.In, Out: cfg.Out},
		scr:     &screen{tok: make(chan struct{}, 1), pause: cfg.Pause, resume: cfg.Resume},
		done:    make(chan struct{}),
		l:       l,
		sock:    fi,
		conns:   map[net.Conn]bool{},
		open:    map[groupKey]*group{},
		given:   map[*broker.Request]bool{},
		wrong:   map[string]bool{},
		restore: restoreTerminal(cfg.In),
	}
	for _, h := range cfg.Hosts {
		rb.hosts[h] = true
	}
	rb.ctx, rb.cancel = context.WithCancelCause(context.Background())
	rb.queue = &Queue{Approver: &screened{rb}}
	// The keeper held each host to its budget before handing a request here.
	rb.b = &Broker{Approver: (*runApprover)(rb), Log: cfg.Log, Budget: NoBudget}

	if cfg.AskBecomePass {
		pw, err := rb.askBecomePass(ctx)
		if err != nil {
			rb.Close()
			return nil, err
		}
		if len(pw) == 0 {
			fmt.Fprintf(cfg.Out, "ollie: no BECOME password given; sudo passwords are asked per host\n")
		}
		rb.pass = pw
	}
	rb.work.Add(1)
	go rb.serve()
	go func() {
		select {
		case <-rb.term.Gone():
			rb.cfg.log().Warn("broker: the run's terminal is gone; the keeper asks its other approvers from now on")
			rb.Close()
		case <-rb.ctx.Done():
		}
	}()
	return rb, nil
}

func (c *RunConfig) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.Log
}

func (c *RunConfig) window() time.Duration {
	if c.Window <= 0 {
		return DefaultGroupWindow
	}
	return c.Window
}

// askBecomePass reads the run's sudo password with echo off. An empty one
// is none: the hosts' sudo would refuse it.
func (rb *RunBroker) askBecomePass(ctx context.Context) ([]byte, error) {
	if err := rb.scr.acquire(ctx); err != nil {
		return nil, err
	}
	defer rb.scr.release()
	rb.term.mu.Lock()
	defer rb.term.mu.Unlock()
	pw, err := rb.term.password(ctx, fmt.Sprintf("BECOME password for run %s: ", termsafe.Field(rb.cfg.Session, maxRunField)))
	if err != nil {
		return nil, fmt.Errorf("broker: the BECOME password for run %s was not read: %w", termsafe.Field(rb.cfg.Session, maxRunField), err)
	}
	if len(pw) == 0 {
		return nil, nil
	}
	return pw, nil
}

// Done is closed once the broker has stopped serving: Close was called,
// or its terminal is gone (the keeper then asks its other approvers).
func (rb *RunBroker) Done() <-chan struct{} { return rb.done }

// Close stops serving and ends what is being asked (the keeper asks its
// other approvers for it), zeroes the run's password, and puts the
// terminal's settings back. It always returns nil.
func (rb *RunBroker) Close() error {
	rb.stop.Do(func() {
		rb.cancel(errRunEnded)
		rb.l.Close()
		if fi, err := os.Stat(TerminalSocket()); err == nil && rb.sock != nil && os.SameFile(fi, rb.sock) {
			os.Remove(TerminalSocket())
		}
		rb.connMu.Lock()
		for c := range rb.conns {
			c.Close()
		}
		rb.connMu.Unlock()
		waitGroupFor(&rb.work, 2*time.Second)
		rb.pmu.Lock()
		broker.Zero(rb.pass)
		rb.pass = nil
		rb.pmu.Unlock()
		rb.restore()
		close(rb.done)
	})
	return nil
}

// serve answers the keeper's connections until the listener closes.
func (rb *RunBroker) serve() {
	defer rb.work.Done()
	for {
		c, err := rb.l.Accept()
		if err != nil {
			return
		}
		rb.connMu.Lock()
		if rb.ctx.Err() != nil {
			rb.connMu.Unlock()
			c.Close()
			return
		}
		rb.conns[c] = true
		rb.work.Add(1)
		rb.connMu.Unlock()
		go func() {
			defer rb.work.Done()
			defer func() {
				rb.connMu.Lock()
				delete(rb.conns, c)
				rb.connMu.Unlock()
			}()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			h, err := readHeader(c)
			if err != nil {
				c.Close()
				return
			}
			if h.Notice != "" {
				takeNotice(c, func() { rb.notice(h.Notice) })
				return
			}
			c.SetReadDeadline(time.Time{})
			rb.b.ServeConn(h.Host, c)
		}()
	}
}

// notice shows a notice from the keeper (a host over its budget) on the
// terminal, as a prompt takes its turn: the live view paused.
func (rb *RunBroker) notice(text string) {
	if err := rb.scr.acquire(rb.ctx); err != nil {
		return
	}
	defer rb.scr.release()
	rb.term.mu.Lock()
	defer rb.term.mu.Unlock()
	fmt.Fprintf(rb.cfg.Out, "\n%s\n", termsafe.Line(text))
}

// ofRun reports whether req is one of the run's: its session, from one of
// its hosts. The session name is the host's word; the host is the
// keeper's, from the SSH connection.
func (rb *RunBroker) ofRun(req *broker.Request) bool {
	return !req.Yolo && req.SessionName == rb.cfg.Session && rb.hosts[req.Host]
}

// bind is ctx, ended also when the broker stops.
func (rb *RunBroker) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(rb.ctx, func() { cancel(errRunEnded) })
	return ctx, func() { stop(); cancel(nil) }
}

// runApprover is the RunBroker as its Broker's Approver.
type runApprover RunBroker

// Approve groups the run's requests; others wait their turn in the queue.
func (a *runApprover) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	rb := (*RunBroker)(a)
	if !rb.ofRun(req) {
		return rb.queue.Approve(ctx, req)
	}
	defer rb.wait(req.Host, req.Tool)()
	m, err := rb.join(req)
	if err != nil {
		return broker.Answer{}, err
	}
	select {
	case <-m.done:
		return m.ans, m.err
	case <-ctx.Done():
		rb.leave(m)
		return broker.Answer{}, context.Cause(ctx)
	}
}

// wait records that host waits for an answer about tool, until the
// function it returns is called.
func (rb *RunBroker) wait(host, tool string) func() {
	rb.mu.Lock()
	if rb.asking == nil {
		rb.asking = map[string][]string{}
	}
	rb.asking[host] = append(rb.asking[host], tool)
	rb.mu.Unlock()
	return func() {
		rb.mu.Lock()
		defer rb.mu.Unlock()
		w := rb.asking[host]
		for i, t := range w {
			if t == tool {
				rb.asking[host] = append(w[:i:i], w[i+1:]...)
				break
			}
		}
		if len(rb.asking[host]) == 0 {
			delete(rb.asking, host)
		}
	}
}

// Waiting names the tool a request of the run from host waits on an
// answer for, "" when none does: the live view shows the host waiting
// for approval.
func (rb *RunBroker) Waiting(host string) string {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if w := rb.asking[host]; len(w) > 0 {
		return w[0]
	}
	return ""
}

// Password gives the run's password, from memory, to the first ask of a
// request of the run; everything else is asked on the terminal. A host
// that asks again after it was given the run's password (it was wrong
// there) is asked on the terminal from then on, so that a wrong password
// is not tried on it at every request.
func (a *runApprover) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	rb := (*RunBroker)(a)
	rb.pmu.Lock()
	if rb.given[req] {
		delete(rb.given, req)
		rb.wrong[req.Host] = true
	}
	var pw []byte
	if attempt == 1 && req.Sudo && rb.ofRun(req) && rb.pass != nil && !rb.wrong[req.Host] {
		pw = make([]byte, len(rb.pass))
		copy(pw, rb.pass)
		rb.given[req] = true
	}
	rb.pmu.Unlock()
	if pw != nil {
		rb.cfg.log().Info("broker: the run's BECOME password was given", "host", req.Host, "id", req.ID)
		return pw, nil
	}
	return rb.queue.Password(ctx, req, attempt, problem)
}

// Finish forgets that req was given the run's password.
func (a *runApprover) Finish(req *broker.Request) {
	a.pmu.Lock()
	delete(a.given, req)
	a.pmu.Unlock()
}

func (a *runApprover) String() string {
	return fmt.Sprintf("the terminal of fleet run %s, its hosts' requests grouped", termsafe.Line(a.cfg.Session))
}

// screened is the terminal for a request not of the run, or a password:
// TerminalApprover, in its turn on the screen.
type screened struct{ rb *RunBroker }

func (s *screened) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	ctx, cancel := s.rb.bind(ctx)
	defer cancel()
	if err := s.rb.scr.acquire(ctx); err != nil {
		return broker.Answer{}, err
	}
	defer s.rb.scr.release()
	defer s.rb.termFree()
	return s.rb.term.Approve(ctx, req)
}

func (s *screened) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	ctx, cancel := s.rb.bind(ctx)
	defer cancel()
	if err := s.rb.scr.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.rb.scr.release()
	defer s.rb.termFree()
	return s.rb.term.Password(ctx, req, attempt, problem)
}

func (s *screened) String() string { return s.rb.term.String() }

// termFree waits until the terminal approver has let go of the terminal:
// a withdrawn prompt on an input without deadlines holds it until Enter,
// and the live view must not draw over it.
func (rb *RunBroker) termFree() {
	rb.term.mu.Lock()
	rb.term.mu.Unlock()
}

// screen is the terminal as prompts take turns on it: one at a time, in
// the order they asked, with the live view paused from when one wants it
// until none does.
type screen struct {
	tok           chan struct{} // holds a token while a prompt shows
	mu            sync.Mutex
	want          int // prompts showing or waiting to
	pause, resume func()
}

func (s *screen) acquire(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	s.mu.Lock()
	if s.want++; s.want == 1 && s.pause != nil {
		s.pause()
	}
	s.mu.Unlock()
	select {
	case s.tok <- struct{}{}:
		return nil
	case <-ctx.Done():
		s.unwant()
		return context.Cause(ctx)
	}
}

func (s *screen) release() {
	<-s.tok
	s.unwant()
}

func (s *screen) unwant() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.want--; s.want == 0 && s.resume != nil {
		s.resume()
	}
}

// groupKey is what requests of the run must share to be shown together.
type groupKey struct {
	tool         string
	sudo, bypass bool
}

// group is requests of the run asking for the same thing, shown as one
// list. It takes requests until it is shown.
type group struct {
	key     groupKey
	members []*member // in arrival order
	shown   bool
	ctx     context.Context // ends when every member is withdrawn, or the broker stops
	cancel  context.CancelCauseFunc
}

// member is one host's request in a group, with everyone waiting for it
// (identical requests are asked once).
type member struct {
	req      *broker.Request
	g        *group
	waiters  int
	answered bool
	done     chan struct{}
	ans      broker.Answer
	err      error
}

// live is what of g still waits for an answer, with rb.mu held.
func (g *group) live() []*member {
	var out []*member
	for _, m := range g.members {
		if !m.answered && m.waiters > 0 {
			out = append(out, m)
		}
	}
	return out
}

// join adds req to its group not shown yet, or starts one.
func (rb *RunBroker) join(req *broker.Request) (*member, error) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.ctx.Err() != nil {
		return nil, errRunEnded
	}
	k := groupKey{tool: req.Tool, sudo: req.Sudo, bypass: req.Bypass}
	g := rb.open[k]
	if g == nil {
		g = &group{key: k}
		g.ctx, g.cancel = context.WithCancelCause(rb.ctx)
		rb.open[k] = g
		rb.work.Add(1)
		go rb.show(g)
	}
	for _, m := range g.live() {
		if m.req.Same(req) {
			m.waiters++
			return m, nil
		}
	}
	m := &member{req: req, g: g, waiters: 1, done: make(chan struct{})}
	g.members = append(g.members, m)
	return m, nil
}

// leave is called by a waiter that stops waiting. A group whose every
// member is withdrawn ends: off the screen if it shows.
func (rb *RunBroker) leave(m *member) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	m.waiters--
	g := m.g
	if len(g.live()) > 0 {
		return
	}
	g.cancel(ErrWithdrawn)
	if rb.open[g.key] == g {
		delete(rb.open, g.key)
	}
}

// answer gives m its answer, with rb.mu held.
func (m *member) answer(ans broker.Answer, err error) {
	if m.answered {
		return
	}
	m.answered = true
	m.ans, m.err = ans, err
	close(m.done)
}

// show waits the window, then its turn on the screen, taking the run's
// requests that ask the same all the while, and asks the person.
func (rb *RunBroker) show(g *group) {
	defer rb.work.Done()
	t := time.NewTimer(rb.cfg.window())
	select {
	case <-t.C:
	case <-g.ctx.Done():
		t.Stop()
	}
	err := rb.scr.acquire(g.ctx)
	rb.mu.Lock()
	g.shown = true
	if rb.open[g.key] == g {
		delete(rb.open, g.key)
	}
	if err != nil {
		for _, m := range g.live() {
			m.answer(broker.Answer{}, err)
		}
		rb.mu.Unlock()
		return
	}
	rb.mu.Unlock()
	defer rb.scr.release()
	rb.term.mu.Lock()
	defer rb.term.mu.Unlock()
	rb.ask(g)
}

// Limits, in bytes, of what a group's list shows of each host's request.
const (
	maxRunField  = 80  // the run's session name, a tool's name
	maxListArgs  = 160 // a request's arguments
	maxListField = 120 // an executable that differs from the first's
)

// ask puts g's requests to the person until each has its answer, holding
// the terminal.
func (rb *RunBroker) ask(g *group) {
	t := rb.term
	for {
		rb.mu.Lock()
		listed := g.live()
		rb.mu.Unlock()
		if len(listed) == 0 {
			return
		}
		var err error
		if err = t.unavailable(); err == nil {
			if len(listed) == 1 {
				var ans broker.Answer
				ans, err = t.approve(g.ctx, listed[0].req)
				if err == nil {
					rb.mu.Lock()
					listed[0].answer(ans, nil)
					rb.mu.Unlock()
					continue
				}
			} else {
				err = rb.askList(g, listed)
				if err == nil {
					continue
				}
			}
		}
		if g.ctx.Err() != nil && context.Cause(g.ctx) != errRunEnded {
			what := "the requests listed were"
			if len(listed) == 1 {
				what = "request " + listed[0].req.IDName() + " was"
			}
			fmt.Fprintf(t.Out, "\nollie: %s withdrawn; that answer is not used.\n", what)
		}
		rb.mu.Lock()
		for _, m := range g.live() {
			m.answer(broker.Answer{}, err)
		}
		rb.mu.Unlock()
		return
	}
}

// askList shows the requests listed and answers those the person's choice
// covers. An error is the terminal's or the group's end.
func (rb *RunBroker) askList(g *group, listed []*member) error {
	t := rb.term
	// What was typed before the list is shown was not typed for it.
	if isTerminal(t.In) {
		withFd(t.In, func(fd int) error { return unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) })
	}
	fmt.Fprintf(t.Out, "\n%s", listText(rb.cfg.Session, listed))
	first := listed[0].req.HostName()
	var buf [maxTerminalLine]byte
	for {
		fmt.Fprintf(t.Out, "approve: [o]nce for %s / [e]very listed host (%d) / [n]o for %s / [d]eny every listed host? ", first, len(listed), first)
		n, err := t.readLine(g.ctx, buf[:])
		switch {
		case errors.Is(err, errLineTooLong): // asked again below
		case err != nil && g.ctx.Err() == nil:
			fmt.Fprintln(t.Out)
			return t.lost(err)
		case err != nil:
			return err
		}
		var answers []*member
		var ans broker.Answer
		switch strings.ToLower(strings.TrimSpace(string(buf[:n]))) {
		case "o", "once", "y", "yes":
			answers, ans = listed[:1], broker.Answer{Decision: broker.Once}
		case "e", "every":
			answers, ans = listed, broker.Answer{Decision: broker.Once}
		case "n", "no":
			answers, ans = listed[:1], broker.Answer{Decision: broker.Deny, Reason: deniedByPerson}
		case "d", "deny":
			answers, ans = listed, broker.Answer{Decision: broker.Deny, Reason: deniedByPerson + ", for every host of the run listed"}
		default:
			fmt.Fprintln(t.Out, "please answer o (once, the first host), e (every host listed), n (no, the first host) or d (deny every host listed)")
			continue
		}
		rb.mu.Lock()
		for _, m := range answers {
			m.answer(ans, nil)
		}
		rb.mu.Unlock()
		return nil
	}
}

// listText is a group's list: a line of the desktop's own naming the run,
// how many hosts and what they ask, then one line per request, its
// host's fields quoted and attributed to it.
func listText(session string, listed []*member) string {
	first := listed[0].req
	hosts := map[string]bool{}
	for _, m := range listed {
		hosts[m.req.Host] = true
	}
	var b strings.Builder
	who := fmt.Sprintf("%d hosts", len(hosts))
	if len(hosts) != len(listed) {
		who = fmt.Sprintf("%d hosts (%d requests)", len(hosts), len(listed))
	}
	what := "outside their sandbox"
	if first.Sudo {
		what = "with sudo"
	}
	fmt.Fprintf(&b, "ollie: %s of run %s ask to run `%s` %s", who, termsafe.Field(session, maxRunField), first.ToolName(), what)
	if first.Bypass {
		b.WriteString(", the agents asking for bypass")
	}
	b.WriteString(":\n")
	fmt.Fprintf(&b, "  runs:     %s%s, %s says\n", termsafe.Quote(first.Executable, maxListField), variant(first), first.HostName())
	for i, m := range listed {
		r := m.req
		fmt.Fprintf(&b, "  %d. %s", i+1, r.HostName())
		var says []string
		if len(r.Args) > 0 {
			says = append(says, "args "+termsafe.Quote(r.CompactArgs(), maxListArgs))
		}
		if r.Executable != first.Executable || r.Variant != first.Variant {
			says = append(says, "runs "+termsafe.Quote(r.Executable, maxListField)+variant(r))
		}
		if len(says) > 0 {
			b.WriteString(" says: " + strings.Join(says, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func variant(r *broker.Request) string {
	if r.Variant < 0 {
		return ""
	}
	return fmt.Sprintf(" (variant %d)", r.Variant)
}
