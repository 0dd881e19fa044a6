package broker

// The wire protocol: one request per stream connection, JSON lines.
//
//	asker → answerer   {"type":"request","request":{…,"id":ID},"key":"…"}
//	answerer → asker   {"type":"answer","id":ID,"answer":{"decision":…}}
//	for sudo, after an approval, up to MaxPasswordAttempts times, numbered
//	1, 2, 3 in turn (the answerer counts them itself, and the gate refuses
//	any other number, denying the request):
//	asker → answerer   {"type":"password","id":ID,"attempt":N,"problem":"wrong password"}
//	answerer → asker   {"type":"secret","id":ID,"secret":"…"} or an answer that denies
//	asker → answerer   {"type":"result","id":ID,"result":"ran"}   (then both close)
//
// The same conversation runs between a session's toolsrv and the host's
// gate, and between the gate and the desktop broker. Every message after
// the request carries its id; one for another id is rejected, and the
// conversation with it, so an answer can neither be replayed into another
// request nor answer the wrong one.
//
// The key, sent by the gate to a desktop broker registered with one, is
// what tells the desktop the request comes from the host's olliesrv: the
// socket sshd forwards from the host is open to every process of the
// host's user, a sandboxed tool included (Landlock does not mediate
// connecting to a Unix socket before ABI 9), and only the daemon and the
// keeper that registered the socket hold the key, in memory.

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

type message struct {
	Type    string   `json:"type"`
	ID      string   `json:"id,omitempty"`
	Request *Request `json:"request,omitempty"`
	Answer  *Answer  `json:"answer,omitempty"`
	Attempt int      `json:"attempt,omitempty"`
	Problem string   `json:"problem,omitempty"`
	Secret  []byte   `json:"secret,omitempty"`
	Result  string   `json:"result,omitempty"`
	Key     []byte   `json:"key,omitempty"`
}

// MaxMessage bounds one line of a conversation, on either side: a
// request's args are the largest part, and a prompt shows only their
// start. A reader holds at most this much of a line (ErrTooLarge past it,
// without reading the rest), and Ask refuses to send a larger request.
const MaxMessage = 64 << 10

// ErrMismatch is a message that does not belong to the conversation.
var ErrMismatch = errors.New("broker: a message for another request was rejected")

// ErrTooLarge is a message over MaxMessage.
var ErrTooLarge = fmt.Errorf("broker: message over %d KiB", MaxMessage>>10)

type wire struct {
	c net.Conn
	r *bufio.Reader
}

func newWire(c net.Conn) *wire {
	return &wire{c: c, r: bufio.NewReaderSize(c, 4<<10)}
}

// read reads one message, giving up when ctx ends. A connection without
// deadlines (an SSH channel's) is closed then: nothing else stops a read.
func (w *wire) read(ctx context.Context) (*message, error) {
	stop := context.AfterFunc(ctx, func() {
		if w.c.SetReadDeadline(time.Unix(1, 0)) != nil {
			w.c.Close()
		}
	})
	defer stop()
	line, err := w.readLine()
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	var m message
	err = json.Unmarshal(line, &m)
	Zero(line) // it may hold a secret
	if err != nil {
		return nil, fmt.Errorf("broker: bad message: %w", err)
	}
	return &m, nil
}

// readLine reads one line, never holding more than MaxMessage of it.
func (w *wire) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := w.r.ReadSlice('\n')
		if len(line)+len(frag) > MaxMessage {
			Zero(line)
			return nil, ErrTooLarge
		}
		line = append(line, frag...)
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			Zero(line)
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return nil, io.EOF
			}
			return nil, err
		}
	}
}

func (w *wire) write(m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) >= MaxMessage {
		Zero(b)
		return fmt.Errorf("%w: the %s would be %d bytes", ErrTooLarge, m.Type, len(b)+1)
	}
	b = append(b, '\n')
	_, err = w.c.Write(b)
	Zero(b)
	return err
}

