package host

import (
	"context"
	"errors"
	"fmt"
	"net"

	"ollie/broker"
	"ollie/ns"
)

// Yolo sessions: every tool call of the session runs outside the sandbox
// and without approval, as the original ollie's Yolo did; a sudo tool
// still passes both gates, since its password is never on the host. Only
// the admin may create one, never an agent's tool (a nested session), and
// only the admin may add agents to one (newAgent); the
// host's approval gate is asked first, so that bypass/policy yolo=deny, or
// a connected desktop's policy or person, can refuse it. The choice is
// kept in the session file and shown in session/idx, env, status and at
// the start of every turn of every agent's chat.

// yoloNote starts every turn's chat in a yolo session.
const yoloNote = "yolo: tools run unsandboxed and without approval"

// errYoloNotAdmin refuses a yolo session to anyone but the admin.
var errYoloNotAdmin = errors.New("only the admin may create a yolo session; an agent's tool may not, nor may a session it creates be one")

// allowYolo asks the host's approval gate whether the admin may create the
// yolo session name (empty: named by olliesrv) in cwd. The gate answers
// from bypass/policy when no desktop broker is connected, and otherwise
// asks the desktop, whose policy or person may refuse; its error says
// why it was refused.
func (n *namespace) allowYolo(ctx context.Context, c *ns.Call, name, cwd string) error {
	if !c.Admin {
		return errYoloNotAdmin
	}
	conn, err := net.Dial("unix", n.tools.Elevate)
	if err != nil {
		return fmt.Errorf("refused: the host's approval gate, which decides, is not reachable: %w", err)
	}
	cv, ans, err := broker.Ask(ctx, conn, &broker.Request{ID: broker.NewID(), Session: name, Tool: broker.YoloTool, Variant: -1, Cwd: cwd, Yolo: true})
	if err != nil {
		return fmt.Errorf("refused: asking the host's approval gate failed: %w", err)
	}
	if ans.Decision == broker.Deny {
		cv.Close("refused")
		return fmt.Errorf("refused: %s", ans.Reason)
	}
	cv.Close("created")
	return nil
}
