package broker

import (
	"context"
	"errors"
	"net"
)

// An Approver asks for a request's approval and, once it is approved,
// returns the conversation that goes on with whoever approved it (for
// sudo, the password). It is the asking side's one type: the host's tool
// runner asks the host's gate with one (toolsrv.GateApprover), deploy
// -system asks the desktop's own broker with one (Dialed over a pipe).
// Its error wraps ErrNotApproved: a *DeniedError when the answer was no,
// an *UnaskedError when nobody could be asked.
type Approver interface {
	Approve(ctx context.Context, req *Request) (Grant, error)
}

// ErrNotApproved is wrapped by every error of an Approver.
var ErrNotApproved = errors.New("not approved")

// A DeniedError is an answer of no, with the answerer's reason ("" when
// it gave none).
type DeniedError struct{ Reason string }

func (e *DeniedError) Error() string {
	if e.Reason == "" {
		return "denied"
	}
	return "denied: " + e.Reason
}

func (e *DeniedError) Unwrap() error { return ErrNotApproved }

// An UnaskedError is a request nobody answered: the answerer could not be
// reached (Reached false) or the conversation failed before an answer.
type UnaskedError struct {
	Reached bool
	Err     error
}

func (e *UnaskedError) Error() string {
	if !e.Reached {
		return "the approver is not reachable: " + e.Err.Error()
	}
	return "asking for approval failed: " + e.Err.Error()
}

func (e *UnaskedError) Unwrap() []error { return []error{ErrNotApproved, e.Err} }

// Dialed is an Approver that speaks this package's protocol (Ask) to
// whoever answers at the end of a connection it dials.
type Dialed func(ctx context.Context) (net.Conn, error)

func (dial Dialed) Approve(ctx context.Context, req *Request) (Grant, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, &UnaskedError{Err: err}
	}
	cv, ans, err := Ask(ctx, c, req) // it gives req its id
	if err != nil {
		return nil, &UnaskedError{Reached: true, Err: err}
	}
	if ans.Decision == Deny {
		cv.Close("denied")
		return nil, &DeniedError{Reason: ans.Reason}
	}
	return cv, nil
}

// ApproverFunc is a function as an Approver.
type ApproverFunc func(ctx context.Context, req *Request) (Grant, error)

func (f ApproverFunc) Approve(ctx context.Context, req *Request) (Grant, error) { return f(ctx, req) }
