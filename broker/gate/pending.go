package gate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"ollie/broker"
	"ollie/internal/termsafe"
)

type pendingReq struct {
	req     *broker.Request
	created time.Time
	decided chan struct{} // closed with ans set, once
	ans     broker.Answer
	waiters int  // requests waiting on this one: it and identical ones
	asking  bool // req itself still waits on it (identical ones may outlast it)
	// pw is set once a sudo request is approved through bypass/pending:
	// it then waits there for its password too. Its entry is the
	// request's own and ends with its conversation (endPassword).
	pw *passwordAsk
}

// MaxParkedPerSession caps the distinct requests one session may have
// waiting in bypass/pending; identical ones wait on the first.
const MaxParkedPerSession = 8

// park waits for a decision written to bypass/pending/{id}. A request
// identical to one already waiting waits on it and gets its answer, and a
// session may park only MaxParkedPerSession distinct ones, so that a
// looping agent cannot flood the directory. When a broker registers, or
// registered since ask saw gen, park returns handed: the request goes to
// it instead, so nothing waits here behind a parked request while a
// desktop could be asked.
func (g *Gate) park(ctx context.Context, req *broker.Request, timeout time.Duration, gen uint64) (ans broker.Answer, own *pendingReq, handed bool) {
	g.mu.Lock()
	if g.joined.Load() != gen {
		g.mu.Unlock()
		return broker.Answer{}, nil, true
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
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("too many approval requests of session %s wait in bypass/pending (cap %d); answer those first", req.Session, MaxParkedPerSession)}, nil, false
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
		return broker.Answer{}, nil, true
	case <-g.closing:
		return broker.Answer{Decision: broker.Deny, Reason: ErrShutdown.Error()}, nil, false
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), ErrShutdown) { // as <-g.closing: see pendingPassword
			return broker.Answer{Decision: broker.Deny, Reason: ErrShutdown.Error()}, nil, false
		}
		if p.req == req {
			g.publish("bypass.decided", req.ID+" timeout")
		}
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("nobody approved it within %v (no desktop broker connected; it waited in bypass/pending)", timeout)}, nil, false
	}
}

// passwordOf returns p if it is req's own entry and now waits for req's
// password (Decide approved a sudo request), for pendingPassword.
func (g *Gate) passwordOf(p *pendingReq, req *broker.Request) *pendingReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.req == req && p.pw != nil {
		return p
	}
	return nil
}

// Pending lists the parked requests, oldest first.
func (g *Gate) Pending() []*broker.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := make([]*pendingReq, 0, len(g.pending))
	for _, p := range g.pending {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].created.Before(ps[j].created) })
	out := make([]*broker.Request, len(ps))
	for i, p := range ps {
		out[i] = p.req
	}
	return out
}

// PendingRequest returns one parked request.
func (g *Gate) PendingRequest(id string) (*broker.Request, bool) {
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
	var d broker.Decision
	switch word {
	case "approve", "once", "yes":
		d = broker.Once
	case "always":
		d = broker.Always
	case "deny", "no":
		d = broker.Deny
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pending[id]
	if !ok {
		return fmt.Errorf("request %s is not pending (answered, timed out, or never asked)", id)
	}
	if reason == "" && d == broker.Deny {
		reason = "denied through bypass/pending on the host"
	}
	if p.pw != nil {
		if d != broker.Deny {
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
	if d == broker.Always {
		if p.req.Bypass {
			d = broker.Once // "always" is for a tool, not for an agent's bypass of one call
		} else {
			g.always[p.req.Tool] = true
		}
	}
	p.ans = broker.Answer{Decision: d, Reason: reason}
	close(p.decided)
	g.publish("bypass.decided", id+" "+string(d))
	if d != broker.Deny && p.req.Sudo && p.asking {
		// The person who approved it is there to give the password: the
		// entry stays, now for that (pendingPassword).
		p.pw = newPasswordAsk()
		return nil
	}
	delete(g.pending, id)
	return nil
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
		text += fmt.Sprintf("approved: sudo asks for the password again (attempt %d of %d): %s\n", pw.attempt, broker.MaxPasswordAttempts, termsafe.Field(pw.problem, broker.MaxProblemField))
	case pw.attempt > 0:
		text += fmt.Sprintf("approved: sudo asks for the password (attempt %d of %d)\n", pw.attempt, broker.MaxPasswordAttempts)
	default:
		text += "approved: waiting for sudo to ask for the password (it asks none if this user may run the tool without one)\n"
	}
	return text + "password: write 'password SECRET' to this file (it is handed to sudo when sudo asks), or deny [REASON]\n", true
}
