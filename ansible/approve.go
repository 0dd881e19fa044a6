package ansible

// Approvals without a person: while its goal runs, the module is the
// host's broker. It answers its own session's requests by the play's
// policy and leaves every other session's unanswered, for the host's
// other brokers (a desktop's, or none: the gate then decides).

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"ollie/broker"
)

// Approval is one request the module answered, for the result.
type Approval struct {
	Tool     string `json:"tool"`
	Sudo     bool   `json:"sudo"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Result   string `json:"result,omitempty"` // how the call ended, in the host's word
}

// Approver answers requests by a Policy.
type Approver struct {
	Policy Policy
	// Session is the ID of the session whose requests it answers.
	Session string
	// Password is the become password; Approver zeroes it in Close.
	Password []byte
	// Key is what the gate sends with each request (the registration's
	// key): its socket is open to every process of this user, sandboxed
	// tools included, and a request without the key is not the gate's.
	// nil takes any.
	Key []byte

	mu  sync.Mutex
	log []Approval
	wg  sync.WaitGroup
}

// decide is the elevation gate by the policy.
func (a *Approver) decide(req *broker.Request) broker.Answer {
	switch {
	case req.Yolo:
		return broker.Answer{Decision: broker.Deny, Reason: "ollie_goal: a yolo session is never allowed from a play"}
	case !a.Policy.allows(req.Tool):
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("ollie_goal: the play's policy does not let %s leave the sandbox on this host (policy.allow)", req.Tool)}
	case req.Sudo && !bool(a.Policy.Sudo):
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("ollie_goal: the play's policy does not allow sudo on this host (policy.sudo), which %s asks for", req.Tool)}
	}
	return broker.Answer{Decision: broker.Once, Reason: "allowed by the play's policy"}
}

// Serve answers the requests arriving on l until l is closed.
func (a *Approver) Serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.serveConn(c)
		}()
	}
}

// Close waits for the conversations in flight and zeroes the password.
func (a *Approver) Close() {
	a.wg.Wait()
	broker.Zero(a.Password)
	broker.Zero(a.Key)
}

// Approvals is what was answered, in order.
func (a *Approver) Approvals() []Approval {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Approval(nil), a.log...)
}

func (a *Approver) record(ap Approval) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log = append(a.log, ap)
	return len(a.log) - 1
}

func (a *Approver) setResult(i int, result string, ans *broker.Answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log[i].Result = result
	if ans != nil {
		a.log[i].Decision, a.log[i].Reason = string(ans.Decision), ans.Reason
	}
}

// serveConn answers one request. The gate bounds what it relays; the
// waits here are bounded too, so that nothing holds the module up.
func (a *Approver) serveConn(c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	in, err := broker.Receive(ctx, c)
	cancel()
	if err != nil {
		return
	}
	if a.Key != nil && !in.KeyIs(a.Key) {
		// Not the gate: maybe a tool after the become password. Nothing
		// is answered, or recorded as the play's.
		return
	}
	req := in.Req
	if req.Session != a.Session {
		// Not this play's: closing unanswered lets the gate ask the
		// host's next broker.
		return
	}
	ans := a.decide(req)
	i := a.record(Approval{Tool: req.Tool, Sudo: req.Sudo, Decision: string(ans.Decision), Reason: ans.Reason})
	if err := in.Answer(ans); err != nil || ans.Decision == broker.Deny {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		attempt, _, result, err := in.Next(ctx)
		cancel()
		if err != nil {
			a.setResult(i, "broken: "+err.Error(), nil)
			return
		}
		if attempt == 0 {
			a.setResult(i, result, nil)
			return
		}
		deny := func(reason string) {
			d := broker.Answer{Decision: broker.Deny, Reason: reason}
			in.Answer(d)
			a.setResult(i, "no password", &d)
		}
		if !req.Sudo {
			deny("ollie_goal: a password was asked for a request that is not sudo")
			return
		}
		pw := a.Password
		switch {
		case len(pw) == 0:
			deny("ollie_goal: sudo asked for a password and the play gave none (become_password)")
			return
		case attempt > 1:
			deny("ollie_goal: sudo refused the play's become password")
			return
		}
		// Secret zeroes what it sends: send a copy, the play's password
		// may serve another request.
		if err := in.Secret(append([]byte(nil), pw...)); err != nil {
			return
		}
	}
}
