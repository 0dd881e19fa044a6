package desktop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"ollie/broker"
)

// Budget is how much of a person's attention each host may take: at most
// PerMinute of its requests put to a person in any minute, and AtOnce of
// them at a person at a time (showing, or waiting their turn). A host
// that holds its broker key can send requests with fresh ids as fast as
// it likes (issue 29); a person faced with a stream of prompts ends up
// typing the password. Past the budget a request is denied at once, the
// host told why ([OverBudgetError]), and the desktop told once per burst
// (Notice).
//
// Only what would reach a person counts: a Broker asks its Budget after
// its policy rules, so a request a rule answers costs nothing. The
// password asks of an approved request do not count either: they follow
// the person's yes, at most [broker.MaxPasswordAttempts] of them. A
// request the same as one of its host's already at a person
// ([broker.Request.Same]) joins it, as the Queue shows the two as one
// prompt, and costs nothing more.
//
// The zero value has the default Limits and tells no one.
type Budget struct {
	// Limits gives the limits in force, read at each request (the
	// policy file's, which may change); nil means the defaults.
	Limits func() Limits
	// Notice is told when a host goes over its budget: once per burst,
	// a burst ending once a minute passes without a refusal, NoticeDelay
	// after its first refusal, with the count refused by then. nil: no
	// one is told (the Broker still logs and counts each refusal).
	Notice func(Notice)
	// NoticeDelay is how long after a burst's first refusal Notice is
	// told, so that its count says how big the burst is. 0 means a
	// second; a negative value tells it at once, before the refusal
	// returns.
	NoticeDelay time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	hosts map[string]*hostBudget
}

// Limits are a host's budget.
type Limits struct {
	// PerMinute is how many of a host's requests may be put to a person
	// in any minute (a sliding window, not a refill): 0 means
	// DefaultPromptsPerMinute, a negative value no limit.
	PerMinute int
	// AtOnce is how many of a host's requests may be at a person at a
	// time, showing or waiting their turn; the others wait for one of
	// those to be answered, within the time a person has. 0 means
	// DefaultPromptsAtOnce, a negative value no limit.
	AtOnce int
}

// The defaults: a person who answers three prompts of one host in a
// minute is answering, not reading; a fourth is denied.
const (
	DefaultPromptsPerMinute = 3
	// DefaultPromptsAtOnce is none: the Queue already shows one prompt
	// at a time, and holding a host's second request at the keeper
	// would keep a fleet run's terminal broker from listing it.
	DefaultPromptsAtOnce = -1
)

// budgetWindow is the window PerMinute counts in.
const budgetWindow = time.Minute

func (l Limits) perMinute() int {
	if l.PerMinute == 0 {
		return DefaultPromptsPerMinute
	}
	return l.PerMinute
}

func (l Limits) atOnce() int {
	if l.AtOnce == 0 {
		return DefaultPromptsAtOnce
	}
	return l.AtOnce
}

// NoBudget is a Budget without limits, for a broker that only the
// keeper's reaches, after the keeper's own Budget (the terminal brokers):
// counting there again would count each request twice.
var NoBudget = &Budget{Limits: func() Limits { return Limits{PerMinute: -1, AtOnce: -1} }}

// Notice is what the desktop is told of a host over its budget.
type Notice struct {
	Host      string // from the keeper's connection, never from a request
	Refused   int    // the host's requests refused over its budget so far
	PerMinute int    // the limit it is over
}

// Text is the notice for a person: the host, how many were refused, and
// how to lift the limit.
func (n Notice) Text() string {
	where := "the broker policy file"
	if p, err := DefaultPolicyPath(); err == nil {
		where = p
	}
	s := "s"
	if n.Refused == 1 {
		s = ""
	}
	return fmt.Sprintf("ollie: %d request%s from %s refused: over this desktop's limit of %d prompts a minute for one host. "+
		"To allow more, raise budget: prompts_per_minute in %s, or add a rule that answers the host's tool.",
		n.Refused, s, n.Host, n.PerMinute, where)
}

// ErrOverBudget is what an OverBudgetError wraps.
var ErrOverBudget = errors.New("broker: the desktop's limit for this host")

// OverBudgetError is a request refused over its host's budget. Its text
// is what the host is told.
type OverBudgetError struct {
	PerMinute int
	Retry     time.Duration // until the host may be asked again
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("denied by the desktop's limit for this host: at most %d prompts a minute, all taken; ask again in %v",
		e.PerMinute, e.Retry.Round(time.Second))
}

func (e *OverBudgetError) Unwrap() error { return ErrOverBudget }

// hostBudget is one host's account.
type hostBudget struct {
	began   []time.Time // when its last requests were put to a person, oldest first, none older than the window
	active  []*place    // requests at a person
	waiting []*place    // requests waiting for a place, in arrival order
	refused int         // refused over the budget, in all
	last    time.Time   // the last refusal, to tell bursts apart
}

// place is one request at a person, or waiting to be, with the requests
// the same as it that joined it.
type place struct {
	req     *broker.Request
	began   time.Time
	members int
	ready   chan struct{} // closed once it is at a person
	held    bool
}

