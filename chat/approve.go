package chat

// Approvals in place: the requests of the chat's agent that wait in
// bypass/pending (a sandbox escape or sudo to approve, or, approved,
// sudo's password to give), found as they park and answered by writing
// their files, as the person at the host would by hand. The host decides
// who may answer: only its owner (the admin) writes bypass/pending, so a
// chat attached as anyone else sees the requests but cannot answer them.
// A desktop broker connected to the host (ollie-remote up) is asked
// first, and its requests never park here.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"ollie/internal/termsafe"
	"ollie/ns/client"
)

// A Pending is a request of this chat's agent waiting in bypass/pending:
// for approve, always or deny, or, approved, for sudo's password.
type Pending struct {
	ID string
	// Text is bypass/pending/ID as it read when found: the tool, its
	// arguments, what it runs and where, who asks, and what it waits
	// for. The host makes each field one line, its control characters
	// made visible and clipped (broker.Request.Prompt), but Text is the
	// host's, unchecked here: show each line through internal/termsafe,
	// since the host may be a remote one (ollie -H).
	Text string
	// Sudo is a request to run as root: once approved, sudo asks for
	// the password, unless the host's sudoers lets the user run the tool
	// without one.
	Sudo bool
	// Attempt is 0 while the request waits for approve, always or deny,
	// and N > 0 once it is approved and sudo asks for the password the
	// Nth time (N > 1: the last one given was wrong); answer that with
	// GivePassword, or Decide "deny".
	Attempt int
}

// maxText bounds what is read of a request's file: the host clips its
// fields to a few hundred bytes, so more is not a request to show.
const maxText = 16 << 10

// WatchPending calls found for each request of the agent agentID that
// waits in bypass/pending now or parks there later, and again each time
// sudo asks such a request, approved, for its password, until ctx ends.
// It never calls found twice for one wait (an ID and an Attempt). found
// runs on WatchPending's goroutine, one call at a time; the events that
// come meanwhile wait in the daemon (if they overflow, the directory is
// listed again).
//
// It learns of new requests from the root event file (bypass.pending and
// bypass.password events) and of those already parked by listing
// bypass/pending once the subscription is in place, so that none parked
// in between is missed. A request is the agent's when its file names the
// agent's ID where the host names the agent that asked (the session
// line: "agent NAME (ID)"); a name, which an agent may choose, cannot
// pass for another agent's ID there, since the ID ends the line.
//
// dial gives it a connection of its own, closed when it returns: a
// Conn's calls are interrupted together, so a watch cannot share one.
// WatchPending returns ctx's cause when ctx ends, or why the watch
// failed (the daemon went, say).
func WatchPending(ctx context.Context, dial func() (*client.Conn, error), agentID string, found func(Pending)) error {
	if !plainName(agentID) {
		return fmt.Errorf("chat: watching bypass/pending: %q is not an agent's ID", agentID)
	}
	c, err := dial()
	if err != nil {
		return fmt.Errorf("chat: watching bypass/pending: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	lines := &eventLines{ctx: ctx, c: make(chan string, 64)}
	subscribed := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- c.SubscribeFrom(ctx, "event", []byte("bypass.pending bypass.password"), func() { close(subscribed) }, lines)
	}()
	w := &pendingWatch{c: c, agent: agentID, found: found, seen: map[pendingWait]bool{}}
	select {
	case <-subscribed:
	case err := <-ended:
		return w.failed(ctx, err)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if err := w.scan(ctx); err != nil {
		return w.failed(ctx, err)
	}
	for {
		var err error
		select {
		case line := <-lines.c:
			topic, data, _ := strings.Cut(line, " ")
			id, _, _ := strings.Cut(data, " ")
			switch topic {
			case "event.lost": // the daemon dropped events: look again
				err = w.scan(ctx)
			case "bypass.pending", "bypass.password":
				err = w.check(ctx, id)
			}
		case err = <-ended:
			if err == nil {
				err = errors.New("the daemon ended the event subscription")
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err != nil {
			return w.failed(ctx, err)
		}
	}
}

// pendingWatch is WatchPending's state: what it has reported.
type pendingWatch struct {
	c     *client.Conn
	agent string
	found func(Pending)
	seen  map[pendingWait]bool
}

// pendingWait is one wait of a request: its decision (attempt 0) or one
// of sudo's asks for its password.
type pendingWait struct {
	id      string
	attempt int
}

func (w *pendingWatch) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("chat: watching bypass/pending: %w", err)
}

// scan checks every request in bypass/pending.
func (w *pendingWatch) scan(ctx context.Context) error {
	dirs, err := w.c.Ls(ctx, "bypass/pending")
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := w.check(ctx, d.Name); err != nil {
			return err
		}
	}
	return nil
}

// check reads request id and reports it if it is the agent's, waits for
// someone, and was not reported for this wait. One that has gone (it was
// answered) is passed over; only a failed connection is an error.
func (w *pendingWatch) check(ctx context.Context, id string) error {
	if !plainName(id) {
		return nil
	}
	var text capped
	if err := w.c.Follow(ctx, "bypass/pending/"+id, &text); err != nil {
		if client.IsServerError(err) || errors.Is(err, errTooLong) {
			return nil // no longer pending, or not a request to show
		}
		return err
	}
	p := Pending{ID: id, Text: text.String()}
	if !askedBy(p.Text, w.agent) {
		return nil
	}
	var waits bool
	p.Attempt, waits = waitOf(p.Text)
	if !waits {
		return nil // approved, and sudo has not asked (or is checking a password)
	}
	if k := (pendingWait{id, p.Attempt}); !w.seen[k] {
		w.seen[k] = true
		first, _, _ := strings.Cut(p.Text, "\n")
		p.Sudo = strings.HasSuffix(first, " asks to run as root (sudo)")
		w.found(p)
	}
	return nil
}

// askedBy reports whether text, a request's file, names agent as the one
// that asked: its session line ends `agent "NAME" ("ID")`, or `agent
// "ID"` for an agent without a name (broker.Request.Prompt). Names are
// quoted, so no name can end the line with another's ID.
func askedBy(text, agent string) bool {
	id := termsafe.Quote(agent, maxAgentField)
	for _, line := range strings.Split(text, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimLeft(line, " "), "session:  "); ok {
			return strings.Contains(s, ", agent ") &&
				(strings.HasSuffix(s, " ("+id+")") || strings.HasSuffix(s, ", agent "+id))
		}
	}
	return false
}

// maxAgentField is how much of an agent's id a request's file shows
// (broker's name fields).
const maxAgentField = 80

// waitOf reads what a request's file says it waits for: a decision
// (attempt 0), or, approved, the password sudo asks for the attempt-th
// time. waits is false for one approved that waits for no one yet.
func waitOf(text string) (attempt int, waits bool) {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "write approve, always or deny") {
			return 0, true
		}
		if rest, ok := strings.CutPrefix(line, "approved: sudo asks for the password"); ok {
			_, n, ok := strings.Cut(rest, "(attempt ")
			if !ok {
				return 0, false
			}
			n, _, _ = strings.Cut(n, " ")
			attempt, err := strconv.Atoi(n)
			return attempt, err == nil && attempt > 0
		}
	}
	return 0, false
}

