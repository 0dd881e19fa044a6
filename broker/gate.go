package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"ollie/internal/changes"
	"ollie/internal/peer"
	"ollie/internal/termsafe"
)

// NoBroker says what a host does with a request while no desktop broker
// is connected.
type NoBroker string

const (
	Park     NoBroker = "pending" // wait in bypass/pending/{id} for someone to write a decision
	DenyNow  NoBroker = "deny"    // deny at once
	DefaultT          = 5 * time.Minute
)

// YoloPolicy says whether a host allows yolo sessions.
type YoloPolicy string

const (
	// YoloAllow lets the admin create them: a connected desktop broker is
	// asked first (its policy or its person may deny); with none, the
	// admin's word on this host is enough.
	YoloAllow YoloPolicy = "allow"
	// YoloDeny refuses them on this host, without asking anyone.
	YoloDeny YoloPolicy = "deny"
)

// HostPolicy is a host's bypass/policy.
type HostPolicy struct {
	NoBroker NoBroker
	Timeout  time.Duration // how long a request waits for an answer
	Yolo     YoloPolicy    // "" denies, as YoloDeny
}

// YoloAllowed reports whether the policy lets the admin ask for a yolo
// session; the zero value does not.
func (p HostPolicy) YoloAllowed() bool { return p.Yolo == YoloAllow }

func (p HostPolicy) String() string {
	yolo := YoloDeny
	if p.YoloAllowed() {
		yolo = YoloAllow
	}
	return fmt.Sprintf("nobroker=%s timeout=%s yolo=%s\n", p.NoBroker, p.Timeout, yolo)
}

// ParseHostPolicy reads "nobroker=pending|deny timeout=DURATION
// yolo=allow|deny" (any part may be left out; what is left out keeps its
// value in old).
func ParseHostPolicy(s string, old HostPolicy) (HostPolicy, error) {
	p := old
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return old, fmt.Errorf("bypass/policy: %q is not key=value (nobroker=pending|deny timeout=5m yolo=allow|deny)", f)
		case k == "yolo" && (v == string(YoloAllow) || v == string(YoloDeny)):
			p.Yolo = YoloPolicy(v)
		case k == "nobroker" && (v == string(Park) || v == string(DenyNow)):
			p.NoBroker = NoBroker(v)
		case k == "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return old, fmt.Errorf("bypass/policy: timeout %q is not a positive duration like 90s or 5m", v)
			}
			p.Timeout = d
		default:
			return old, fmt.Errorf("bypass/policy: unknown setting %q (nobroker=pending|deny timeout=5m yolo=allow|deny)", f)
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

	// Dir is the namespace directory, where ollie-remote forwards its
	// broker-* sockets: one nobody listens on any more is removed from it
	// (and from the registrations), since sshd leaves the file behind when
	// its connection ends. "" removes none.
	Dir string

	mu      sync.Mutex
	policy  HostPolicy
	brokers []string          // registered sockets leading to desktop brokers, newest first
	keys    map[string][]byte // a registration's key, sent with each request relayed to it; memory only
	joined  changes.Counter   // bumped under mu at each registration: parked requests go to it, and a request knows it missed one
	pending map[string]*pendingReq
	used    map[string]bool // request ids seen: each is single use
	always  map[string]bool // tool names approved "always" through the namespace
	wg      sync.WaitGroup
	lns     []net.Listener
	closing chan struct{} // closed by Shutdown
	asking  int           // conversations waiting on a desktop's answer or password
	quiet   chan struct{} // closed when asking drops to 0, while Shutdown waits
	base    context.Context
	cancel  context.CancelCauseFunc // ends every conversation when Shutdown stops waiting
}

type pendingReq struct {
	req     *Request
	created time.Time
	decided chan struct{} // closed with ans set, once
	ans     Answer
	waiters int  // requests waiting on this one: it and identical ones
	asking  bool // req itself still waits on it (identical ones may outlast it)
	// pw is set once a sudo request is approved through bypass/pending:
	// it then waits there for its password too. Its entry is the
	// request's own and ends with its conversation (endPassword).
	pw *passwordAsk
}