func (g *Budget) now() time.Time {
	if g.Now == nil {
		return time.Now()
	}
	return g.Now()
}

func (g *Budget) limits() Limits {
	if g.Limits == nil {
		return Limits{}
	}
	return g.Limits()
}

// Refused is how many of host's requests were refused over its budget.
func (g *Budget) Refused(host string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.hosts[host]; h != nil {
		return h.refused
	}
	return 0
}

// Over lists the hosts refused over their budget so far, with how many.
func (g *Budget) Over() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for name, h := range g.hosts {
		if h.refused > 0 {
			out[name] = h.refused
		}
	}
	return out
}

// Admit takes a place at a person for req, whose Host must be the
// connection's, and waits for it while the host has AtOnce requests
// there. It returns an error wrapping ErrOverBudget (an
// *OverBudgetError) when the host has had its PerMinute, or ctx's cause
// when ctx ends first. release gives the place back once the person has
// answered; asked false (nobody could be asked) also gives back what it
// cost.
func (g *Budget) Admit(ctx context.Context, req *broker.Request) (release func(asked bool), err error) {
	lim := g.limits()
	perMinute, atOnce := lim.perMinute(), lim.atOnce()
	if perMinute < 0 && atOnce < 0 {
		return func(bool) {}, nil
	}
	now := g.now()
	g.mu.Lock()
	h := g.host(req.Host)
	for _, p := range append(h.active, h.waiting...) {
		if p.req.Same(req) {
			p.members++
			g.mu.Unlock()
			return g.wait(ctx, h, p)
		}
	}
	for len(h.began) > 0 && !now.Before(h.began[0].Add(budgetWindow)) {
		h.began = h.began[1:]
	}
	if perMinute >= 0 && len(h.began) >= perMinute {
		var retry time.Duration
		if perMinute > 0 {
			retry = h.began[len(h.began)-perMinute].Add(budgetWindow).Sub(now)
		}
		h.refused++
		burst := h.last.IsZero() || !now.Before(h.last.Add(budgetWindow))
		h.last = now
		g.mu.Unlock()
		if burst {
			g.notice(req.Host, perMinute)
		}
		return nil, &OverBudgetError{PerMinute: perMinute, Retry: retry}
	}
	p := &place{req: req, members: 1, ready: make(chan struct{})}
	if perMinute >= 0 {
		p.began = now
		h.began = append(h.began, now)
	}
	if atOnce < 0 || len(h.active) < atOnce {
		h.active = append(h.active, p)
		p.held = true
		close(p.ready)
	} else {
		h.waiting = append(h.waiting, p)
	}
	g.mu.Unlock()
	return g.wait(ctx, h, p)
}

// host is name's account, made if it has none, with g.mu held.
func (g *Budget) host(name string) *hostBudget {
	if g.hosts == nil {
		g.hosts = map[string]*hostBudget{}
	}
	h := g.hosts[name]
	if h == nil {
		h = &hostBudget{}
		g.hosts[name] = h
	}
	return h
}

// wait waits for p to be at a person.
func (g *Budget) wait(ctx context.Context, h *hostBudget, p *place) (func(bool), error) {
	select {
	case <-p.ready:
	case <-ctx.Done():
		// Gone before its turn: nobody was asked.
		g.leave(h, p, false)
		return nil, context.Cause(ctx)
	}
	var once sync.Once
	return func(asked bool) { once.Do(func() { g.leave(h, p, asked) }) }, nil
}

// leave is a member of p going. The last one gives its place to the
// request waiting longest, and, when nobody was asked, its cost back.
func (g *Budget) leave(h *hostBudget, p *place, asked bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.members--; p.members > 0 {
		return
	}
	if !asked && !p.began.IsZero() {
		for i, t := range h.began {
			if t.Equal(p.began) {
				h.began = append(h.began[:i:i], h.began[i+1:]...)
				break
			}
		}
	}
	if !p.held {
		h.waiting = remove(h.waiting, p)
		return
	}
	h.active = remove(h.active, p)
	atOnce := g.limits().atOnce()
	for len(h.waiting) > 0 && (atOnce < 0 || len(h.active) < atOnce) {
		n := h.waiting[0]
		h.waiting = h.waiting[1:]
		h.active = append(h.active, n)
		n.held = true
		close(n.ready)
	}
}

func remove(ps []*place, p *place) []*place {
	for i, o := range ps {
		if o == p {
			return append(ps[:i:i], ps[i+1:]...)
		}
	}
	return ps
}

// notice tells Notice of host's burst, after NoticeDelay.
func (g *Budget) notice(host string, perMinute int) {
	if g.Notice == nil {
		return
	}
	tell := func() { g.Notice(Notice{Host: host, Refused: g.Refused(host), PerMinute: perMinute}) }
	switch {
	case g.NoticeDelay < 0:
		tell()
	case g.NoticeDelay == 0:
		time.AfterFunc(time.Second, tell)
	default:
		time.AfterFunc(g.NoticeDelay, tell)
	}
}
