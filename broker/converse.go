package broker

// One approval path. A request crosses up to four hops (a session's
// toolsrv asks the host's gate; the gate asks the keeper's broker for its
// host; the keeper asks the terminal broker, or the gate asks a play's
// module), and every hop answers it by Converse, so that the rules of the
// conversation (who may ask for a password, how often, in which order,
// how long a peer may take, where a secret is zeroed) are written once.
// What differs between hops is only whom they ask: an Answerer.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// An Answerer is whom one hop asks for one request's answers: a person,
// a policy, or the next hop. Converse calls it for one conversation.
type Answerer interface {
	// Decide answers the elevation gate. ok false means nobody here
	// could be asked: the conversation is closed unanswered, so that
	// whoever relayed it may ask another.
	Decide(ctx context.Context, req *Request) (ans Answer, ok bool)
	// Password gets sudo's password for attempt (1 to
	// MaxPasswordAttempts, in turn; problem is why sudo asks again) and
	// hands it to give, which sends it on and zeroes it; Password
	// returns what give returned. Any other error denies the request,
	// its text the reason the asker is given; one wrapping
	// ErrUnanswered closes the conversation unanswered instead.
	Password(ctx context.Context, req *Request, attempt int, problem string, give func(pw []byte) error) error
	// End hears how the conversation ended: the asker's result ("ran",
	// "closed" when it hung up), "denied", "denied: REASON" (an ask
	// refused, or no password given), "unanswered" or "broken".
	End(req *Request, how string)
}

// ErrUnanswered is an Answerer's: nobody here could put the request to
// anyone.
var ErrUnanswered = errors.New("broker: nobody is there to ask")

// Converse answers in's request with a, by the rules of every hop:
//
//   - a's decision answers the elevation gate; a denial ends it;
//   - only a sudo request may ask for a password, at most
//     MaxPasswordAttempts times, numbered 1, 2, 3 in turn. The asker's
//     number is only its word (anything of the host's user can drive an
//     asker), so the count here decides: any other ask denies the
//     request, saying why, before a is asked;
//   - a password is a's, sent and zeroed as it is given;
//   - the asker has reply (0: until ctx ends) for each message it owes
//     after an answer or a password. An answer given stands.
//
// It returns nil when the conversation ended as the protocol says (the
// asker's result, a denial), ErrUnanswered when a could ask nobody, an
// *AttemptError for an ask refused for its number or for a request that
// is not sudo, or what broke the conversation.
func Converse(ctx context.Context, in *Incoming, a Answerer, reply time.Duration) error {
	req := in.Req
	how := "broken"
	defer func() { a.End(req, how) }()
	ans, ok := a.Decide(ctx, req)
	if !ok {
		how = "unanswered"
		return ErrUnanswered
	}
	if err := in.Answer(ans); err != nil {
		return err
	}
	if ans.Decision == Deny {
		how = "denied"
		return nil
	}
	deny := func(reason string) {
		in.Answer(Answer{Decision: Deny, Reason: reason})
		how = "denied: " + reason
	}
	for asked := 0; ; {
		attempt, problem, result, err := in.nextWithin(ctx, reply)
		var bad *AttemptError
		if errors.As(err, &bad) || err == nil && attempt > 0 && (!req.Sudo || attempt != asked+1) {
			if bad == nil {
				bad = &AttemptError{Attempt: attempt, Want: asked + 1, NotSudo: !req.Sudo}
			} else {
				bad.Want = asked + 1
			}
			deny(bad.Reason())
			return bad
		}
		if err != nil {
			return err
		}
		if attempt == 0 {
			how = result
			return nil
		}
		asked++
		var sendErr error
		give := func(pw []byte) error {
			sendErr = in.Secret(pw) // zeroes it
			return sendErr
		}
		err = a.Password(ctx, req, attempt, problem, give)
		switch {
		case sendErr != nil:
			return sendErr
		case errors.Is(err, ErrUnanswered):
			how = "unanswered"
			return err
		case err != nil:
			deny(strings.TrimPrefix(err.Error(), "denied: "))
			return nil
		}
	}
}

// nextWithin is Next, bounded by within when it is not 0.
func (in *Incoming) nextWithin(ctx context.Context, within time.Duration) (attempt int, problem, result string, err error) {
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, within, fmt.Errorf("%w: the asker sent nothing within %v", context.DeadlineExceeded, within))
		defer cancel()
	}
	return in.Next(ctx)
}