// Decide answers pending request id: "approve", "always" (this tool from
// now on, while no desktop broker is connected) or "deny", which may be
// followed by a reason the model is told ("deny not on a Friday"). A
// request approved that waits for sudo's password takes only "deny".
func Decide(ctx context.Context, c *client.Conn, id, decision string) error {
	if !plainName(id) {
		return fmt.Errorf("chat: %q is not a request's ID", id)
	}
	word, reason, _ := strings.Cut(decision, " ")
	switch {
	case word == "approve" || word == "always":
		if reason != "" {
			return fmt.Errorf("chat: %s takes no reason; only deny does", word)
		}
	case word == "deny":
		if strings.ContainsAny(reason, "\r\n") {
			return errors.New("chat: a reason is one line")
		}
	default:
		return errors.New("chat: decide approve, always or deny [REASON]")
	}
	if err := c.Write(ctx, "bypass/pending/"+id, []byte(decision)); err != nil {
		return fmt.Errorf("chat: answering request %s: %w", id, err)
	}
	return nil
}

// GivePassword gives request id, approved and asked by sudo for its
// password (a Pending with Attempt > 0), the password pw: the host hands
// it to sudo as it would a desktop's, and it is asked for again if wrong
// (a Pending with the next Attempt). The host keeps it nowhere.
//
// pw is not kept: it is copied into the one buffer written, zeroed once
// written; pw itself stays the caller's, to zero. What Go cannot promise:
// the 9P client marshals the write into a buffer of its own, which is
// garbage, in this process's memory only.
func GivePassword(ctx context.Context, c *client.Conn, id string, pw []byte) error {
	if !plainName(id) {
		return fmt.Errorf("chat: %q is not a request's ID", id)
	}
	if len(pw) == 0 {
		return errors.New("chat: the password is empty")
	}
	if bytes.IndexByte(pw, '\n') >= 0 {
		return errors.New("chat: a password is one line")
	}
	const word = "password "
	buf := make([]byte, 0, len(word)+len(pw))
	buf = append(append(buf, word...), pw...)
	defer zero(buf)
	if err := c.Write(ctx, "bypass/pending/"+id, buf); err != nil {
		return fmt.Errorf("chat: giving request %s its password: %w", id, err)
	}
	return nil
}

