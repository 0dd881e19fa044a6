package broker_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
)

// scripted answers like a person would, and records what it was asked.
type scripted struct {
	mu        sync.Mutex
	decision  broker.Decision
	passwords []string
	asked     []*broker.Request
	pwAsked   []string // the problems
}

func (s *scripted) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := *req
	s.asked = append(s.asked, &cp)
	return broker.Answer{Decision: s.decision}, nil
}

func (s *scripted) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pwAsked = append(s.pwAsked, problem)
	if len(s.passwords) == 0 {
		return nil, broker.ErrDenied
	}
	pw := s.passwords[0]
	s.passwords = s.passwords[1:]
	return []byte(pw), nil
}

// lab is a gate on a socket, and optionally a desktop broker behind it on
// another socket, as ollie-remote forwards it for host "web1".
type lab struct {
	gate     *broker.Gate
	gateSock string
	desk     *scripted
}

func newLab(t *testing.T, withBroker bool) *lab {
	dir := t.TempDir()
	l := &lab{gate: broker.NewGate(nil), gateSock: filepath.Join(dir, "elevate"), desk: &scripted{decision: broker.Once}}
	gl, err := net.Listen("unix", l.gateSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	go l.gate.Serve(gl)
	if withBroker {
		bsock := filepath.Join(dir, "broker")
		bl, err := net.Listen("unix", bsock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bl.Close() })
		b := &desktop.Broker{Approver: l.desk}
		go b.Serve("web1", bl)
		if err := l.gate.Register(bsock); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *lab) ask(t *testing.T, req *broker.Request) (*broker.Conversation, broker.Answer, error) {
	t.Helper()
	c, err := net.Dial("unix", l.gateSock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return broker.Ask(ctx, c, req)
}

func TestGateRelaysToBroker(t *testing.T) {
	l := newLab(t, true)
	l.desk.passwords = []string{"wrong", "right"}
	cv, ans, err := l.ask(t, &broker.Request{Session: "s", Tool: "fix_nginx", Executable: "/x", Cwd: "/", Sudo: true, Host: "db9"})
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("answer %+v %v", ans, err)
	}
	ctx := context.Background()
	pw, err := cv.Password(ctx, 1, "")
	if err != nil || string(pw) != "wrong" {
		t.Fatalf("first password %q %v", pw, err)
	}
	pw, err = cv.Password(ctx, 2, "wrong password")
	if err != nil || string(pw) != "right" {
		t.Fatalf("second password %q %v", pw, err)
	}
	cv.Close("ran")
	if len(l.desk.asked) != 1 || l.desk.asked[0].Host != "web1" {
		t.Errorf("the desktop saw %+v: want host web1 (from the connection), not the claimed db9", l.desk.asked)
	}
	if strings.Join(l.desk.pwAsked, ",") != ",wrong password" {
		t.Errorf("password problems %q", l.desk.pwAsked)
	}
}

func TestGateDenyNeverAsksPassword(t *testing.T) {
	l := newLab(t, true)
	l.desk.decision = broker.Deny
	l.desk.passwords = []string{"pw"}
	_, ans, err := l.ask(t, &broker.Request{Session: "s", Tool: "t", Sudo: true})
	if err != nil || ans.Decision != broker.Deny || ans.Reason == "" {
		t.Fatalf("answer %+v %v", ans, err)
	}
	if len(l.desk.pwAsked) != 0 {
		t.Error("the credential gate was reached after a denial")
	}
}

func TestGateRejectsReplayedID(t *testing.T) {
	l := newLab(t, true)
	req := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "t"}
	cv, ans, err := l.ask(t, req)
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("first: %+v %v", ans, err)
	}
	cv.Close("ran")
	_, ans, err = l.ask(t, &broker.Request{ID: req.ID, Session: "s", Tool: "t"})
	if err != nil || ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "already used") {
		t.Errorf("replayed id: %+v %v", ans, err)
	}
	if len(l.desk.asked) != 1 {
		t.Errorf("the desktop was asked %d times", len(l.desk.asked))
	}
}

// A broker that answers for another request id is rejected by the asker.
func TestMismatchedAnswerRejected(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		in, err := broker.Receive(context.Background(), b)
		if err != nil {
			return
		}
		in.Req.ID = "another"
		in.Answer(broker.Answer{Decision: broker.Once})
	}()
	_, _, err := broker.Ask(context.Background(), a, &broker.Request{Session: "s", Tool: "t"})
	if !errors.Is(err, broker.ErrMismatch) {
		t.Errorf("an answer for another id: %v", err)
	}
	// A secret for another id, after a genuine approval.
	a, b = net.Pipe()
	go func() {
		in, err := broker.Receive(context.Background(), b)
		if err != nil {
			return
		}
		in.Answer(broker.Answer{Decision: broker.Once})
		in.Next(context.Background())
		in.Req.ID = "another"
		in.Secret([]byte("pw"))
	}()
	cv, _, err := broker.Ask(context.Background(), a, &broker.Request{Session: "s", Tool: "t", Sudo: true})
	if err != nil {
		t.Fatal(err)
	}
	if pw, err := cv.Password(context.Background(), 1, ""); !errors.Is(err, broker.ErrMismatch) || pw != nil {
		t.Errorf("a secret for another id: %q %v", pw, err)
	}
}

