// Package desktop is the desktop's side of the broker: it answers the
// approval requests that hosts' gates relay over their SSH connections,
// from the desktop's policy file or by asking the person at the desktop.
// ollie-remote serves it; the host never links it.
//
// A Broker serves each host's forwarded socket. It consults its Rules (a
// Policy: the policy file, read again when it changes, where "always"
// answers are saved) and otherwise asks its Approver: an askpass program
// (AskpassApprover), a zenity or kdialog window announced by a D-Bus
// notification (DialogApprover, Notifier), or the terminal that runs
// ollie-remote broker (TerminalApprover); Auto picks the first that can
// work. A Queue in front of the Approver shows one prompt at a time, the
// hosts in turn, capped per host and per session.
//
// ollie-remote's keeper serves each host with a Broker of its own
// (KeeperBroker) and hands what its policy does not answer to the terminal
// broker on TerminalSocket (Handoff): "ollie-remote broker"
// (ServeTerminal), or, while "ollie-remote fleet run" shows its live view,
// the run's own (RunBroker), which shows the same request from many hosts
// of the run as one list and can keep the run's sudo password
// (-ask-become-pass) for the run's hosts.
//
// What it trusts: a host only as the SSH connection its requests came
// over. Everything a host sends is data: a request's own Host is replaced
// by the connection's, its fields are shown made safe
// ([broker.Request.Prompt]), and each conversation is bounded in size,
// time and password asks. The answers that count are the person's,
// through an Approver, and the policy file's.
package desktop

import (
	"context"

	"ollie/broker"
)

// Person asks a person, or a program standing in for one: what the
// desktop's Broker asks once its policy has not answered (an askpass, a
// dialog, the terminal, a Queue in front of one of them). The asking
// side's type is broker.Approver.
type Person interface {
	// Approve is the elevation gate.
	Approve(ctx context.Context, req *broker.Request) (broker.Answer, error)
	// Password is the credential gate: the sudo password for req's host,
	// asked for the attempt-th time (1-based); problem says why it is
	// asked again ("wrong password"). The caller zeroes the slice when it
	// is done with it. [broker.ErrDenied] means the person declined.
	Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error)
}

// ErrUnavailable is returned by a Person that could not put a request
// to a person at all: its terminal hung up or reached its end. A Broker
// then closes the conversation unanswered, so that whoever relayed it
// there (ollie-remote's keeper) asks its next approver instead of
// denying.
var ErrUnavailable = broker.ErrUnanswered

// Finisher is a Person that holds something for a request while it
// runs (a relay to another broker). A Broker calls Finish once the
// request's conversation has ended, however it ended.
type Finisher interface {
	Finish(req *broker.Request)
}
