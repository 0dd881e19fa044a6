package toolsrv

import (
	"context"
	"errors"
	"fmt"
	"net"

	"ollie/broker"
)

// GateApprover asks the host's approval gate (olliesrv serves it on
// OLLIE_ELEVATE_SOCKET), which asks the desktop broker, the namespace, or
// nobody, as the host's policy says. Its Grant is the conversation with
// the gate.
type GateApprover struct {
	Socket string
}

func (g GateApprover) Approve(ctx context.Context, req *broker.Request) (broker.Grant, error) {
	dial := broker.Dialed(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", g.Socket)
	})
	grant, err := dial.Approve(ctx, req)
	var denied *broker.DeniedError
	var unasked *broker.UnaskedError
	switch {
	case errors.As(err, &denied):
		reason := denied.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return nil, fmt.Errorf("%w: %s was denied: %s", ErrNotApproved, req.Tool, reason)
	case errors.As(err, &unasked) && !unasked.Reached:
		return nil, fmt.Errorf("%w: %s needs approval, and the host's approval gate is not reachable (%v), so it was not run", ErrNotApproved, req.Tool, unasked.Err)
	case errors.As(err, &unasked):
		return nil, fmt.Errorf("%w: asking for approval of %s failed: %v", ErrNotApproved, req.Tool, unasked.Err)
	}
	return grant, err
}