// A Grant is an approved request's conversation with whoever approved
// it: for sudo it supplies the password, asked the attempt-th time with
// problem saying why it is asked again, in a slice the caller zeroes
// once sudo has it; Close says how the call ended. A *Conversation is
// one; the host's runner and deploy -system each take it from their own
// approver.
type Grant interface {
	Password(ctx context.Context, attempt int, problem string) ([]byte, error)
	Close(result string) error
}

var _ Grant = (*Conversation)(nil)

// Conversation is the asking side of one request.
type Conversation struct {
	w   *wire
	req *Request
}

// Ask sends req over c (which the conversation then owns) and waits for
// the elevation gate's answer.
func Ask(ctx context.Context, c net.Conn, req *Request) (*Conversation, Answer, error) {
	return AskKeyed(ctx, c, req, nil)
}

// AskKeyed is Ask with the key of the answerer's registration, which it
// checks before it asks anyone (Incoming.KeyIs).
func AskKeyed(ctx context.Context, c net.Conn, req *Request, key []byte) (*Conversation, Answer, error) {
	if req.ID == "" {
		req.ID = NewID()
	}
	cv := &Conversation{w: newWire(c), req: req}
	if err := cv.w.write(&message{Type: "request", Request: req, Key: key}); err != nil {
		c.Close()
		return nil, Answer{}, err
	}
	m, err := cv.w.read(ctx)
	if err != nil {
		c.Close()
		return nil, Answer{}, err
	}
	a, err := cv.answer(m)
	if err != nil {
		c.Close()
		return nil, Answer{}, err
	}
	return cv, a, nil
}

func (cv *Conversation) answer(m *message) (Answer, error) {
	if m.ID != cv.req.ID {
		return Answer{}, fmt.Errorf("%w (expected %s, got %q)", ErrMismatch, cv.req.ID, m.ID)
	}
	if m.Type != "answer" || m.Answer == nil || !m.Answer.Decision.Valid() {
		return Answer{}, fmt.Errorf("broker: expected an answer, got %q", m.Type)
	}
	return *m.Answer, nil
}

// Password asks for the sudo password. A denial is ErrDenied wrapped with
// the reason.
func (cv *Conversation) Password(ctx context.Context, attempt int, problem string) ([]byte, error) {
	if err := cv.w.write(&message{Type: "password", ID: cv.req.ID, Attempt: attempt, Problem: problem}); err != nil {
		return nil, err
	}
	m, err := cv.w.read(ctx)
	if err != nil {
		return nil, err
	}
	if m.ID != cv.req.ID {
		Zero(m.Secret)
		return nil, fmt.Errorf("%w (expected %s, got %q)", ErrMismatch, cv.req.ID, m.ID)
	}
	switch m.Type {
	case "secret":
		if len(m.Secret) == 0 {
			return nil, fmt.Errorf("%w: an empty password", ErrDenied)
		}
		return m.Secret, nil
	case "answer":
		reason := "the password was not given"
		if m.Answer != nil && m.Answer.Reason != "" {
			reason = m.Answer.Reason
		}
		return nil, fmt.Errorf("%w: %s", ErrDenied, reason)
	}
	return nil, fmt.Errorf("broker: expected a secret, got %q", m.Type)
}

// Close reports how the request ended and closes the connection.
func (cv *Conversation) Close(result string) error {
	cv.w.write(&message{Type: "result", ID: cv.req.ID, Result: result})
	return cv.w.c.Close()
}

// Incoming is the answering side of one request.
type Incoming struct {
	w   *wire
	Req *Request
	key []byte // what the asker sent as the registration's key
}

// KeyIs reports whether the request came with key, in constant time.
// The key is then zeroed: it has done its work.
func (in *Incoming) KeyIs(key []byte) bool {
	ok := len(key) > 0 && subtle.ConstantTimeCompare(in.key, key) == 1
	Zero(in.key)
	in.key = nil
	return ok
}

