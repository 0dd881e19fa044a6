package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/internal/peer"
)

// NoBroker says what a host does with a request while no desktop broker
// is connected.
type NoBroker string

const (
	Park     NoBroker = "pending" // wait in bypass/pending/{id} for someone to write a decision
	DenyNow  NoBroker = "deny"    // deny at once
	DefaultT          = 5 * time.Minute
)

// HostPolicy is a host's bypass/policy.
type HostPolicy struct {
	NoBroker NoBroker
	Timeout  time.Duration // how long a request waits for an answer
}

func (p HostPolicy) String() string {
	return fmt.Sprintf("nobroker=%s timeout=%s\n", p.NoBroker, p.Timeout)
}

// ParseHostPolicy reads "nobroker=pending|deny timeout=DURATION" (either
// part may be left out; what is left out keeps its value in old).
func ParseHostPolicy(s string, old HostPolicy) (HostPolicy, error) {
	p := old
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return old, fmt.Errorf("bypass/policy: %q is not key=value (nobroker=pending|deny timeout=5m)", f)
		case k == "nobroker" && (v == string(Park) || v == string(DenyNow)):
			p.NoBroker = NoBroker(v)
		case k == "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return old, fmt.Errorf("bypass/policy: timeout %q is not a positive duration like 90s or 5m", v)
			}
			p.Timeout = d
		default:
			return old, fmt.Errorf("bypass/policy: unknown setting %q (nobroker=pending|deny timeout=5m)", f)
		}
	}
	return p, nil
}

// Gate is a host's side: toolsrv children ask it, and it asks the desktop
// broker connected over SSH, or parks the request for the namespace, or
// denies, as the host's policy says.
type Gate struct {
	Log     *slog.Logger
	Publish func(topic, data string) // events: bypass.pending, bypass.decided
	// TrustExe, if set, is the only executable whose processes may ask
	// (the toolsrv children are this same binary).
	TrustExe string

	mu      sync.Mutex
	policy  HostPolicy
	broker  string // the socket forwarded to the desktop broker, "" when none
	pending map[string]*pendingReq
	used    map[string]bool // request ids seen: each is single use
	always  map[string]bool // tool names approved "always" through the namespace
	wg      sync.WaitGroup
}

type pendingReq struct {
	req     *Request
	created time.Time
	decided chan struct{} // closed with ans set, once
	ans     Answer
	waiters int // requests waiting on this one: it and identical ones
}

// MaxParkedPerSession caps the distinct requests one session may have
// waiting in bypass/pending; identical ones wait on the first.
const MaxParkedPerSession = 8

// NewGate returns a gate that parks requests for 5 minutes when no broker
// is connected.
func NewGate(log *slog.Logger) *Gate {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Gate{Log: log, policy: HostPolicy{NoBroker: Park, Timeout: DefaultT},
		pending: map[string]*pendingReq{}, used: map[string]bool{}, always: map[string]bool{}}
}

func (g *Gate) Policy() HostPolicy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

func (g *Gate) SetPolicy(p HostPolicy) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.policy = p
}

// SetBroker records the socket that leads to the desktop broker ("" when
// it went away). ollie-remote up forwards a fresh one per connection.
func (g *Gate) SetBroker(path string) error {
	if path != "" {
		fi, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("broker socket: %w", err)
		}
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("broker socket: %s is not a socket", path)
		}
	}
	g.mu.Lock()
	g.broker = path
	g.mu.Unlock()
	g.publish("bypass.broker", path)
	return nil
}

func (g *Gate) Broker() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broker
}

func (g *Gate) publish(topic, data string) {
	if g.Publish != nil {
		g.Publish(topic, data)
	}
}

// Serve answers the toolsrv children connecting on l until l closes.
func (g *Gate) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.ServeConn(c)
		}()
	}
}