// passwordAsk is the credential gate at the host: a sudo request approved
// through bypass/pending, where no desktop is there to give the password,
// takes it from a writer of its file ("password SECRET"), as the desktop
// would give it, up to MaxPasswordAttempts times.
type passwordAsk struct {
	give   chan handoff  // a writer's password, taken when sudo asks
	denied chan struct{} // closed when "deny" is written, with reason set
	done   chan struct{} // closed when the request no longer waits for a password
	reason string
	ended  bool // done is closed
	// attempt is the ask sudo waits on, 0 before it asks and while it
	// checks a password; problem is why it asks again.
	attempt int
	problem string
}

// handoff carries a password from the writer of bypass/pending/{id} to
// the request's conversation, which hands it on and zeroes it (Secret)
// before it answers done: the writer's buffer is free once done answers.
type handoff struct {
	pw   []byte
	done chan error
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
	base, cancel := context.WithCancelCause(context.Background())
	return &Gate{Log: log, policy: HostPolicy{NoBroker: Park, Timeout: DefaultT, Yolo: YoloAllow},
		pending: map[string]*pendingReq{}, used: map[string]bool{}, always: map[string]bool{},
		closing: make(chan struct{}), base: base, cancel: cancel}
}

// ErrShutdown ends the conversations still in flight when Shutdown stops
// waiting for them.
var ErrShutdown = errors.New("broker: olliesrv on this host stopped before the request was answered; ask again once it is back")

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

// Register adds a socket leading to a desktop broker, or moves it first:
// requests go to the newest registration that answers, and requests parked
// for want of one are handed to it. ollie-remote up registers a fresh
// socket for each SSH connection it holds, so a host reached from two
// desktops (or two keepers) has a registration each.
func (g *Gate) Register(path string) error { return g.RegisterKeyed(path, nil) }

// RegisterKeyed is Register with the key the broker behind path expects
// with every request (a copy is kept; nil: none). ollie-remote's keeper
// gives one: its socket is sshd's, which any process of this user can
// connect to, and the key is how the desktop tells olliesrv from them.
func (g *Gate) RegisterKeyed(path string, key []byte) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("broker socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("broker socket: %s is not a socket", path)
	}
	g.mu.Lock()
	g.brokers = append([]string{path}, slices.DeleteFunc(g.brokers, func(p string) bool { return p == path })...)
	if old := g.keys[path]; old != nil {
		Zero(old)
		delete(g.keys, path)
	}
	if len(key) > 0 {
		if g.keys == nil {
			g.keys = map[string][]byte{}
		}
		g.keys[path] = slices.Clone(key)
	}
	g.joined.Bump()
	g.mu.Unlock()
	g.publish("bypass.broker", "+"+path)
	g.Sweep()
	return nil
}

// Unregister removes a registration (a keeper going down removes its
// own, and no other), and the socket with it when it is one of
// ollie-remote's in Dir. Removing one that is not registered is not an
// error: a daemon started since does not know it.
func (g *Gate) Unregister(path string) {
	g.mu.Lock()
	n := len(g.brokers)
	g.brokers = slices.DeleteFunc(g.brokers, func(p string) bool { return p == path })
	removed := len(g.brokers) < n
	if k := g.keys[path]; k != nil {
		Zero(k)
		delete(g.keys, path)
	}
	g.mu.Unlock()
	g.removeSocket(path)
	if removed {
		g.publish("bypass.broker", "-"+path)
	}
}

// Brokers lists the registrations, newest first.
func (g *Gate) Brokers() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.brokers)
}

