package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"ollie/broker"
)

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

// pendingPassword serves the credential gate of a sudo request approved
// without a desktop: the request waits in bypass/pending/{id} for a
// writer's password (Password) or a deny. The entry of a request that was
// parked stays listed from its approval (Decide); one approved without
// waiting there (identical to it, or approved always) is listed when
// sudo first asks, so that a user whom sudo asks nothing (NOPASSWD) is
// never shown one.
func (q *asking) pendingPassword(ctx context.Context, req *broker.Request, attempt int, problem string, give func([]byte) error) error {
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
		broker.Zero(pw)
		return fmt.Errorf("request %s is not pending (answered, timed out, or never asked)", id)
	case ask == nil:
		broker.Zero(pw)
		return fmt.Errorf("request %s waits for approve, always or deny [REASON]; a password is taken once it is approved", id)
	case len(pw) == 0:
		return fmt.Errorf("request %s: the password is empty; write password SECRET, or deny [REASON]", id)
	case bytes.ContainsAny(pw, "\n\x00"):
		broker.Zero(pw)
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
		broker.Zero(pw)
		return fmt.Errorf("request %s was denied", id)
	case <-ask.done:
		broker.Zero(pw)
		return fmt.Errorf("request %s no longer waits for a password (it ran, was denied or ended)", id)
	case <-ctx.Done():
		broker.Zero(pw)
		return context.Cause(ctx)
	}
}
