package desktop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"ollie/broker"
)

// Rules is what the desktop broker consults before asking anyone: the
// policy file. Match answers the elevation gate when a rule applies;
// AddAlways saves an "always" answer.
type Rules interface {
	Match(req *broker.Request) (broker.Decision, bool)
	AddAlways(req *broker.Request) error
}

// Broker answers the requests of the hosts connected to this desktop. It
// treats what a host sends as hostile: each host may hold only
// MaxConnsPerHost connections, must send its request whole within
// RequestTimeout and each later message within ReplyTimeout, no message
// may exceed [broker.MaxMessage], and the person is asked for a
// request's password at most [broker.MaxPasswordAttempts] times whatever
// the host asks. Past each the connection is closed, the host's Refusals
// counted and the cause logged, once a minute per host and cause.
type Broker struct {
	Approver Person
	Rules    Rules // nil: ask about everything
	Log      *slog.Logger
	// Timeout is how long a person has for each gate; 0 means 5 minutes.
	Timeout time.Duration
	// RequestTimeout is how long a host has, from opening a connection,
	// to send its request whole; 0 means 10 seconds.
	RequestTimeout time.Duration
	// ReplyTimeout is how long a host has for each message it owes after
	// an answer or a password (a password ask, or the result); 0 means a
	// minute. An answer given stands; only the connection is closed.
	ReplyTimeout time.Duration
	// MaxConnsPerHost caps the connections one host may have open at
	// once; past it a new one is closed at once. 0 means 16.
	MaxConnsPerHost int
	// Budget limits how many of a host's requests are put to a person,
	// after the Rules: past it they are denied at once, saying so. nil
	// means a Budget of the default Limits, whose notices are logged.
	// A broker only the keeper's reaches, after the keeper's own
	// Budget, sets NoBudget.
	Budget *Budget

	mu      sync.Mutex
	budget  *Budget        // Budget, or the default made for a nil one
	conns   map[string]int // connections open, per host
	refused map[string]*Refusals
	logged  map[string]*logged // per host and cause
}

// DefaultMaxConnsPerHost is MaxConnsPerHost's default.
const DefaultMaxConnsPerHost = 16

// Refusals counts what a host was refused, by cause.
type Refusals struct {
	Conns     int // connections over MaxConnsPerHost
	Late      int // requests not whole within RequestTimeout, replies not within ReplyTimeout
	TooLarge  int // messages over broker.MaxMessage
	Passwords int // password asks past broker.MaxPasswordAttempts for one request
	Keyless   int // requests without the key of the host's registration: not from its olliesrv
	Budget    int // requests denied over the host's prompt Budget
}

// Refused is what host was refused so far.
func (b *Broker) Refused(host string) Refusals {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.refused[host]; r != nil {
		return *r
	}
	return Refusals{}
}

// logged is one host's cause of refusal, for logging it once a minute.
type logged struct {
	at     time.Time
	missed int // refusals not logged since
}

// logEvery is how often one host's refusals of one cause are logged.
const logEvery = time.Minute

// refuse counts a refusal of host's and logs it unless one of the same
// cause was logged less than logEvery ago.
func (b *Broker) refuse(host string, count func(*Refusals), level slog.Level, cause string, args ...any) {
	b.mu.Lock()
	if b.refused == nil {
		b.refused, b.logged = map[string]*Refusals{}, map[string]*logged{}
	}
	if b.refused[host] == nil {
		b.refused[host] = &Refusals{}
	}
	if count != nil {
		count(b.refused[host])
	}
	key := host + "\x00" + cause
	l := b.logged[key]
	if l == nil {
		l = &logged{}
		b.logged[key] = l
	}
	now := time.Now()
	if !l.at.IsZero() && now.Sub(l.at) < logEvery {
		l.missed++
		b.mu.Unlock()
		return
	}
	missed := l.missed
	l.at, l.missed = now, 0
	b.mu.Unlock()
	args = append([]any{"host", host}, args...)
	if missed > 0 {
		args = append(args, "not_logged_since", missed)
	}
	b.log().Log(context.Background(), level, "broker: "+cause, args...)
}

// admit takes one of host's connections, or reports that it has all of
// them open.
func (b *Broker) admit(host string) (release func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		b.conns = map[string]int{}
	}
	if b.conns[host] >= b.maxConns() {
		return nil, false
	}
	b.conns[host]++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.conns[host]--; b.conns[host] <= 0 {
			delete(b.conns, host)
		}
	}, true
}