// Sweep drops the registrations and removes the broker-* sockets in Dir
// that nobody listens on: their SSH connections are gone. A socket made
// in the last few seconds is left alone, since sshd may not listen on it
// yet.
func (g *Gate) Sweep() {
	if g.Dir == "" {
		return
	}
	live, err := listeningSockets()
	if err != nil {
		return // not Linux, or no /proc: the gate drops a dead one when it cannot reach it
	}
	socks, _ := filepath.Glob(filepath.Join(g.Dir, "broker-*"))
	for _, s := range socks {
		fi, err := os.Lstat(s)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || live[s] || time.Since(fi.ModTime()) < sweepAge {
			continue
		}
		g.Log.Info("broker gate: removing a broker socket nobody listens on", "socket", s)
		g.Unregister(s)
	}
}

// sweepAge is how old a broker socket must be before Sweep may remove it.
const sweepAge = 5 * time.Second

// removeSocket removes path if it is a socket ollie-remote forwarded into
// Dir; the gate removes nothing else.
func (g *Gate) removeSocket(path string) {
	if g.Dir == "" || filepath.Dir(path) != filepath.Clean(g.Dir) || !strings.HasPrefix(filepath.Base(path), "broker-") {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
}

// listeningSockets reads the paths of the Unix sockets listening on this
// host from /proc/net/unix, which, unlike connecting, tells without
// opening a conversation with the desktop at the other end.
func listeningSockets() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	const acceptCon = 0x10000 // __SO_ACCEPTCON: the socket listens
	live := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err == nil && flags&acceptCon != 0 {
			live[f[7]] = true
		}
	}
	return live, nil
}

func (g *Gate) publish(topic, data string) {
	if g.Publish != nil {
		g.Publish(topic, data)
	}
}

// Serve answers the toolsrv children connecting on l until l closes or
// Shutdown closes it.
func (g *Gate) Serve(l net.Listener) error {
	g.mu.Lock()
	select {
	case <-g.closing:
		g.mu.Unlock()
		l.Close()
		return net.ErrClosed
	default:
	}
	g.lns = append(g.lns, l)
	g.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		g.mu.Lock()
		select {
		case <-g.closing:
			g.mu.Unlock()
			c.Close()
			return net.ErrClosed
		default:
		}
		g.wg.Add(1)
		g.mu.Unlock()
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
	ctx, cancel := context.WithTimeout(g.base, 30*time.Second)
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
	q := &asking{g: g, policy: g.policy, always: g.always[req.Tool] && !req.Bypass}
	g.mu.Unlock()
	defer g.dropPassword(req.ID)
	ctx, cancel = context.WithTimeoutCause(g.base, q.policy.Timeout, fmt.Errorf("nobody answered within %v", q.policy.Timeout))
	defer cancel()
	var bad *AttemptError
	if err := Converse(ctx, in, q, 0); errors.As(err, &bad) {
		g.Log.Warn("broker gate: a password ask refused; the request is denied", "id", req.ID, "attempt", bad.Attempt, "reason", bad.Reason())
	}
}

// asking is the gate's Answerer for one request of a toolsrv child: the
// newest desktop broker that answers, or, with none, the host's policy
// (parked in bypass/pending, denied at once, or allowed for yolo and
// "always"). A password comes from where the approval came from.
type asking struct {
	g      *Gate
	policy HostPolicy
	always bool
	cv     *Conversation // the desktop's, once one answered
	// own is the request's entry in bypass/pending that stays for its
	// password: from its approval there (park), or from sudo's first
	// ask when it was approved without waiting there.
	own *pendingReq
}

func (q *asking) Decide(ctx context.Context, req *Request) (Answer, bool) {
	if req.Yolo && !q.policy.YoloAllowed() {
		return Answer{Decision: Deny, Reason: "this host's bypass/policy forbids yolo sessions (yolo=deny)"}, true
	}
	for {
		ans, answered, gen := q.ask(ctx, req)
		if answered {
			return ans, true
		}
		// No desktop broker answers: the host's policy says what now.
		switch {
		case req.Yolo:
			// Only the admin asks (olliesrv checks), and no desktop
			// forbids it: the host's policy allowed it above.
			return Answer{Decision: Once, Reason: "no desktop broker is connected; this host's bypass/policy allows yolo sessions"}, true
		case q.always:
			return Answer{Decision: Once, Reason: "approved always for this tool through bypass/pending"}, true
		case q.policy.NoBroker == DenyNow:
			return Answer{Decision: Deny, Reason: "no desktop broker is connected to this host, and its bypass/policy denies at once"}, true
		}
		ans, own, handed := q.g.park(ctx, req, q.policy.Timeout, gen)
		if !handed {
			q.own = own
			return ans, true
		}
	}
}