func TestGateParksWithoutBroker(t *testing.T) {
	l := newLab(t, false)
	type result struct {
		ans broker.Answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, ans, err := l.ask(t, &broker.Request{Session: "s", Tool: "fix", Sudo: true})
		done <- result{ans, err}
	}()
	var id string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if p := l.gate.Pending(); len(p) == 1 {
			id = p[0].ID
			break
		}
	}
	if id == "" {
		t.Fatal("the request was not parked")
	}
	if err := l.gate.Decide(id, "maybe"); err == nil {
		t.Error("a bad decision was accepted")
	}
	if err := l.gate.Decide(id, "approve"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.ans.Decision != broker.Once {
		t.Errorf("after approve: %+v %v", r.ans, r.err)
	}
	if err := l.gate.Decide(id, "deny"); err == nil {
		t.Error("a second decision was accepted")
	}

	// nobroker=deny denies at once; a short timeout denies a parked one.
	l.gate.SetPolicy(broker.HostPolicy{NoBroker: broker.DenyNow, Timeout: time.Minute})
	if _, ans, _ := l.ask(t, &broker.Request{Session: "s", Tool: "fix"}); ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "no desktop broker") {
		t.Errorf("nobroker=deny: %+v", ans)
	}
	l.gate.SetPolicy(broker.HostPolicy{NoBroker: broker.Park, Timeout: 100 * time.Millisecond})
	if _, ans, _ := l.ask(t, &broker.Request{Session: "s", Tool: "fix"}); ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "within 100ms") {
		t.Errorf("timeout: %+v", ans)
	}
}

func TestParseHostPolicy(t *testing.T) {
	p, err := broker.ParseHostPolicy("nobroker=deny timeout=90s", broker.HostPolicy{NoBroker: broker.Park, Timeout: time.Minute})
	if err != nil || p.NoBroker != broker.DenyNow || p.Timeout != 90*time.Second {
		t.Errorf("%+v %v", p, err)
	}
	for _, bad := range []string{"nobroker=maybe", "timeout=-1s", "colour=red", "deny"} {
		if _, err := broker.ParseHostPolicy(bad, p); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Identical parked requests are asked once; a session's distinct ones are
// capped; no decision is lost.
func TestGateParkCoalescesAndCaps(t *testing.T) {
	l := newLab(t, false)
	type result struct {
		i   int
		ans broker.Answer
	}
	results := make(chan result, 30)
	ask := func(i int, req *broker.Request) {
		_, ans, err := l.ask(t, req)
		if err != nil {
			t.Error(err)
		}
		results <- result{i, ans}
	}
	// 10 identical requests, then 10 distinct ones of the same session.
	for i := range 10 {
		go ask(i, &broker.Request{Session: "s", Tool: "same", Args: []byte(`{"a": 1}`)})
	}
	for deadline := time.Now().Add(5 * time.Second); len(l.gate.Pending()) < 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, "the identical ones to join", func() bool { return broker.ParkedWaiters(l.gate) == 10 })
	if n := len(l.gate.Pending()); n != 1 {
		t.Fatalf("%d pending for 10 identical requests", n)
	}
	for i := range 10 {
		go ask(10+i, &broker.Request{Session: "s", Tool: "t" + string(rune('a'+i))})
	}
	capped := 0
	for deadline := time.Now().Add(5 * time.Second); capped < 3 && time.Now().Before(deadline); {
		select {
		case r := <-results:
			if r.ans.Decision != broker.Deny || !strings.Contains(r.ans.Reason, "too many") {
				t.Errorf("request %d answered %+v before any decision", r.i, r.ans)
			}
			capped++
		case <-time.After(50 * time.Millisecond):
		}
	}
	if capped != 3 || len(l.gate.Pending()) != broker.MaxParkedPerSession {
		t.Fatalf("capped %d, pending %d: want 3 capped and %d waiting", capped, len(l.gate.Pending()), broker.MaxParkedPerSession)
	}
	// Answer every one waiting: approve the identical ones, deny the rest.
	for _, r := range l.gate.Pending() {
		d := "deny"
		if r.Tool == "same" {
			d = "approve"
		}
		if err := l.gate.Decide(r.ID, d); err != nil {
			t.Fatal(err)
		}
	}
	approved, denied := 0, 0
	for range 17 {
		select {
		case r := <-results:
			switch {
			case r.i < 10 && r.ans.Decision == broker.Once:
				approved++
			case r.i >= 10 && r.ans.Decision == broker.Deny:
				denied++
			default:
				t.Errorf("request %d: %+v", r.i, r.ans)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a decision was lost")
		}
	}
	if approved != 10 || denied != 7 {
		t.Errorf("approved %d, denied %d", approved, denied)
	}
}