// Conns is how many connections host has open.
func (b *Broker) Conns(host string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns[host]
}

func (b *Broker) maxConns() int {
	if b.MaxConnsPerHost <= 0 {
		return DefaultMaxConnsPerHost
	}
	return b.MaxConnsPerHost
}

func (b *Broker) requestTimeout() time.Duration {
	if b.RequestTimeout <= 0 {
		return 10 * time.Second
	}
	return b.RequestTimeout
}

func (b *Broker) replyTimeout() time.Duration {
	if b.ReplyTimeout <= 0 {
		return time.Minute
	}
	return b.ReplyTimeout
}

func (b *Broker) log() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return b.Log
}

// prompts is the Budget in force.
func (b *Broker) prompts() *Budget {
	if b.Budget != nil {
		return b.Budget
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.budget == nil {
		b.budget = &Budget{Notice: func(n Notice) {
			b.log().Warn("broker: a host over its prompt budget", "host", n.Host, "refused", n.Refused, "per_minute", n.PerMinute)
		}}
	}
	return b.budget
}

func (b *Broker) timeout() time.Duration {
	if b.Timeout <= 0 {
		return 5 * time.Minute
	}
	return b.Timeout
}

// Serve answers every request arriving on l, which reaches host (the
// socket ollie-remote forwards from that host's SSH connection).
func (b *Broker) Serve(host string, l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go b.ServeConn(host, c)
	}
}

// ServeConn answers one request that came over host's connection, and
// closes c. The request's own Host is overwritten: a host cannot speak
// for another.
func (b *Broker) ServeConn(host string, c net.Conn) { b.ServeConnKeyed(host, c, nil) }

// ServeConnKeyed is ServeConn for a socket sshd forwards from the host,
// which any process of the host's user can connect to: a request without
// key, the one the keeper gave the host's olliesrv with the registration,
// is not from olliesrv, and is closed unanswered before anyone is asked.
func (b *Broker) ServeConnKeyed(host string, c net.Conn, key []byte) {
	defer c.Close()
	release, ok := b.admit(host)
	if !ok {
		b.refuse(host, func(r *Refusals) { r.Conns++ }, slog.LevelWarn, "too many connections from a host; closing the newest",
			"cap", b.maxConns())
		return
	}
	defer release()
	b.answer(host, c, key)
}

// broken logs why a host's conversation ended early, counting the causes
// a host is refused for.
func (b *Broker) broken(host, id string, err error, wait time.Duration) {
	switch {
	case errors.Is(err, broker.ErrTooLarge):
		b.refuse(host, func(r *Refusals) { r.TooLarge++ }, slog.LevelWarn, "a message over the size limit; closing", "id", id, "limit", broker.MaxMessage)
	case errors.Is(err, context.DeadlineExceeded) && id == "":
		b.refuse(host, func(r *Refusals) { r.Late++ }, slog.LevelWarn, "no whole request in time; closing", "within", wait)
	case errors.Is(err, context.DeadlineExceeded):
		// An honest host's tool may run longer: the answer stands.
		b.refuse(host, func(r *Refusals) { r.Late++ }, slog.LevelInfo, "the host sent nothing more in time; closing", "id", id, "within", wait)
	case id == "":
		b.refuse(host, nil, slog.LevelWarn, "bad request", "err", err)
	default:
		b.refuse(host, nil, slog.LevelWarn, "conversation broken", "id", id, "err", err)
	}
}

// answer answers the request on c, if it carries key (nil: any).
func (b *Broker) answer(host string, c net.Conn, key []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout())
	in, err := broker.Receive(ctx, c)
	cancel()
	if err != nil {
		b.broken(host, "", err, b.requestTimeout())
		return
	}
	if key != nil && !in.KeyIs(key) {
		// Another process of the host's user (a sandboxed tool: Landlock
		// does not stop it connecting) asking in olliesrv's name, maybe
		// for a sudo password. Nobody is asked, and nothing is answered.
		b.refuse(host, func(r *Refusals) { r.Keyless++ }, slog.LevelWarn,
			"a request without the key the host's olliesrv was given: not from olliesrv; closing unanswered", "id", in.Req.ID)
		return
	}
	in.Req.Host = host // Receive dropped the request's own: a host cannot speak for another
	err = broker.Converse(context.Background(), in, asking{b, host}, b.replyTimeout())
	var bad *broker.AttemptError
	switch {
	case err == nil, errors.Is(err, broker.ErrUnanswered):
	case errors.As(err, &bad) && bad.Want > broker.MaxPasswordAttempts:
		b.refuse(host, func(r *Refusals) { r.Passwords++ }, slog.LevelWarn, "a password asked for too often; the grant ends",
			"id", in.Req.ID, "cap", broker.MaxPasswordAttempts)
	case errors.As(err, &bad):
		b.refuse(host, nil, slog.LevelWarn, "a password ask refused; the grant ends", "id", in.Req.ID, "reason", bad.Reason())
	default:
		b.broken(host, in.Req.ID, err, b.replyTimeout())
	}
}

