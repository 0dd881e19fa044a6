package desktop

// The desktop broker as ollie-remote runs it. The keeper answers the hosts' approval requests:
// its policy first, then the person at the terminal of "ollie-remote
// broker" when one runs, else askpass, a dialog, or a denial saying how to
// be asked. What the terminal broker cannot put to a person (it exited,
// its terminal hung up) goes to the keeper's other approvers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"ollie/broker"
	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

// TerminalSocket is where "ollie-remote broker" listens: one per desktop
// user, in RemoteDir, asked by the keepers of every ssh configuration.
func TerminalSocket() string { return filepath.Join(paths.RemoteDir(), "broker.sock") }

// LiveRules is the policy file as a broker consults it: read again before
// each decision when it changed (one stat when it did not), a version
// that does not parse keeping the last good rules in force. report hears
// once of each version: nil when it is in force, else why not.
type LiveRules struct {
	p      *Policy
	report func(err error)
}

// refresh reads the file again if it changed, and says why it is not in
// force, if it is not.
func (r *LiveRules) refresh() error {
	changed, err := r.p.Refresh()
	if changed && r.report != nil {
		r.report(err)
	}
	return err
}

func (r *LiveRules) Match(req *broker.Request) (broker.Decision, bool) {
	r.refresh()
	d, _, ok := r.p.Match(req)
	return d, ok
}

func (r *LiveRules) AddAlways(req *broker.Request) error { return r.p.AddAlways(req) }

// Limits is the budget the file gives each host, as last read without
// error (Match reads it again first).
func (r *LiveRules) Limits() Limits { return r.p.Limits() }

// Watch refreshes every so often, so that a bad edit is reported even
// while no request comes.
func (r *LiveRules) Watch(every time.Duration) {
	for range time.Tick(every) {
		r.refresh()
	}
}

// Problem says why the file is not in force and what is instead, or "".
func (r *LiveRules) Problem() string {
	err := r.refresh()
	if err == nil {
		return ""
	}
	return PolicyProblem(r.p, err)
}

func PolicyProblem(p *Policy, err error) string {
	switch n := len(p.Rules()); n {
	case 0:
		return fmt.Sprintf("%v; until it is fixed, every request is asked (no rule was read without error)", err)
	case 1:
		return fmt.Sprintf("%v; until it is fixed, the one rule last read without error stays in force", err)
	default:
		return fmt.Sprintf("%v; until it is fixed, the %d rules last read without error stay in force", err, n)
	}
}

// PolicyWatchEvery is how often a broker looks at the policy file while
// no request comes (before each request it always does).
const PolicyWatchEvery = 2 * time.Second

// OpenRules opens the broker policy file, live; report hears of each
// version read, the first one too when it is broken. It is nil when
// there is no place for the file (no home).
func OpenRules(log *slog.Logger, report func(p *Policy, err error)) *LiveRules {
	path, err := DefaultPolicyPath()
	if err != nil {
		log.Warn("ollie-remote: no broker policy", "err", err)
		return nil
	}
	p, err := OpenPolicy(path)
	r := &LiveRules{p: p, report: func(err error) { report(p, err) }}
	if err != nil {
		r.report(err)
	}
	return r
}

// KeeperBroker is the keeper's broker: the policy first, then the
// person at the terminal broker's terminal when one runs, else askpass or
// a dialog (Handoff). A broken policy is logged once per version.
//
// Each host is held to the policy file's budget (Budget), and a host over
// it is shown once per burst (ShowNotice).
func KeeperBroker(log *slog.Logger) *Broker {
	budget := &Budget{Notice: func(n Notice) { ShowNotice(log, n) }}
	b := &Broker{Approver: NewHandoff(&Queue{Approver: Auto(nil, io.Discard)}, log), Log: log, Budget: budget}
	if r := OpenRules(log, func(p *Policy, err error) {
		if err != nil {
			log.Error("ollie-remote: the broker policy is broken", "problem", PolicyProblem(p, err))
		} else {
			log.Info("ollie-remote: the broker policy was read", "path", p.Path, "rules", len(p.Rules()))
		}
	}); r != nil {
		b.Rules = r
		budget.Limits = r.Limits
		go r.Watch(PolicyWatchEvery)
	}
	return b
}

// ShowNotice tells the person at the desktop of a host over its budget:
// on the terminal broker's terminal when one runs, else in a desktop
// notification; always in log.
func ShowNotice(log *slog.Logger, n Notice) {
	log.Warn("ollie-remote: a host is over its prompt budget", "host", n.Host, "refused", n.Refused, "per_minute", n.PerMinute)
	text := n.Text()
	err := noticeTerminal(n.Host, text)
	if err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, nerr := (&Notifier{}).Notify(ctx, "ollie: "+n.Host+" is over its prompt budget", text); nerr != nil {
		log.Warn("ollie-remote: the notice could not be shown", "host", n.Host, "terminal", err, "notification", nerr)
	}
}