// ServeConn handles one request from a toolsrv child.
func (g *Gate) ServeConn(c net.Conn) {
	defer c.Close()
	if err := g.checkPeer(c); err != nil {
		g.Log.Warn("broker gate: refused a peer", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	in, err := Receive(ctx, c)
	cancel()
	if err != nil {
		g.Log.Warn("broker gate: bad request", "err", err)
		return
	}
	req := in.Req
	req.Host = "" // the desktop says which host this is, from the connection
	g.mu.Lock()
	if g.used[req.ID] {
		g.mu.Unlock()
		in.Answer(Answer{Decision: Deny, Reason: "request id " + req.ID + " was already used"})
		return
	}
	g.used[req.ID] = true
	policy, brokerPath := g.policy, g.broker
	always := g.always[req.Tool] && !req.Bypass
	g.mu.Unlock()

	ctx, cancel = context.WithTimeout(context.Background(), policy.Timeout)
	defer cancel()
	if brokerPath != "" {
		if bc, err := net.Dial("unix", brokerPath); err == nil {
			g.relay(ctx, in, bc, policy)
			return
		} else {
			g.Log.Warn("broker gate: the desktop broker is not reachable", "socket", brokerPath, "err", err)
		}
	}
	var ans Answer
	switch {
	case always:
		ans = Answer{Decision: Once, Reason: "approved always for this tool through bypass/pending"}
	case policy.NoBroker == DenyNow:
		ans = Answer{Decision: Deny, Reason: "no desktop broker is connected to this host, and its bypass/policy denies at once"}
	default:
		ans = g.park(ctx, req, policy.Timeout)
	}
	in.Answer(ans)
	if ans.Decision == Deny || !req.Sudo {
		return
	}
	// Approved through the namespace: there is nobody to give a password.
	for {
		attempt, _, _, err := in.Next(ctx)
		if err != nil || attempt == 0 {
			return
		}
		in.Answer(Answer{Decision: Deny, Reason: "no desktop broker is connected to give the sudo password: connect one with ollie-remote up, or let this user run the tool with NOPASSWD"})
		return
	}
}

// relay carries the conversation between the toolsrv child and the desktop
// broker, checking every message belongs to this request.
func (g *Gate) relay(ctx context.Context, in *Incoming, bc net.Conn, policy HostPolicy) {
	req := in.Req
	cv, ans, err := Ask(ctx, bc, req)
	if err != nil {
		reason := fmt.Sprintf("the desktop broker failed: %v", err)
		if ctx.Err() != nil {
			reason = fmt.Sprintf("nobody answered within %v", policy.Timeout)
		}
		g.Log.Warn("broker gate: relay", "id", req.ID, "err", err)
		in.Answer(Answer{Decision: Deny, Reason: reason})
		return
	}
	g.publish("bypass.decided", req.ID+" "+string(ans.Decision))
	if err := in.Answer(ans); err != nil || ans.Decision == Deny {
		cv.Close("denied")
		return
	}
	for {
		attempt, problem, result, err := in.Next(ctx)
		if err != nil {
			cv.Close("broken")
			return
		}
		if attempt == 0 {
			cv.Close(result)
			return
		}
		pw, err := cv.Password(ctx, attempt, problem)
		if err != nil {
			reason := err.Error()
			if ctx.Err() != nil {
				reason = fmt.Sprintf("no password within %v", policy.Timeout)
			}
			in.Answer(Answer{Decision: Deny, Reason: strings.TrimPrefix(reason, "denied: ")})
			cv.Close("no password")
			return
		}
		if err := in.Secret(pw); err != nil {
			cv.Close("broken")
			return
		}
	}
}

// park waits for a decision written to bypass/pending/{id}. A request
// identical to one already waiting waits on it and gets its answer, and a
// session may park only MaxParkedPerSession distinct ones, so that a
// looping agent cannot flood the directory.
func (g *Gate) park(ctx context.Context, req *Request, timeout time.Duration) Answer {
	g.mu.Lock()
	var p *pendingReq
	parked := 0
	for _, q := range g.pending {
		if q.req.Same(req) {
			p = q
		}
		if q.req.Session == req.Session {
			parked++
		}
	}
	if p == nil && parked >= MaxParkedPerSession {
		g.mu.Unlock()
		return Answer{Decision: Deny, Reason: fmt.Sprintf("too many approval requests of session %s wait in bypass/pending (cap %d); answer those first", req.Session, MaxParkedPerSession)}
	}
	if p == nil {
		p = &pendingReq{req: req, created: time.Now(), decided: make(chan struct{})}
		g.pending[req.ID] = p
		g.publish("bypass.pending", req.ID+" "+req.Tool)
	}
	p.waiters++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if p.waiters--; p.waiters == 0 {
			delete(g.pending, p.req.ID)
		}
		g.mu.Unlock()
	}()
	select {
	case <-p.decided:
		return p.ans
	case <-ctx.Done():
		if p.req == req {
			g.publish("bypass.decided", req.ID+" timeout")
		}
		return Answer{Decision: Deny, Reason: fmt.Sprintf("nobody approved it within %v (no desktop broker connected; it waited in bypass/pending)", timeout)}
	}
}

// Pending lists the parked requests, oldest first.
func (g *Gate) Pending() []*Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := make([]*pendingReq, 0, len(g.pending))
	for _, p := range g.pending {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].created.Before(ps[j].created) })
	out := make([]*Request, len(ps))
	for i, p := range ps {
		out[i] = p.req
	}
	return out
}