// ask puts the request to the newest registered broker that answers,
// dropping those that are gone. It reports whether one answered (or the
// request is denied because the last one reached broke), and the
// registrations it saw, for park.
func (q *asking) ask(ctx context.Context, req *Request) (ans Answer, answered bool, gen uint64) {
	g := q.g
	g.mu.Lock()
	brokers, gen := slices.Clone(g.brokers), g.joined.Load()
	g.mu.Unlock()
	var failed error
	for _, path := range brokers {
		bc, err := net.Dial("unix", path)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) {
				// Its SSH connection is gone (sshd leaves the file).
				g.Log.Info("broker gate: a desktop broker is gone; dropping it", "socket", path, "err", err)
				g.Unregister(path)
			} else {
				g.Log.Warn("broker gate: the desktop broker is not reachable", "socket", path, "err", err)
			}
			continue
		}
		g.mu.Lock()
		key := slices.Clone(g.keys[path])
		g.mu.Unlock()
		g.waitingOnDesktop(1)
		cv, ans, err := AskKeyed(ctx, bc, req, key)
		g.waitingOnDesktop(-1)
		Zero(key)
		if err == nil {
			g.publish("bypass.decided", req.ID+" "+string(ans.Decision))
			q.cv = cv
			return ans, true, gen
		}
		g.Log.Warn("broker gate: relay", "id", req.ID, "err", err)
		if ctx.Err() != nil || errors.Is(err, ErrTooLarge) {
			return Answer{Decision: Deny, Reason: g.reason(ctx, "the desktop broker failed", err)}, true, gen
		}
		// It broke before answering, and nothing was said to the
		// asker: the next one is asked.
		failed = err
	}
	if failed != nil {
		// A broker was reached and broke before answering, and no other
		// did: deny, saying so, rather than park what a desktop refused.
		return Answer{Decision: Deny, Reason: g.reason(ctx, "the desktop broker failed", failed)}, true, gen
	}
	return Answer{}, false, gen
}

func (q *asking) Password(ctx context.Context, req *Request, attempt int, problem string, give func([]byte) error) error {
	if q.cv == nil {
		return q.pendingPassword(ctx, req, attempt, problem, give)
	}
	q.g.waitingOnDesktop(1)
	pw, err := q.cv.Password(ctx, attempt, problem)
	q.g.waitingOnDesktop(-1)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no password: %v", context.Cause(ctx))
		}
		return err
	}
	return give(pw)
}

// pendingPassword serves the credential gate of a sudo request approved
// without a desktop: the request waits in bypass/pending/{id} for a
// writer's password (Password) or a deny. The entry of a request that was
// parked stays listed from its approval (Decide); one approved without
// waiting there (identical to it, or approved always) is listed when
// sudo first asks, so that a user whom sudo asks nothing (NOPASSWD) is
// never shown one.
func (q *asking) pendingPassword(ctx context.Context, req *Request, attempt int, problem string, give func([]byte) error) error {
	g := q.g
	g.mu.Lock()
	p := q.own
	if p == nil {
		p = &pendingReq{req: req, created: time.Now(), pw: newPasswordAsk()}
		q.own = p
		g.pending[req.ID] = p
		g.publish("bypass.pending", req.ID+" "+req.Tool)
	}
	pw := p.pw
	select {
	case <-pw.denied: // written before sudo asked
		g.mu.Unlock()
		return errors.New(pw.reason)
	default:
	}
	g.pending[req.ID] = p // again, if a password was given: sudo asks again
	pw.attempt, pw.problem = attempt, problem
	g.mu.Unlock()
	g.publish("bypass.password", req.ID+" "+strconv.Itoa(attempt))
	select {
	case h := <-pw.give:
		// Nothing waits for a person while sudo checks it: the entry
		// leaves the directory, and is back if sudo asks again.
		g.mu.Lock()
		if g.pending[req.ID] == p {
			delete(g.pending, req.ID)
		}
		pw.attempt, pw.problem = 0, ""
		g.mu.Unlock()
		err := give(h.pw) // zeroes it
		h.done <- err
		return err
	case <-pw.denied:
		return errors.New(pw.reason)
	case <-g.closing:
		return ErrShutdown
	case <-ctx.Done():
		// Shutdown closes g.closing and then cancels ctx: when both
		// are ready the select may take either, and a shutdown is
		// not a timeout.
		if errors.Is(context.Cause(ctx), ErrShutdown) {
			return ErrShutdown
		}
		g.publish("bypass.decided", req.ID+" timeout")
		return fmt.Errorf("no password: %v", context.Cause(ctx))
	}
}