// noticeTerminal hands a notice to the terminal broker, which says it
// will show it.
func noticeTerminal(host, text string) error {
	c, err := net.DialTimeout("unix", TerminalSocket(), 2*time.Second)
	if err != nil {
		return fmt.Errorf("%w: %v", errNoTerminalBroker, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	hdr, _ := json.Marshal(header{Host: host, Notice: text})
	if _, err := c.Write(append(hdr, '\n')); err != nil {
		return err
	}
	ack := make([]byte, len(noticeAck))
	if _, err := io.ReadFull(c, ack); err != nil || string(ack) != noticeAck {
		return fmt.Errorf("the terminal broker did not take the notice: %v", err)
	}
	return nil
}

// noticeAck is the terminal broker's answer to a notice: it will show it.
const noticeAck = "shown\n"

// takeNotice acknowledges a notice on c and closes c; show then prints
// it, once the terminal is free.
func takeNotice(c net.Conn, show func()) {
	c.Write([]byte(noticeAck))
	c.Close()
	show()
}

// PolicyState is what status shows of the policy b uses and of the hosts
// it holds to their budget: "" when its file is in force and no host
// went over, else why not and what is, and which hosts were refused how
// many requests.
func PolicyState(b *Broker) string {
	var parts []string
	if r, ok := b.Rules.(*LiveRules); ok {
		if p := r.Problem(); p != "" {
			parts = append(parts, p)
		}
	}
	over := b.prompts().Over()
	hosts := slices.Sorted(maps.Keys(over))
	for _, h := range hosts {
		parts = append(parts, fmt.Sprintf("%s: %d requests refused over its prompt budget (raise budget: prompts_per_minute to allow more)", h, over[h]))
	}
	return strings.Join(parts, "; ")
}

// ServeApprovals answers the requests arriving from host on l with b,
// which holds the host to its limits (connections at once, deadlines,
// message size, password asks) whoever answers: the keeper's b asks the
// terminal broker, when one runs, only once a request is whole. Each
// request must carry key, the registration's (ServeConnKeyed).
func ServeApprovals(b *Broker, host string, l net.Listener, key []byte) {
	ServeApprovalsAs(b, func() string { return host }, l, key)
}

// ServeApprovalsAs is ServeApprovals for a host whose name may change
// while it is held: each connection's requests are from the host as name
// names it when the connection arrives (the keeper's name for its
// connection, told apart from another keeper's host of that name).
func ServeApprovalsAs(b *Broker, name func() string, l net.Listener, key []byte) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go b.ServeConnKeyed(name(), c, key)
	}
}

// Handoff is the keeper's approver: the person at the terminal of
// "ollie-remote broker" when one runs, else next (askpass, a dialog, or a
// denial saying how to be asked). What the terminal broker cannot put to
// a person goes to next, never to a denial: none runs, its terminal hung
// up (it then closes the conversation unanswered), or it exited while
// asking. A password goes where the question went, or to next when that
// one is gone.
type Handoff struct {
	next Person
	log  *slog.Logger

	mu    sync.Mutex
	convs map[*broker.Request]*broker.Conversation // asked on the terminal, until Finish
}

func NewHandoff(next Person, log *slog.Logger) *Handoff {
	return &Handoff{next: next, log: log, convs: map[*broker.Request]*broker.Conversation{}}
}

// errNoTerminalBroker is that none runs: its socket does not answer.
var errNoTerminalBroker = errors.New("no terminal broker runs")

func (h *Handoff) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	cv, ans, err := askTerminal(ctx, req)
	if err == nil {
		h.mu.Lock()
		h.convs[req] = cv
		h.mu.Unlock()
		return ans, nil
	}
	if ctx.Err() != nil {
		return broker.Answer{}, context.Cause(ctx)
	}
	if !errors.Is(err, errNoTerminalBroker) {
		h.log.Info("ollie-remote: the terminal broker did not answer; asking here", "host", req.Host, "id", req.ID, "err", err)
	}
	return h.next.Approve(ctx, req)
}

func (h *Handoff) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	h.mu.Lock()
	cv := h.convs[req]
	h.mu.Unlock()
	if cv != nil {
		pw, err := cv.Password(ctx, attempt, problem)
		if err == nil || errors.Is(err, broker.ErrDenied) || ctx.Err() != nil {
			return pw, err
		}
		h.log.Info("ollie-remote: the terminal broker did not answer for the password; asking here", "host", req.Host, "id", req.ID, "err", err)
		h.Finish(req)
	}
	return h.next.Password(ctx, req, attempt, problem)
}

// Finish ends the request's conversation with the terminal broker, if it
// has one.
func (h *Handoff) Finish(req *broker.Request) {
	h.mu.Lock()
	cv := h.convs[req]
	delete(h.convs, req)
	h.mu.Unlock()
	if cv != nil {
		cv.Close("ended")
	}
}

func (h *Handoff) String() string {
	return "the terminal broker when one runs, else " + Describe(h.next)
}

