package toolsrv

import (
	"context"
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
	c, err := net.Dial("unix", g.Socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %s needs approval, and the host's approval gate is not reachable (%v), so it was not run", ErrNotApproved, req.Tool, err)
	}
	cv, ans, err := broker.Ask(ctx, c, req) // it gives req its id
	if err != nil {
		return nil, fmt.Errorf("%w: asking for approval of %s failed: %v", ErrNotApproved, req.Tool, err)
	}
	if ans.Decision == broker.Deny {
		cv.Close("denied")
		reason := ans.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return nil, fmt.Errorf("%w: %s was denied: %s", ErrNotApproved, req.Tool, reason)
	}
	return cv, nil
}
