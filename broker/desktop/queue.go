package desktop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"ollie/broker"
)

// Queue keeps a person usable when many requests arrive at once, from one
// host or many: it shows one prompt at a time; each host's requests wait
// in a queue of their own, and the hosts take turns, so a flood from one
// host delays another's prompt by at most the one showing; identical
// requests waiting together are asked once; and a host or a session that
// floods the desktop is refused at once instead of burying everyone
// else's requests.
//
// Approve coalesces requests that are Same (which compares the host too):
// every caller gets the answer of the one prompt. Password never shares a
// secret between requests: each call asks its own, but still one prompt at
// a time, and before the approvals its host still has waiting, since the
// person has just approved it.
//
// The zero value is not usable: Approver must be set.
type Queue struct {
	// Approver is the person (or program) behind the queue.
	Approver Person
	// MaxPerHost caps the distinct approval prompts one host may have
	// waiting or showing; beyond it Approve denies at once, saying so.
	// Requests that coalesce with one already waiting do not count, nor
	// do passwords (at most broker.MaxPasswordAttempts per approved
	// request, and the Broker caps each host's connections). 0 means 16.
	MaxPerHost int
	// MaxPerSession caps the same per session of a host. 0 means 8.
	MaxPerSession int

	mu      sync.Mutex
	hosts   map[string]*hostQueue // hosts with a prompt waiting or showing
	showing *queued
	asking  bool   // a worker is running
	seq     uint64 // numbers prompts as they arrive and as they are shown
	refused map[string]int
}

// DefaultMaxPerHost is MaxPerHost's default.
const DefaultMaxPerHost = 16

// DefaultMaxPerSession is MaxPerSession's default.
const DefaultMaxPerSession = 8

// hostQueue is one host's prompts.
type hostQueue struct {
	waiting []*queued      // not shown yet, in arrival order
	held    int            // prompts waiting or showing, passwords too
	prompts int            // distinct approvals waiting or showing
	session map[string]int // the same, per session
	// served is when one of the host's prompts was last shown (q.seq);
	// the host with something waiting that was served longest ago goes
	// next.
	served uint64
}

// queued is one prompt: an approval, with everyone waiting for it, or
// one password.
type queued struct {
	req      *broker.Request
	password bool
	attempt  int
	problem  string
	arrived  uint64

	// ctx is the prompt's: it ends when every waiter has gone.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	waiters int
	started bool

	done   chan struct{}
	answer broker.Answer
	secret []byte
	err    error
}

// ErrWithdrawn is the cause of a prompt's end when everyone who asked for
// it has stopped waiting.
var ErrWithdrawn = errors.New("broker: every request waiting for this prompt was withdrawn")

func (q *Queue) maxHost() int {
	if q.MaxPerHost <= 0 {
		return DefaultMaxPerHost
	}
	return q.MaxPerHost
}

func (q *Queue) maxSession() int {
	if q.MaxPerSession <= 0 {
		return DefaultMaxPerSession
	}
	return q.MaxPerSession
}

// Approve asks the wrapped Approver, once for all identical requests
// waiting together.
func (q *Queue) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	q.mu.Lock()
	h := q.host(req.Host)
	var e *queued
	for _, o := range append([]*queued{q.showing}, h.waiting...) {
		if o != nil && !o.password && o.req.Same(req) && o.ctx.Err() == nil {
			e = o
			break
		}
	}
	if e == nil {
		var reason string
		switch {
		case h.session[req.Session] >= q.maxSession():
			reason = fmt.Sprintf("too many pending approval requests for session %s (cap %d); try again later", req.Session, q.maxSession())
		case h.prompts >= q.maxHost():
			reason = fmt.Sprintf("too many pending approval requests from host %s (cap %d); try again later", req.Host, q.maxHost())
		}
		if reason != "" {
			if q.refused == nil {
				q.refused = map[string]int{}
			}
			q.refused[req.Host]++
			q.tidy(req.Host, h)
			q.mu.Unlock()
			return broker.Answer{Decision: broker.Deny, Reason: reason}, nil
		}
		h.prompts++
		h.session[req.Session]++
		e = q.enqueue(ctx, h, &queued{req: req})
	}
	e.waiters++
	q.mu.Unlock()

	select {
	case <-e.done:
		return e.answer, e.err
	case <-ctx.Done():
		q.leave(e)
		return broker.Answer{}, context.Cause(ctx)
	}
}

// Refused is how many of host's requests were denied at once for being
// over a cap.
func (q *Queue) Refused(host string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.refused[host]
}

// host is name's queue, made if it has none, with q.mu held.
func (q *Queue) host(name string) *hostQueue {
	h := q.hosts[name]
	if h == nil {
		if q.hosts == nil {
			q.hosts = map[string]*hostQueue{}
		}
		h = &hostQueue{session: map[string]int{}}
		q.hosts[name] = h
	}
	return h
}