func (q *asking) End(req *Request, how string) {
	if q.cv != nil {
		q.cv.Close(how)
	}
	if q.own != nil && q.own.pw != nil {
		q.g.endPassword(q.own)
	}
}

func newPasswordAsk() *passwordAsk {
	return &passwordAsk{give: make(chan handoff), denied: make(chan struct{}), done: make(chan struct{})}
}

// endPassword ends p's wait for a password: its entry leaves
// bypass/pending, and writers waiting to give it one are told it no
// longer waits.
func (g *Gate) endPassword(p *pendingReq) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[p.req.ID] == p {
		delete(g.pending, p.req.ID)
	}
	if !p.pw.ended {
		p.pw.ended = true
		close(p.pw.done)
	}
}

// dropPassword ends the password wait of request id, if it has one, when
// its conversation ends: one approved (Decide) as it stopped waiting.
func (g *Gate) dropPassword(id string) {
	g.mu.Lock()
	p := g.pending[id]
	waits := p != nil && p.pw != nil
	g.mu.Unlock()
	if waits {
		g.endPassword(p)
	}
}

// reason says why a conversation ended: the request's context's cause
// when it ended (the timeout, or the daemon stopping), else what failed.
func (g *Gate) reason(ctx context.Context, what string, err error) string {
	if ctx.Err() != nil {
		return context.Cause(ctx).Error()
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// park waits for a decision written to bypass/pending/{id}. A request
// identical to one already waiting waits on it and gets its answer, and a
// session may park only MaxParkedPerSession distinct ones, so that a
// looping agent cannot flood the directory. When a broker registers, or
// registered since ask saw gen, park returns handed: the request goes to
// it instead, so nothing waits here behind a parked request while a
// desktop could be asked.
func (g *Gate) park(ctx context.Context, req *Request, timeout time.Duration, gen uint64) (ans Answer, own *pendingReq, handed bool) {
	g.mu.Lock()
	if g.joined.Load() != gen {
		g.mu.Unlock()
		return Answer{}, nil, true
	}
	joined := g.joined.Changed(gen)
	var p *pendingReq
	parked := 0
	for _, q := range g.pending {
		if q.pw != nil {
			continue // approved: it waits for its password, not a decision
		}
		if q.req.Same(req) {
			p = q
		}
		if q.req.Session == req.Session {
			parked++
		}
	}
	if p == nil && parked >= MaxParkedPerSession {
		g.mu.Unlock()
		return Answer{Decision: Deny, Reason: fmt.Sprintf("too many approval requests of session %s wait in bypass/pending (cap %d); answer those first", req.Session, MaxParkedPerSession)}, nil, false
	}
	if p == nil {
		p = &pendingReq{req: req, created: time.Now(), decided: make(chan struct{}), asking: true}
		g.pending[req.ID] = p
		g.publish("bypass.pending", req.ID+" "+req.Tool)
	}
	p.waiters++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		if p.req == req {
			p.asking = false
		}
		if p.waiters--; p.waiters == 0 && g.pending[p.req.ID] == p && p.pw == nil {
			delete(g.pending, p.req.ID)
		}
		g.mu.Unlock()
	}()
	select {
	case <-p.decided:
		return p.ans, g.passwordOf(p, req), false
	case <-joined:
		select {
		case <-p.decided: // decided at the same moment: the decision stands
			return p.ans, g.passwordOf(p, req), false
		default:
		}
		return Answer{}, nil, true
	case <-g.closing:
		return Answer{Decision: Deny, Reason: ErrShutdown.Error()}, nil, false
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), ErrShutdown) { // as <-g.closing: see pendingPassword
			return Answer{Decision: Deny, Reason: ErrShutdown.Error()}, nil, false
		}
		if p.req == req {
			g.publish("bypass.decided", req.ID+" timeout")
		}
		return Answer{Decision: Deny, Reason: fmt.Sprintf("nobody approved it within %v (no desktop broker connected; it waited in bypass/pending)", timeout)}, nil, false
	}
}