// asking is the desktop's Answerer for one request of host's: the rules,
// the budget and the Approver (decide), which also gives the passwords.
type asking struct {
	b    *Broker
	host string
}

func (q asking) Decide(_ context.Context, req *broker.Request) (broker.Answer, bool) {
	ans, put := q.b.decide(req)
	if !put {
		q.b.log().Info("broker: nobody here could be asked; closing unanswered, for whoever relayed it to ask another", "host", q.host, "id", req.ID)
		return ans, false
	}
	q.b.log().Info("broker: elevation", "host", q.host, "session", req.Session, "tool", req.Tool, "sudo", req.Sudo, "id", req.ID, "decision", ans.Decision, "reason", ans.Reason)
	return ans, true
}

func (q asking) Password(_ context.Context, req *broker.Request, attempt int, problem string, give func([]byte) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), q.b.timeout())
	defer cancel()
	pw, err := q.b.Approver.Password(ctx, req, attempt, problem)
	switch {
	case errors.Is(err, ErrUnavailable):
		q.b.log().Info("broker: nobody here could be asked for the password; closing unanswered, for whoever relayed it to ask another", "host", q.host, "id", req.ID)
		return err
	case errors.Is(err, broker.ErrDenied):
		return errors.New("the sudo password was not given")
	case err != nil:
		return fmt.Errorf("the sudo password could not be asked: %v", err)
	}
	return give(pw)
}

func (q asking) End(req *broker.Request, how string) {
	if f, ok := q.b.Approver.(Finisher); ok {
		f.Finish(req)
	}
	if how != "unanswered" {
		q.b.log().Info("broker: done", "host", q.host, "id", req.ID, "result", how)
	}
}

// decide is the elevation gate: the rules, then a person. put is false
// when the Approver could not put the request to anyone (ErrUnavailable):
// it is then not answered at all.
func (b *Broker) decide(req *broker.Request) (ans broker.Answer, put bool) {
	if b.Rules != nil {
		if d, ok := b.Rules.Match(req); ok {
			if d == broker.Deny {
				return broker.Answer{Decision: broker.Deny, Reason: "denied by a rule of the desktop's broker policy"}, true
			}
			return broker.Answer{Decision: broker.Once, Reason: "allowed by a rule of the desktop's broker policy"}, true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
	defer cancel()
	// Only what reaches a person is counted: the rules above cost nothing.
	release, err := b.prompts().Admit(ctx, req)
	var over *OverBudgetError
	switch {
	case errors.As(err, &over):
		b.refuse(req.Host, func(r *Refusals) { r.Budget++ }, slog.LevelWarn, "a request over the host's prompt budget; denied",
			"id", req.ID, "per_minute", over.PerMinute)
		return broker.Answer{Decision: broker.Deny, Reason: over.Error()}, true
	case err != nil:
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("nobody answered within %v: the host's earlier request was being asked", b.timeout())}, true
	}
	ans, err = b.Approver.Approve(ctx, req)
	release(!errors.Is(err, ErrUnavailable))
	switch {
	case errors.Is(err, ErrUnavailable):
		return broker.Answer{}, false
	case ctx.Err() != nil:
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("nobody answered within %v", b.timeout())}, true
	case err != nil:
		return broker.Answer{Decision: broker.Deny, Reason: fmt.Sprintf("the approval could not be asked: %v", err)}, true
	case !ans.Decision.Valid():
		return broker.Answer{Decision: broker.Deny, Reason: "the approver gave no decision"}, true
	}
	if ans.Decision == broker.Deny && ans.Reason == "" {
		ans.Reason = "denied by the person at the desktop"
	}
	if ans.Decision == broker.Always && b.Rules != nil {
		if err := b.Rules.AddAlways(req); err != nil {
			b.log().Warn("broker: saving an always answer", "err", err)
		}
	}
	return ans, true
}
