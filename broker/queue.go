package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Queue keeps a person usable when many requests arrive at once: it shows
// one prompt at a time, in arrival order; identical requests waiting
// together are asked once; and a session that floods the desktop is
// refused at once instead of burying everyone else's requests.
//
// Approve coalesces requests that are Same: every caller gets the answer
// of the one prompt. Password never shares a secret between requests:
// each call asks its own, but still one prompt at a time, and before any
// approval still waiting, since the person has just approved it.
//
// The zero value is not usable: Approver must be set.
type Queue struct {
	// Approver is the person (or program) behind the queue.
	Approver Approver
	// MaxPerSession caps the distinct approval prompts one session may
	// have waiting; beyond it Approve denies at once. Requests that
	// coalesce with one already waiting do not count. 0 means 8.
	MaxPerSession int

	mu      sync.Mutex
	queue   []*queued // waiting and being asked, in order
	asking  bool      // a worker is running
	session map[string]int
}

// DefaultMaxPerSession is MaxPerSession's default.
const DefaultMaxPerSession = 8

// queued is one prompt: an approval, with everyone waiting for it, or
// one password.
type queued struct {
	req      *Request
	password bool
	attempt  int
	problem  string

	// ctx is the prompt's: it ends when every waiter has gone.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	waiters int
	started bool

	done   chan struct{}
	answer Answer
	secret []byte
	err    error
}

// ErrWithdrawn is the cause of a prompt's end when everyone who asked for
// it has stopped waiting.
var ErrWithdrawn = errors.New("broker: every request waiting for this prompt was withdrawn")

func (q *Queue) max() int {
	if q.MaxPerSession <= 0 {
		return DefaultMaxPerSession
	}
	return q.MaxPerSession
}

// Approve asks the wrapped Approver, once for all identical requests
// waiting together.
func (q *Queue) Approve(ctx context.Context, req *Request) (Answer, error) {
	q.mu.Lock()
	var e *queued
	for _, o := range q.queue {
		if !o.password && o.req.Same(req) && o.ctx.Err() == nil {
			e = o
			break
		}
	}
	if e == nil {
		if q.session == nil {
			q.session = map[string]int{}
		}
		if q.session[req.Session] >= q.max() {
			q.mu.Unlock()
			return Answer{Decision: Deny, Reason: fmt.Sprintf(
				"too many pending approval requests for session %s (cap %d); try again later", req.Session, q.max())}, nil
		}
		q.session[req.Session]++
		e = q.enqueue(ctx, &queued{req: req})
	}
	e.waiters++
	q.mu.Unlock()

	select {
	case <-e.done:
		return e.answer, e.err
	case <-ctx.Done():
		q.leave(e)
		return Answer{}, context.Cause(ctx)
	}
}

// Password asks the wrapped Approver for req's password, when no other
// prompt is showing.
func (q *Queue) Password(ctx context.Context, req *Request, attempt int, problem string) ([]byte, error) {
	q.mu.Lock()
	e := q.enqueue(ctx, &queued{req: req, password: true, attempt: attempt, problem: problem})
	e.waiters++
	q.mu.Unlock()

	select {
	case <-e.done:
		return e.secret, e.err
	case <-ctx.Done():
		if q.leave(e) {
			// Asked already: the answer is on its way and no one will
			// take it.
			go func() { <-e.done; Zero(e.secret) }()
		}
		return nil, context.Cause(ctx)
	}
}

// enqueue adds e, with q.mu held, and starts the worker if none runs. A
// prompt keeps the values of the first context that asked for it but not
// its end: the others waiting for it still want the answer.
func (q *Queue) enqueue(ctx context.Context, e *queued) *queued {
	e.ctx, e.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	e.done = make(chan struct{})
	q.queue = append(q.queue, e)
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

// remove takes e out of the queue, with q.mu held.
func (q *Queue) remove(e *queued) {
	for i, o := range q.queue {
		if o == e {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			if !e.password {
				if q.session[e.req.Session]--; q.session[e.req.Session] <= 0 {
					delete(q.session, e.req.Session)
				}
			}
			return
		}
	}
}

// work shows the prompts one by one until none is left: passwords first,
// then approvals in arrival order.
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

// next is the prompt to show, with q.mu held.
func (q *Queue) next() *queued {
	for _, e := range q.queue {
		if e.password {
			return e
		}
	}
	if len(q.queue) > 0 {
		return q.queue[0]
	}
	return nil
}

// Pending lists the requests waiting for a prompt, the one being asked
// first, for a status display. Identical requests asked together appear
// once.
func (q *Queue) Pending() []*Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*Request
	for _, e := range q.queue {
		if e.started {
			out = append([]*Request{e.req}, out...)
		} else {
			out = append(out, e.req)
		}
	}
	return out
}

func (q *Queue) String() string {
	return fmt.Sprintf("%s, one prompt at a time, at most %d waiting per session", Describe(q.Approver), q.max())
}