// passwordOf returns p if it is req's own entry and now waits for req's
// password (Decide approved a sudo request), for pendingPassword.
func (g *Gate) passwordOf(p *pendingReq, req *Request) *pendingReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.req == req && p.pw != nil {
		return p
	}
	return nil
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
// (optionally followed by a reason for the model). A sudo request so
// approved stays parked, waiting for its password (Password), and takes
// only "deny" from then on; approving it "always" approves the tool, not
// its password, which is asked each time.
//
// An error never quotes what was written: a person may have typed a
// password into the wrong file.
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
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[id]
	if !ok {
		return fmt.Errorf("request %s is not pending (answered, timed out, or never asked)", id)
	}
	if reason == "" && d == Deny {
		reason = "denied through bypass/pending on the host"
	}
	if p.pw != nil {
		if d != Deny {
			return fmt.Errorf("request %s is approved and waits for its sudo password: write password SECRET, or deny [REASON]", id)
		}
		p.pw.reason = reason
		close(p.pw.denied)
		delete(g.pending, id)
		g.publish("bypass.decided", id+" "+string(d))
		return nil
	}
	if d == "" {
		return fmt.Errorf("request %s: write approve, always or deny [REASON]", id)
	}
	select {
	case <-p.decided:
		return fmt.Errorf("request %s was already answered", id)
	default:
	}
	if d == Always {
		if p.req.Bypass {
			d = Once // "always" is for a tool, not for an agent's bypass of one call
		} else {
			g.always[p.req.Tool] = true
		}
	}
	p.ans = Answer{Decision: d, Reason: reason}
	close(p.decided)
	g.publish("bypass.decided", id+" "+string(d))
	if d != Deny && p.req.Sudo && p.asking {
		// The person who approved it is there to give the password: the
		// entry stays, now for that (pendingPassword).
		p.pw = newPasswordAsk()
		return nil
	}
	delete(g.pending, id)
	return nil
}

// CutPassword reports whether data, written to bypass/pending/{id}, gives
// a password ("password SECRET"), and returns the password: the rest of
// the line after the first space, as written, less one trailing newline.
// It is a slice of data, not a copy.
func CutPassword(data []byte) (pw []byte, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte("password"))
	if !ok || len(rest) > 0 && rest[0] != ' ' && rest[0] != '\n' {
		return nil, false
	}
	if len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	return bytes.TrimSuffix(rest, []byte("\n")), true
}