func zero(b []byte) {
	for i := range b {
		b[i] = 0
	}
}

// errTooLong is a request's file longer than maxText.
var errTooLong = errors.New("longer than a request")

// capped keeps what it is written, up to maxText bytes.
type capped struct{ b bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > maxText {
		return 0, errTooLong
	}
	return c.b.Write(p)
}

func (c *capped) String() string { return c.b.String() }

// eventLines splits what the event file reads into lines for
// WatchPending's loop, which it waits for until ctx ends.
type eventLines struct {
	ctx  context.Context
	c    chan string
	rest []byte
}

func (e *eventLines) Write(p []byte) (int, error) {
	e.rest = append(e.rest, p...)
	for {
		i := bytes.IndexByte(e.rest, '\n')
		if i < 0 {
			if len(e.rest) > maxText {
				e.rest = nil // not an event of ours: the host's are one short line
			}
			return len(p), nil
		}
		line := string(e.rest[:i])
		e.rest = e.rest[i+1:]
		select {
		case e.c <- line:
		case <-e.ctx.Done():
			return 0, context.Cause(e.ctx)
		}
	}
}

// approvals hands the main loop each request of this agent's that waits
// in bypass/pending (none while a desktop broker answers them).
func (ch *chat) approvals(ctx context.Context) {
	for ctx.Err() == nil {
		err := WatchPending(ctx, ch.opt.Dial, ch.t.id, func(p Pending) {
			select {
			case ch.pend <- p:
			case <-ctx.Done():
			}
		})
		if ctx.Err() != nil {
			return
		}
		// A daemon restarting is not there for a moment: its socket is
		// gone or refuses (a DialError), then it is back.
		var down *client.DialError
		if errors.As(err, &down) && !client.IsUntrusted(err) {
			err = nil
		}
		if err != nil && !errors.Is(err, client.ErrConnLost) && !client.IsInterrupted(err) && !strings.Contains(err.Error(), "shutting down") {
			ch.say("[approvals will not show here: " + serverWords(err) + "]")
			return
		}
		// The connection went with the daemon or the tunnel: watch again
		// once it is back (the follower says so).
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// approve puts a request to the person: y, always or n; and when sudo
// asks for the password (the request comes back with an attempt), the
// password, read with no echo and never kept.
func (ch *chat) approve(ctx context.Context, p Pending) {
	ch.v.endTurn()
	if ch.term == nil {
		ch.say("── approval needed")
		ch.say(requestText(p.Text))
		ch.say("[answer with: echo approve | ollie write bypass/pending/" + termsafe.Line(p.ID) + " (or always, or deny)]")
		return
	}
	ch.in.lineMode(true)
	defer ch.in.lineMode(false)
	if p.Attempt > 0 {
		if p.Attempt > 1 {
			ch.say("[sudo: wrong password; try again]")
		}
		pw, err := ch.term.ReadPassword(fmt.Sprintf("sudo password (attempt %d of 3): ", p.Attempt))
		if err != nil {
			Decide(ctx, ch.ctl, p.ID, "deny no password given")
			return
		}
		b := []byte(pw)
		err = GivePassword(ctx, ch.ctl, p.ID, b)
		clear(b)
		if err != nil {
			ch.say("[" + serverWords(err) + "]")
		}
		return
	}
	ch.say("── approval needed")
	ch.say(requestText(p.Text))
	ch.term.SetPrompt("approve? [y]es, [a]lways, [n]o: ")
	answer := ""
	for answer == "" {
		line, err := ch.term.ReadLine()
		if err != nil {
			line = "n"
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			answer = "approve"
		case "a", "always":
			answer = "always"
		case "n", "no":
			answer = "deny denied in ollie chat"
		}
	}
	if err := Decide(ctx, ch.ctl, p.ID, answer); err != nil {
		ch.say("[" + serverWords(err) + "]")
	}
}

// requestText is a request's file as the chat shows it: the request, made
// safe, without the file's own lines on how to answer by writing to it,
// which the chat does for the person (y/a/n, or the line it prints).
func requestText(text string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.HasSuffix(l, " to this file to answer") || strings.HasPrefix(l, "password: write ") {
			continue
		}
		keep = append(keep, l)
	}
	return termsafe.Text(strings.Join(keep, "\n"))
}
