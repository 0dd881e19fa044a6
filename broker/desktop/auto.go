package desktop

import (
	"context"
	"fmt"
	"io"
	"os"

	"ollie/broker"
)

// Auto picks how to ask the person at this desktop, in order: the askpass
// they configured (AskpassProgram), a zenity or kdialog window with a
// notification when there is a display (FindDialog), the terminal when in
// is one, and otherwise nobody: every request is denied with a reason
// saying how to fix it. Wrap the result in a Queue before serving more
// than one request at a time.
func Auto(in *os.File, out io.Writer) Person {
	if p := AskpassProgram(); p != "" {
		return &AskpassApprover{Program: p}
	}
	if p := FindDialog(); p != "" {
		return &DialogApprover{Program: p, Notifier: &Notifier{}}
	}
	if in != nil && isTerminal(in) {
		return &TerminalApprover{In: in, Out: out}
	}
	return Nobody{Reason: NoApproverReason}
}

// NoApproverReason is what Auto's last resort tells the model.
const NoApproverReason = "no way to ask anyone on this desktop: set OLLIE_ASKPASS, or run ollie-remote broker in a terminal"

// Nobody answers for a desktop where no one can be asked: it denies
// everything, with Reason.
type Nobody struct {
	Reason string
}

// Approve denies.
func (n Nobody) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	return broker.Answer{Decision: broker.Deny, Reason: n.Reason}, nil
}

// Password declines.
func (n Nobody) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	return nil, fmt.Errorf("broker: %s: %w", n.Reason, broker.ErrDenied)
}

func (n Nobody) String() string { return "nobody (every request denied: " + n.Reason + ")" }

// Describe names an approver for logs: what it runs or where it asks.
func Describe(a Person) string {
	if a == nil {
		return "none"
	}
	if s, ok := a.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", a)
}
