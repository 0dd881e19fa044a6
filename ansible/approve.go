package ansible

// Approvals without a person: while its goal runs, the module is the
// host's broker. It answers its own session's requests by the play's
// policy and leaves every other session's unanswered, for the host's
// other brokers (a desktop's, or none: the gate then decides).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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

// Broker answers a play's session's requests by its Policy: the play's own
// broker, as the desktop's is a person's.
type Broker struct {
	Policy Policy
	// Session is the ID of the session whose requests it answers.
	Session string
	// Password is the become password; Broker zeroes it in Close.
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
func (a *Broker) decide(req *broker.Request) broker.Answer {
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
func (a *Broker) Serve(l net.Listener) {
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
func (a *Broker) Close() {
	a.wg.Wait()
	broker.Zero(a.Password)
	broker.Zero(a.Key)
}

// Approvals is what was answered, in order.
func (a *Broker) Approvals() []Approval {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Approval(nil), a.log...)
}

func (a *Broker) record(ap Approval) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log = append(a.log, ap)
	return len(a.log) - 1
}

func (a *Broker) setResult(i int, result string, ans *broker.Answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log[i].Result = result
	if ans != nil {
		a.log[i].Decision, a.log[i].Reason = string(ans.Decision), ans.Reason
	}
}

// serveConn answers one request. The gate bounds what it relays; the
// waits here are bounded too, so that nothing holds the module up.
func (a *Broker) serveConn(c net.Conn) {
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
	broker.Converse(context.Background(), in, &asking{a: a}, 10*time.Minute)
}

// asking is the play's Answerer for one request: its policy decides, and
// its become password is given once.
type asking struct {
	a *Broker
	i int // the request's entry in the Approvals
}

func (q *asking) Decide(_ context.Context, req *broker.Request) (broker.Answer, bool) {
	if req.Session != q.a.Session {
		// Not this play's: closing unanswered lets the gate ask the
		// host's next broker.
		return broker.Answer{}, false
	}
	ans := q.a.decide(req)
	q.i = q.a.record(Approval{Tool: req.Tool, Sudo: req.Sudo, Decision: string(ans.Decision), Reason: ans.Reason})
	return ans, true
}

func (q *asking) Password(_ context.Context, req *broker.Request, attempt int, _ string, give func([]byte) error) error {
	switch pw := q.a.Password; {
	case len(pw) == 0:
		return errors.New("ollie_goal: sudo asked for a password and the play gave none (become_password)")
	case attempt > 1:
		return errors.New("ollie_goal: sudo refused the play's become password")
	default:
		// give zeroes what it sends: a copy, the play's password may
		// serve another request.
		return give(append([]byte(nil), pw...))
	}
}

func (q *asking) End(req *broker.Request, how string) {
	if req.Session != q.a.Session {
		return // not this play's
	}
	switch reason, denied := strings.CutPrefix(how, "denied: "); {
	case how == "denied":
		// The policy's decision, recorded as made.
	case denied:
		q.a.setResult(q.i, "no password", &broker.Answer{Decision: broker.Deny, Reason: reason})
	default:
		q.a.setResult(q.i, how, nil)
	}
}