// askTerminal puts req to the terminal broker, after a header naming the
// host it came from.
func askTerminal(ctx context.Context, req *broker.Request) (*broker.Conversation, broker.Answer, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", TerminalSocket())
	if err != nil {
		return nil, broker.Answer{}, fmt.Errorf("%w: %v", errNoTerminalBroker, err)
	}
	hdr, _ := json.Marshal(map[string]string{"host": req.Host})
	if _, err := c.Write(append(hdr, '\n')); err != nil {
		c.Close()
		return nil, broker.Answer{}, err
	}
	return broker.Ask(ctx, c, req)
}

// ServeTerminal runs the terminal broker: the person at this terminal answers
// every host's requests, one at a time.
func ServeTerminal(ctx context.Context, stdout, stderr io.Writer) int {
	if err := paths.PreparePrivateDir(paths.RemoteDir()); err != nil {
		fmt.Fprintf(stderr, "ollie-remote broker: %v\n", err)
		return 1
	}
	sock := TerminalSocket()
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		fmt.Fprintf(stderr, "ollie-remote broker: another broker already answers on %s\n", sock)
		return 1
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote broker: %v\n", err)
		return 1
	}
	defer os.Remove(sock)
	// Caught before the banner: a terminal closed as soon as it shows must
	// end the broker as a hang-up does, not kill it by the signal.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	defer signal.Stop(sigs)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A prompt cut short by the exit may have turned echo off.
	defer restoreTerminal(os.Stdin)()
	person := &TerminalApprover{In: os.Stdin, Out: stdout}
	// The keeper applies the policy and each host's budget before it asks here.
	b := &Broker{Approver: &Queue{Approver: person}, Log: log, Budget: NoBudget}
	fmt.Fprintf(stdout, "ollie-remote broker: answering the approval requests of every host ollie-remote up holds; ^C to stop\n")
	// The person here is told when the policy file they edit is refused.
	if r := OpenRules(log, func(p *Policy, err error) {
		if err != nil {
			fmt.Fprintf(stdout, "\nollie-remote broker: the policy file is broken: %s\n", termsafe.Line(PolicyProblem(p, err)))
		} else {
			fmt.Fprintf(stdout, "\nollie-remote broker: the policy file %s was read again: %d rules in force\n", termsafe.Line(p.Path), len(p.Rules()))
		}
	}); r != nil {
		go r.Watch(PolicyWatchEvery)
	}
	// Whatever ends the broker, the keeper asks its other approvers from
	// then on: its socket stops answering, and what was being asked here
	// goes back unanswered. A broker whose terminal is gone (hung up,
	// end of input) must not stay: the keeper would hand it every request.
	why := make(chan string, 1)
	go func() {
		select {
		case <-ctx.Done():
			why <- "stopped"
		case <-sigs:
			why <- "its terminal hung up"
		case <-person.Gone():
			why <- "its terminal is gone"
		}
		l.Close()
	}()
	var inflight sync.WaitGroup
	for {
		c, err := l.Accept()
		if err != nil {
			break
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			h, err := readHeader(c)
			if err != nil {
				c.Close()
				return
			}
			if h.Notice != "" {
				// Between prompts: the terminal approver holds mu
				// across one.
				takeNotice(c, func() {
					person.mu.Lock()
					defer person.mu.Unlock()
					fmt.Fprintf(stdout, "\n%s\n", termsafe.Line(h.Notice))
				})
				return
			}
			c.SetReadDeadline(time.Time{})
			b.ServeConn(h.Host, c)
		}()
	}
	// Prompts on a gone terminal end at once and go back to the keeper;
	// a conversation still open (a tool running) closes as we exit.
	waitGroupFor(&inflight, 2*time.Second)
	fmt.Fprintf(stderr, "ollie-remote broker: %s; the keeper asks with askpass or a dialog from now on\n", <-why)
	return 0
}

// waitGroupFor waits for wg, no longer than d.
func waitGroupFor(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// restoreTerminal saves f's terminal settings, if it is a terminal, and
// returns what puts them back.
func restoreTerminal(f *os.File) func() {
	rc, err := f.SyscallConn()
	if err != nil {
		return func() {}
	}
	var st *term.State
	rc.Control(func(fd uintptr) { st, _ = term.GetState(int(fd)) })
	if st == nil {
		return func() {}
	}
	return func() { rc.Control(func(fd uintptr) { term.Restore(int(fd), st) }) }
}

// header is the keeper's first line to a terminal broker: the host the
// request after it came from, or a notice about that host to show, with
// no request after it.
type header struct {
	Host   string `json:"host"`
	Notice string `json:"notice,omitempty"`
}

// readHeader reads the keeper's one-line header byte by byte, so that
// nothing of the conversation after it is consumed.
func readHeader(c net.Conn) (header, error) {
	var line []byte
	one := make([]byte, 1)
	for len(line) < 4096 {
		if _, err := c.Read(one); err != nil {
			return header{}, err
		}
		if one[0] == '\n' {
			var h header
			if err := json.Unmarshal(line, &h); err != nil || h.Host == "" {
				return header{}, fmt.Errorf("bad header %q", line)
			}
			return h, nil
		}
		line = append(line, one[0])
	}
	return header{}, fmt.Errorf("header too long")
}
