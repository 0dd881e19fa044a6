package toolsrv

import (
	"context"
	"fmt"
	"net"

	"ollie/broker"
)

// GateApprover asks the host's approval gate (olliesrv serves it on
// OLLIE_ELEVATE_SOCKET), which asks the desktop broker, the namespace, or
// nobody, as the host's policy says.
type GateApprover struct {
	Socket string
}

func (g GateApprover) Approve(ctx context.Context, req *ApprovalRequest) (Grant, error) {
	c, err := net.Dial("unix", g.Socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %s needs approval, and the host's approval gate is not reachable (%v), so it was not run", ErrNotApproved, req.Tool, err)
	}
	breq := &broker.Request{ID: broker.NewID(), Session: req.Session, Agent: req.Agent, SessionName: req.SessionName, AgentName: req.AgentName, Tool: req.Tool, Variant: req.Variant,
		Executable: req.Executable, Args: req.Args, Cwd: req.Cwd, Bypass: req.Bypass, Sudo: req.Sudo}
	cv, ans, err := broker.Ask(ctx, c, breq)
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
	return gateGrant{cv}, nil
}

type gateGrant struct{ cv *broker.Conversation }

func (g gateGrant) Password(ctx context.Context, attempt int, problem string) ([]byte, error) {
	return g.cv.Password(ctx, attempt, problem)
}

func (g gateGrant) Close(result string) { g.cv.Close(result) }
