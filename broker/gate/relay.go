package gate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"syscall"

	"ollie/broker"
)

// asking is the gate's Answerer for one request of a toolsrv child: the
// newest desktop broker that answers, or, with none, the host's policy
// (parked in bypass/pending, denied at once, or allowed for yolo and
// "always"). A password comes from where the approval came from.
type asking struct {
	g      *Gate
	policy HostPolicy
	always bool
	cv     *broker.Conversation // the desktop's, once one answered
	// own is the request's entry in bypass/pending that stays for its
	// password: from its approval there (park), or from sudo's first
	// ask when it was approved without waiting there.
	own *pendingReq
}

func (q *asking) Decide(ctx context.Context, req *broker.Request) (broker.Answer, bool) {
	if req.Yolo && !q.policy.YoloAllowed() {
		return broker.Answer{Decision: broker.Deny, Reason: "this host's bypass/policy forbids yolo sessions (yolo=deny)"}, true
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
			return broker.Answer{Decision: broker.Once, Reason: "no desktop broker is connected; this host's bypass/policy allows yolo sessions"}, true
		case q.always:
			return broker.Answer{Decision: broker.Once, Reason: "approved always for this tool through bypass/pending"}, true
		case q.policy.NoBroker == DenyNow:
			return broker.Answer{Decision: broker.Deny, Reason: "no desktop broker is connected to this host, and its bypass/policy denies at once"}, true
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
func (q *asking) ask(ctx context.Context, req *broker.Request) (ans broker.Answer, answered bool, gen uint64) {
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
		cv, ans, err := broker.AskKeyed(ctx, bc, req, key)
		g.waitingOnDesktop(-1)
		broker.Zero(key)
		if err == nil {
			g.publish("bypass.decided", req.ID+" "+string(ans.Decision))
			q.cv = cv
			return ans, true, gen
		}
		g.Log.Warn("broker gate: relay", "id", req.ID, "err", err)
		if ctx.Err() != nil || errors.Is(err, broker.ErrTooLarge) {
			return broker.Answer{Decision: broker.Deny, Reason: g.reason(ctx, "the desktop broker failed", err)}, true, gen
		}
		// It broke before answering, and nothing was said to the
		// asker: the next one is asked.
		failed = err
	}
	if failed != nil {
		// A broker was reached and broke before answering, and no other
		// did: deny, saying so, rather than park what a desktop refused.
		return broker.Answer{Decision: broker.Deny, Reason: g.reason(ctx, "the desktop broker failed", failed)}, true, gen
	}
	return broker.Answer{}, false, gen
}

func (q *asking) Password(ctx context.Context, req *broker.Request, attempt int, problem string, give func([]byte) error) error {
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

func (q *asking) End(req *broker.Request, how string) {
	if q.cv != nil {
		q.cv.Close(how)
	}
	if q.own != nil && q.own.pw != nil {
		q.g.endPassword(q.own)
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