// Password gives a sudo request approved through bypass/pending its
// password, as a desktop gives one: it waits until sudo asks (at once if
// it is asking), and returns once the request's conversation has handed
// it on. Password takes pw: it is zeroed when handed on, and on error.
// A wrong one is asked for again, up to MaxPasswordAttempts times; its
// entry says so (PendingText).
func (g *Gate) Password(ctx context.Context, id string, pw []byte) error {
	g.mu.Lock()
	p, ok := g.pending[id]
	var ask *passwordAsk
	if ok {
		ask = p.pw
	}
	g.mu.Unlock()
	switch {
	case !ok:
		Zero(pw)
		return fmt.Errorf("request %s is not pending (answered, timed out, or never asked)", id)
	case ask == nil:
		Zero(pw)
		return fmt.Errorf("request %s waits for approve, always or deny [REASON]; a password is taken once it is approved", id)
	case len(pw) == 0:
		return fmt.Errorf("request %s: the password is empty; write password SECRET, or deny [REASON]", id)
	case bytes.ContainsAny(pw, "\n\x00"):
		Zero(pw)
		return fmt.Errorf("request %s: a password is one line: write password SECRET", id)
	}
	h := handoff{pw: pw, done: make(chan error, 1)}
	select {
	case ask.give <- h:
		if err := <-h.done; err != nil {
			return fmt.Errorf("request %s: the password could not be handed to sudo: its tool is gone", id)
		}
		return nil
	case <-ask.denied:
		Zero(pw)
		return fmt.Errorf("request %s was denied", id)
	case <-ask.done:
		Zero(pw)
		return fmt.Errorf("request %s no longer waits for a password (it ran, was denied or ended)", id)
	case <-ctx.Done():
		Zero(pw)
		return context.Cause(ctx)
	}
}

// PendingText is what bypass/pending/{id} reads: the request as a person
// is shown it (Request.Prompt), then what it waits for and how to answer.
func (g *Gate) PendingText(id string) (string, bool) {
	g.mu.Lock()
	p, ok := g.pending[id]
	approved := ok && p.pw != nil
	var pw passwordAsk
	if approved {
		pw = passwordAsk{attempt: p.pw.attempt, problem: p.pw.problem}
	}
	g.mu.Unlock()
	if !ok {
		return "", false
	}
	// Read on the host itself: the host it came over is this one.
	shown := *p.req
	shown.Host = "this host"
	text := shown.Prompt()
	if !approved {
		return text + "write approve, always or deny [REASON] to this file to answer\n", true
	}
	switch {
	case pw.attempt > 0 && pw.problem != "":
		text += fmt.Sprintf("approved: sudo asks for the password again (attempt %d of %d): %s\n", pw.attempt, MaxPasswordAttempts, termsafe.Field(pw.problem, maxProblemField))
	case pw.attempt > 0:
		text += fmt.Sprintf("approved: sudo asks for the password (attempt %d of %d)\n", pw.attempt, MaxPasswordAttempts)
	default:
		text += "approved: waiting for sudo to ask for the password (it asks none if this user may run the tool without one)\n"
	}
	return text + "password: write 'password SECRET' to this file (it is handed to sudo when sudo asks), or deny [REASON]\n", true
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

// waitingOnDesktop counts the conversations waiting on a desktop's answer
// or password, which Shutdown waits for.
func (g *Gate) waitingOnDesktop(delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.asking += delta; g.asking == 0 && g.quiet != nil {
		close(g.quiet)
		g.quiet = nil
	}
}

// Shutdown stops the gate: it closes the listeners Serve was given and
// denies the parked requests at once, saying why (no one could answer
// them before the daemon is gone). It waits, until ctx ends, for the
// requests a desktop is being asked (its answer, or a sudo password), so
// that an answer given is passed on; then it ends every conversation:
// those still waiting on a desktop are denied with ErrShutdown's reason
// and their connections to the desktop closed, so no request is left
// half-answered, and Shutdown returns ctx's error. It does not wait for
// tools that were approved and are running.
func (g *Gate) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	select {
	case <-g.closing:
	default:
		close(g.closing)
	}
	lns := g.lns
	g.lns = nil
	var quiet chan struct{}
	if g.asking > 0 {
		quiet = make(chan struct{})
		g.quiet = quiet
	}
	g.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	var err error
	if quiet != nil {
		select {
		case <-quiet:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	g.cancel(ErrShutdown)
	g.wg.Wait()
	return err
}