// PendingRequest returns one parked request.
func (g *Gate) PendingRequest(id string) (*Request, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[id]
	if !ok {
		return nil, false
	}
	return p.req, true
}

// Decide answers a parked request: "approve" or "once", "always", "deny"
// (optionally followed by a reason for the model).
func (g *Gate) Decide(id, text string) error {
	word, reason, _ := strings.Cut(strings.TrimSpace(text), " ")
	var d Decision
	switch word {
	case "approve", "once", "yes":
		d = Once
	case "always":
		d = Always
	case "deny", "no":
		d = Deny
	default:
		return fmt.Errorf("write approve, always or deny [REASON], not %q", word)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[id]
	if !ok {
		return fmt.Errorf("request %s is not pending (answered, timed out, or never asked)", id)
	}
	if d == Always {
		if p.req.Bypass {
			d = Once // "always" is for a tool, not for an agent's bypass of one call
		} else {
			g.always[p.req.Tool] = true
		}
	}
	if reason == "" && d == Deny {
		reason = "denied through bypass/pending on the host"
	}
	select {
	case <-p.decided:
		return fmt.Errorf("request %s was already answered", id)
	default:
	}
	p.ans = Answer{Decision: d, Reason: reason}
	close(p.decided)
	delete(g.pending, id)
	g.publish("bypass.decided", id+" "+string(d))
	return nil
}

// checkPeer admits only this user's processes that are not sandboxed (a
// Landlock-confined tool runs with no_new_privs) and, when TrustExe is
// set, only that executable.
func (g *Gate) checkPeer(c net.Conn) error {
	cred, err := peer.Cred(c)
	if err != nil {
		return err
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("pid %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	if nnp, err := peer.NoNewPrivs(int(cred.Pid)); err != nil {
		return err
	} else if nnp {
		return fmt.Errorf("pid %d is sandboxed (no_new_privs): a tool cannot ask for its own elevation", cred.Pid)
	}
	if g.TrustExe != "" {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cred.Pid))
		if err != nil {
			return err
		}
		want, _ := filepath.EvalSymlinks(g.TrustExe)
		if !slices.Contains([]string{g.TrustExe, want}, strings.TrimSuffix(exe, " (deleted)")) {
			return fmt.Errorf("pid %d runs %s, not ollie's toolsrv", cred.Pid, exe)
		}
	}
	return nil
}

// Wait waits for the conversations in progress, for shutdown.
func (g *Gate) Wait() { g.wg.Wait() }