// tidy forgets name's queue once it holds nothing, with q.mu held.
func (q *Queue) tidy(name string, h *hostQueue) {
	if h.held == 0 {
		delete(q.hosts, name)
	}
}

// Password asks the wrapped Approver for req's password, when no other
// prompt is showing.
func (q *Queue) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	q.mu.Lock()
	e := q.enqueue(ctx, q.host(req.Host), &queued{req: req, password: true, attempt: attempt, problem: problem})
	e.waiters++
	q.mu.Unlock()

	select {
	case <-e.done:
		return e.secret, e.err
	case <-ctx.Done():
		if q.leave(e) {
			// Asked already: the answer is on its way and no one will
			// take it.
			go func() { <-e.done; broker.Zero(e.secret) }()
		}
		return nil, context.Cause(ctx)
	}
}

// enqueue adds e to h, with q.mu held, and starts the worker if none
// runs. A prompt keeps the values of the first context that asked for it
// but not its end: the others waiting for it still want the answer.
func (q *Queue) enqueue(ctx context.Context, h *hostQueue, e *queued) *queued {
	e.ctx, e.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	e.done = make(chan struct{})
	q.seq++
	e.arrived = q.seq
	h.waiting = append(h.waiting, e)
	h.held++
	if !q.asking {
		q.asking = true
		go q.work()
	}
	return e
}

// leave is called by a waiter that stops waiting. The last one to go
// withdraws the prompt: taken out of the queue if it was not shown yet,
// cancelled if it is showing. It reports whether the prompt was shown.
func (q *Queue) leave(e *queued) (started bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e.waiters--
	if e.waiters > 0 {
		return e.started
	}
	e.cancel(ErrWithdrawn)
	if !e.started {
		q.remove(e)
	}
	return e.started
}

// remove takes e out of its host's queue, or off the screen, with q.mu
// held.
func (q *Queue) remove(e *queued) {
	h := q.hosts[e.req.Host]
	if h == nil {
		return
	}
	if q.showing == e {
		q.showing = nil
	} else if i := slices.Index(h.waiting, e); i >= 0 {
		h.waiting = slices.Delete(h.waiting, i, i+1)
	} else {
		return
	}
	h.held--
	if !e.password {
		h.prompts--
		if h.session[e.req.Session]--; h.session[e.req.Session] <= 0 {
			delete(h.session, e.req.Session)
		}
	}
	q.tidy(e.req.Host, h)
}

// work shows the prompts one by one until none is left.
func (q *Queue) work() {
	for {
		q.mu.Lock()
		e := q.next()
		if e == nil {
			q.asking = false
			q.mu.Unlock()
			return
		}
		e.started = true
		q.mu.Unlock()

		if e.password {
			e.secret, e.err = q.Approver.Password(e.ctx, e.req, e.attempt, e.problem)
		} else {
			e.answer, e.err = q.Approver.Approve(e.ctx, e.req)
		}

		q.mu.Lock()
		q.remove(e)
		q.mu.Unlock()
		e.cancel(nil)
		close(e.done)
	}
}

// next takes the prompt to show off its host's queue, with q.mu held: the
// host with a prompt waiting that was served longest ago (of those never
// served, the one whose prompt came first) goes, and of its prompts a
// password first, else the oldest.
func (q *Queue) next() *queued {
	var h *hostQueue
	for _, o := range q.hosts {
		if len(o.waiting) == 0 {
			continue
		}
		if h == nil || o.served < h.served || (o.served == h.served && o.waiting[0].arrived < h.waiting[0].arrived) {
			h = o
		}
	}
	if h == nil {
		return nil
	}
	i := slices.IndexFunc(h.waiting, func(e *queued) bool { return e.password })
	if i < 0 {
		i = 0
	}
	e := h.waiting[i]
	h.waiting = slices.Delete(h.waiting, i, i+1)
	q.seq++
	h.served = q.seq
	q.showing = e
	return e
}

// Pending lists the requests waiting for a prompt, the one being asked
// first, then the others in arrival order, for a status display.
// Identical requests asked together appear once.
func (q *Queue) Pending() []*broker.Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	var waiting []*queued
	for _, h := range q.hosts {
		waiting = append(waiting, h.waiting...)
	}
	slices.SortFunc(waiting, func(a, b *queued) int { return cmp.Compare(a.arrived, b.arrived) })
	var out []*broker.Request
	if q.showing != nil {
		out = append(out, q.showing.req)
	}
	for _, e := range waiting {
		out = append(out, e.req)
	}
	return out
}

func (q *Queue) String() string {
	return fmt.Sprintf("%s, one prompt at a time, hosts in turn, at most %d waiting per host and %d per session",
		Describe(q.Approver), q.maxHost(), q.maxSession())
}