// Receive reads the request that opens a conversation on c.
func Receive(ctx context.Context, c net.Conn) (*Incoming, error) {
	w := newWire(c)
	m, err := w.read(ctx)
	if err != nil {
		return nil, err
	}
	if m.Type != "request" || m.Request == nil || m.Request.ID == "" {
		return nil, fmt.Errorf("broker: expected a request, got %q", m.Type)
	}
	if r := m.Request; r.Yolo {
		// A yolo request is only what it says, wherever it is read: no
		// tool but YoloTool for the policy and "always", and never sudo.
		m.Request = &Request{ID: r.ID, Session: r.Session, Tool: YoloTool, Variant: -1, Cwd: r.Cwd, Yolo: true}
	}
	// The host a request comes from is the receiver's to say (from its
	// connection), never the sender's.
	m.Request.Host = ""
	in := &Incoming{w: w, Req: m.Request, key: m.Key}
	if err := m.Request.Check(); err != nil {
		// Refused with the reason, for the asker to see, and never shown.
		in.Answer(Answer{Decision: Deny, Reason: strings.TrimPrefix(err.Error(), "broker: ")})
		return nil, err
	}
	return in, nil
}

// Answer sends the elevation gate's answer.
func (in *Incoming) Answer(a Answer) error {
	return in.w.write(&message{Type: "answer", ID: in.Req.ID, Answer: &a})
}

// AttemptError is a password ask refused. Next refuses one numbered
// outside 1 to MaxPasswordAttempts; Converse, which counts a request's
// asks itself, refuses one that is not the next of its request, and any
// for a request that is not sudo.
type AttemptError struct {
	Attempt int // as the asker numbered it
	// Want is the number the answerer's own count expected next
	// (MaxPasswordAttempts+1: none is left); 0 where nothing counts.
	Want int
	// NotSudo: the request is not sudo, so it has no password to ask.
	NotSudo bool
}

func (e *AttemptError) Error() string { return "broker: " + e.Reason() }

// Reason says why the ask was refused, for the asker.
func (e *AttemptError) Reason() string {
	switch {
	case e.NotSudo:
		return "a password was asked for a request that is not sudo"
	case e.Want > MaxPasswordAttempts:
		return fmt.Sprintf("password ask %d refused: the sudo password was already asked %d times for this request, the most it is asked", e.Attempt, MaxPasswordAttempts)
	case e.Want > 0:
		return fmt.Sprintf("password ask %d refused: the next ask of this request is %d (asks are numbered 1 to %d, in turn)", e.Attempt, e.Want, MaxPasswordAttempts)
	}
	return fmt.Sprintf("password ask %d refused: asks are numbered 1 to %d", e.Attempt, MaxPasswordAttempts)
}

// Next waits for the asker's next message: a password ask (attempt > 0)
// or the end (attempt 0, with the result). It checks an ask's number is
// in range (*AttemptError), not that it is the next one: the answering
// side counts its asks itself.
func (in *Incoming) Next(ctx context.Context) (attempt int, problem, result string, err error) {
	m, err := in.w.read(ctx)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, "", "closed", nil
		}
		return 0, "", "", err
	}
	if m.ID != in.Req.ID {
		return 0, "", "", fmt.Errorf("%w (expected %s, got %q)", ErrMismatch, in.Req.ID, m.ID)
	}
	switch m.Type {
	case "password":
		if m.Attempt < 1 || m.Attempt > MaxPasswordAttempts {
			return 0, "", "", &AttemptError{Attempt: m.Attempt}
		}
		return m.Attempt, m.Problem, "", nil
	case "result":
		return 0, "", m.Result, nil
	}
	return 0, "", "", fmt.Errorf("broker: unexpected %q", m.Type)
}

// Secret sends the password, then zeroes it.
func (in *Incoming) Secret(pw []byte) error {
	defer Zero(pw)
	return in.w.write(&message{Type: "secret", ID: in.Req.ID, Secret: pw})
}

// Close closes the connection.
func (in *Incoming) Close() error { return in.w.c.Close() }
