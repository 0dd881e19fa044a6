package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"
)

// Rules is what the desktop broker consults before asking anyone: the
// policy file. Match answers the elevation gate when a rule applies;
// AddAlways saves an "always" answer.
type Rules interface {
	Match(req *Request) (Decision, bool)
	AddAlways(req *Request) error
}

// Broker answers the requests of the hosts connected to this desktop.
type Broker struct {
	Approver Approver
	Rules    Rules // nil: ask about everything
	Log      *slog.Logger
	// Timeout is how long a person has for each gate; 0 means 5 minutes.
	Timeout time.Duration
}

func (b *Broker) log() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return b.Log
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

// ServeConn answers one request that came over host's connection. The
// request's own Host is overwritten: a host cannot speak for another.
func (b *Broker) ServeConn(host string, c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
	in, err := Receive(ctx, c)
	cancel()
	if err != nil {
		b.log().Warn("broker: bad request", "host", host, "err", err)
		return
	}
	req := in.Req
	if req.Host != "" && req.Host != host {
		b.log().Warn("broker: a request named another host; using the connection's", "claimed", req.Host, "host", host)
	}
	req.Host = host
	ans := b.decide(req)
	b.log().Info("broker: elevation", "host", host, "session", req.Session, "tool", req.Tool, "sudo", req.Sudo, "id", req.ID, "decision", ans.Decision, "reason", ans.Reason)
	if err := in.Answer(ans); err != nil || ans.Decision == Deny {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
		attempt, problem, result, err := in.Next(ctx)
		cancel()
		if err != nil {
			b.log().Warn("broker: conversation broken", "host", host, "id", req.ID, "err", err)
			return
		}
		if attempt == 0 {
			b.log().Info("broker: done", "host", host, "id", req.ID, "result", result)
			return
		}
		if !req.Sudo {
			in.Answer(Answer{Decision: Deny, Reason: "a password was asked for a request that is not sudo"})
			return
		}
		ctx, cancel = context.WithTimeout(context.Background(), b.timeout())
		pw, err := b.Approver.Password(ctx, req, attempt, problem)
		cancel()
		if err != nil {
			reason := "the sudo password was not given"
			if !errors.Is(err, ErrDenied) {
				reason = fmt.Sprintf("the sudo password could not be asked: %v", err)
			}
			in.Answer(Answer{Decision: Deny, Reason: reason})
			return
		}
		if err := in.Secret(pw); err != nil {
			return
		}
	}
}

// decide is the elevation gate: the rules, then a person.
func (b *Broker) decide(req *Request) Answer {
	if b.Rules != nil {
		if d, ok := b.Rules.Match(req); ok {
			if d == Deny {
				return Answer{Decision: Deny, Reason: "denied by a rule of the desktop's broker policy"}
			}
			return Answer{Decision: Once, Reason: "allowed by a rule of the desktop's broker policy"}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
	defer cancel()
	ans, err := b.Approver.Approve(ctx, req)
	switch {
	case ctx.Err() != nil:
		return Answer{Decision: Deny, Reason: fmt.Sprintf("nobody answered within %v", b.timeout())}
	case err != nil:
		return Answer{Decision: Deny, Reason: fmt.Sprintf("the approval could not be asked: %v", err)}
	case !ans.Decision.Valid():
		return Answer{Decision: Deny, Reason: "the approver gave no decision"}
	}
	if ans.Decision == Deny && ans.Reason == "" {
		ans.Reason = "denied by the person at the desktop"
	}
	if ans.Decision == Always && b.Rules != nil {
		if err := b.Rules.AddAlways(req); err != nil {
			b.log().Warn("broker: saving an always answer", "err", err)
		}
	}
	return ans
}
