package gate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/broker/gate"
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
	gate     *gate.Gate
	gateSock string
	desk     *scripted
}

func newLab(t *testing.T, withBroker bool) *lab {
	dir := t.TempDir()
	l := &lab{gate: gate.New(nil), gateSock: filepath.Join(dir, "elevate"), desk: &scripted{decision: broker.Once}}
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
	waitFor(t, "the request to be parked", func() bool { return len(l.gate.Pending()) == 1 })
	id := l.gate.Pending()[0].ID
	if err := l.gate.Decide(id, "maybe"); err == nil {
		t.Error("a bad decision was accepted")
	}
	if err := l.gate.Decide(id, "approve"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.ans.Decision != broker.Once {
		t.Errorf("after approve: %+v %v", r.ans, r.err)
	}
	// Approved, a sudo request waits for its password, and takes no
	// second approval (TestGatePasswordAtHost has the rest).
	if err := l.gate.Decide(id, "approve"); err == nil {
		t.Error("a second decision was accepted")
	}

	// nobroker=deny denies at once; a short timeout denies a parked one.
	l.gate.SetPolicy(gate.HostPolicy{NoBroker: gate.DenyNow, Timeout: time.Minute})
	if _, ans, _ := l.ask(t, &broker.Request{Session: "s", Tool: "fix"}); ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "no desktop broker") {
		t.Errorf("nobroker=deny: %+v", ans)
	}
	l.gate.SetPolicy(gate.HostPolicy{NoBroker: gate.Park, Timeout: 100 * time.Millisecond})
	if _, ans, _ := l.ask(t, &broker.Request{Session: "s", Tool: "fix"}); ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "within 100ms") {
		t.Errorf("timeout: %+v", ans)
	}
}

func TestParseHostPolicy(t *testing.T) {
	p, err := gate.ParseHostPolicy("nobroker=deny timeout=90s", gate.HostPolicy{NoBroker: gate.Park, Timeout: time.Minute})
	if err != nil || p.NoBroker != gate.DenyNow || p.Timeout != 90*time.Second {
		t.Errorf("%+v %v", p, err)
	}
	for _, bad := range []string{"nobroker=maybe", "timeout=-1s", "colour=red", "deny"} {
		if _, err := gate.ParseHostPolicy(bad, p); err == nil {
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
	waitFor(t, "the first to park", func() bool { return len(l.gate.Pending()) >= 1 })
	waitFor(t, "the identical ones to join", func() bool { return gate.ParkedWaiters(l.gate) == 10 })
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
	if capped != 3 || len(l.gate.Pending()) != gate.MaxParkedPerSession {
		t.Fatalf("capped %d, pending %d: want 3 capped and %d waiting", capped, len(l.gate.Pending()), gate.MaxParkedPerSession)
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

// passwordLab is a gate with no desktop broker, whose events and log are
// kept (at debug level) to be searched for a password.
type passwordLab struct {
	*lab
	mu     sync.Mutex
	events []string
	notify chan string // each event, as it is published
	log    bytes.Buffer
}

func newPasswordLab(t *testing.T) *passwordLab {
	l := &passwordLab{notify: make(chan string, 100)}
	logw := writerFunc(func(b []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.log.Write(b)
	})
	g := gate.New(slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug})))
	g.Publish = func(topic, data string) {
		ev := topic + " " + data
		l.mu.Lock()
		l.events = append(l.events, ev)
		l.mu.Unlock()
		l.notify <- ev
	}
	l.lab = &lab{gate: g, gateSock: filepath.Join(t.TempDir(), "elevate")}
	gl, err := net.Listen("unix", l.gateSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	go g.Serve(gl)
	return l
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// await waits for the event ev, passing over others.
func (l *passwordLab) await(t *testing.T, ev string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-l.notify:
			if got == ev {
				return
			}
		case <-timeout:
			t.Fatalf("no event %q; events %q", ev, l.seen())
		}
	}
}

func (l *passwordLab) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// text reads the request's entry, which must be listed.
func (l *passwordLab) text(t *testing.T, id string) string {
	t.Helper()
	text, ok := l.gate.PendingText(id)
	if !ok || !slices.ContainsFunc(l.gate.Pending(), func(r *broker.Request) bool { return r.ID == id }) {
		t.Fatalf("request %s is not listed", id)
	}
	return text
}

// askAsync asks for req, as a session's toolsrv does, and delivers the
// conversation once the gate answers.
func (l *passwordLab) askAsync(t *testing.T, req *broker.Request) <-chan *broker.Conversation {
	ch := make(chan *broker.Conversation, 1)
	go func() {
		c, err := net.Dial("unix", l.gateSock)
		if err != nil {
			t.Error(err)
			ch <- nil
			return
		}
		cv, ans, err := broker.Ask(context.Background(), c, req)
		if err != nil || ans.Decision != broker.Once {
			t.Errorf("asking for %s: %+v %v", req.Tool, ans, err)
			ch <- nil
			return
		}
		ch <- cv
	}()
	return ch
}

func answered(t *testing.T, ch <-chan *broker.Conversation) *broker.Conversation {
	t.Helper()
	select {
	case cv := <-ch:
		if cv == nil {
			t.FailNow()
		}
		return cv
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not answered")
		return nil
	}
}

type pwResult struct {
	pw  []byte
	err error
}

// sudoAsks asks for the password, the attempt-th time, as toolsrv does
// when sudo wants one.
func sudoAsks(cv *broker.Conversation, attempt int, problem string) <-chan pwResult {
	ch := make(chan pwResult, 1)
	go func() {
		pw, err := cv.Password(context.Background(), attempt, problem)
		ch <- pwResult{pw, err}
	}()
	return ch
}

func got(t *testing.T, ch <-chan pwResult) pwResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the asker got no password and no denial")
		return pwResult{}
	}
}

func isZero(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }

// TestGatePasswordAtHost: a sudo request approved through bypass/pending,
// with no desktop to give the password, is given it there: the entry
// stays, saying it waits for sudo to ask; a password written before sudo
// asks is handed over when it does; a wrong one is asked for again and
// the entry says so; the right one reaches the asker. The passwords are
// in no event, log line, entry text or error, and the buffers the gate
// was given are zeroed.
func TestGatePasswordAtHost(t *testing.T) {
	l := newPasswordLab(t)
	wrong, right := "wrong-"+broker.NewID(), "right-"+broker.NewID()
	var shown []string // every text and error a person could see
	req := &broker.Request{ID: broker.NewID(), Session: "s", Agent: "a1", Tool: "fix_nginx", Executable: "/x", Cwd: "/", Sudo: true}
	asked := l.askAsync(t, req)
	l.await(t, "bypass.pending "+req.ID+" fix_nginx")
	text := l.text(t, req.ID)
	if !strings.Contains(text, "write approve, always or deny") || strings.Contains(text, "password:") {
		t.Errorf("before approval the entry reads:\n%s", text)
	}
	early := []byte(wrong)
	err := l.gate.Password(context.Background(), req.ID, early)
	if err == nil || !isZero(early) {
		t.Errorf("a password before the approval: %v, buffer %q: want refused and zeroed", err, early)
	}
	shown = append(shown, text, fmt.Sprint(err))

	if err := l.gate.Decide(req.ID, "approve"); err != nil {
		t.Fatal(err)
	}
	cv := answered(t, asked)
	defer cv.Close("ran")
	text = l.text(t, req.ID)
	if !strings.Contains(text, "approved: waiting for sudo to ask for the password") || !strings.Contains(text, "password: write 'password SECRET' to this file") {
		t.Errorf("approved, before sudo asks, the entry reads:\n%s", text)
	}
	shown = append(shown, text)

	// Written before sudo asks: handed over when it does.
	first := []byte(wrong)
	given := make(chan error, 1)
	go func() { given <- l.gate.Password(context.Background(), req.ID, first) }()
	r := got(t, sudoAsks(cv, 1, ""))
	if r.err != nil || string(r.pw) != wrong {
		t.Fatalf("sudo's first ask got %q %v", r.pw, r.err)
	}
	if err := <-given; err != nil {
		t.Fatal(err)
	}
	if !isZero(first) {
		t.Errorf("the password written is still in the buffer the gate was given: %q", first)
	}
	// While sudo checks it, nothing waits for a person.
	if _, ok := l.gate.PendingText(req.ID); ok {
		t.Error("the entry is listed while sudo checks the password")
	}

	// Wrong: sudo asks again, and the entry says so.
	second := sudoAsks(cv, 2, "wrong password")
	l.await(t, "bypass.password "+req.ID+" 2")
	text = l.text(t, req.ID)
	if !strings.Contains(text, "approved: sudo asks for the password again (attempt 2 of 3): wrong password\n") {
		t.Errorf("after a wrong password the entry reads:\n%s", text)
	}
	shown = append(shown, text)
	if err := l.gate.Decide(req.ID, "approve"); err == nil {
		t.Error("an approval was taken while the request waits for its password")
	} else {
		shown = append(shown, err.Error())
	}
	pw := []byte("password " + right + "\n")
	secret, ok := gate.CutPassword(pw)
	if !ok {
		t.Fatal("CutPassword refused a password line")
	}
	if err := l.gate.Password(context.Background(), req.ID, secret); err != nil {
		t.Fatal(err)
	}
	if r := got(t, second); r.err != nil || string(r.pw) != right {
		t.Fatalf("sudo's second ask got %q %v", r.pw, r.err)
	}
	if !isZero(secret) {
		t.Errorf("the second password is still in its buffer: %q", pw)
	}
	cv.Close("ran")
	err = l.gate.Password(context.Background(), req.ID, []byte(right))
	if err == nil {
		t.Error("a password was taken after the request ran")
	}
	shown = append(shown, fmt.Sprint(err))

	// Where a password must never be.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.gate.Shutdown(ctx) // its conversations have ended: the log is whole
	l.mu.Lock()
	log := l.log.String()
	l.mu.Unlock()
	for what, s := range map[string]string{"the events": strings.Join(l.seen(), "\n"), "the log": log, "what a person was shown": strings.Join(shown, "\n")} {
		for _, pw := range []string{wrong, right} {
			if strings.Contains(s, pw) {
				t.Errorf("a password is in %s:\n%s", what, s)
			}
		}
	}
	want := []string{"bypass.pending " + req.ID + " fix_nginx", "bypass.decided " + req.ID + " once", "bypass.password " + req.ID + " 1", "bypass.password " + req.ID + " 2"}
	if got := l.seen(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// A deny ends a sudo request waiting for its password, whether sudo asks
// already or not yet; the tool is told why.
func TestGatePasswordDenied(t *testing.T) {
	for _, when := range []string{"asking", "before sudo asks"} {
		t.Run(when, func(t *testing.T) {
			l := newPasswordLab(t)
			req := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "fix", Sudo: true}
			asked := l.askAsync(t, req)
			l.await(t, "bypass.pending "+req.ID+" fix")
			if err := l.gate.Decide(req.ID, "approve"); err != nil {
				t.Fatal(err)
			}
			cv := answered(t, asked)
			defer cv.Close("denied")
			var ask <-chan pwResult
			if when == "asking" {
				ask = sudoAsks(cv, 1, "")
				l.await(t, "bypass.password "+req.ID+" 1")
			}
			if err := l.gate.Decide(req.ID, "deny not as root"); err != nil {
				t.Fatal(err)
			}
			if ask == nil {
				ask = sudoAsks(cv, 1, "")
			}
			if r := got(t, ask); !errors.Is(r.err, broker.ErrDenied) || !strings.Contains(r.err.Error(), "not as root") || r.pw != nil {
				t.Errorf("after deny sudo got %q %v", r.pw, r.err)
			}
			if _, ok := l.gate.PendingText(req.ID); ok {
				t.Error("a denied request is still listed")
			}
		})
	}
}

// A sudo request approved without waiting in bypass/pending (its tool
// approved always, or identical to one approved there) is listed only
// when sudo asks for a password, and gets its own: one whom sudo asks
// nothing (NOPASSWD) is never listed.
func TestGatePasswordListedWhenAsked(t *testing.T) {
	l := newPasswordLab(t)
	l.gate.AllowAlways("fix")
	quiet := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "fix", Sudo: true}
	cv := answered(t, l.askAsync(t, quiet))
	cv.Close("ran") // sudo needed no password
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two identical requests wait on one entry; each gets its own password.
	a := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "other", Sudo: true}
	b := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "other", Sudo: true}
	askedA := l.askAsync(t, a)
	l.await(t, "bypass.pending "+a.ID+" other")
	askedB := l.askAsync(t, b)
	waitFor(t, "the identical request to join", func() bool { return gate.ParkedWaiters(l.gate) == 2 })
	if err := l.gate.Decide(a.ID, "approve"); err != nil {
		t.Fatal(err)
	}
	cvA, cvB := answered(t, askedA), answered(t, askedB)
	defer cvA.Close("ran")
	defer cvB.Close("ran")
	if _, ok := l.gate.PendingText(b.ID); ok {
		t.Error("the identical request is listed before sudo asks for its password")
	}
	askB := sudoAsks(cvB, 1, "")
	l.await(t, "bypass.password "+b.ID+" 1")
	if text := l.text(t, b.ID); !strings.Contains(text, "approved: sudo asks for the password (attempt 1 of 3)\n") {
		t.Errorf("the identical request's entry reads:\n%s", text)
	}
	askA := sudoAsks(cvA, 1, "")
	l.await(t, "bypass.password "+a.ID+" 1")
	if err := l.gate.Password(ctx, b.ID, []byte("pw-b")); err != nil {
		t.Fatal(err)
	}
	if err := l.gate.Password(ctx, a.ID, []byte("pw-a")); err != nil {
		t.Fatal(err)
	}
	if r := got(t, askA); string(r.pw) != "pw-a" {
		t.Errorf("a got %q %v", r.pw, r.err)
	}
	if r := got(t, askB); string(r.pw) != "pw-b" {
		t.Errorf("b got %q %v", r.pw, r.err)
	}
	cvA.Close("ran")
	cvB.Close("ran")
	l.gate.Shutdown(ctx)
	for _, ev := range l.seen() {
		if strings.Contains(ev, quiet.ID) {
			t.Errorf("the request sudo asked nothing of was published: %q", ev)
		}
	}
	if !slices.Contains(l.seen(), "bypass.pending "+b.ID+" other") {
		t.Errorf("the identical request was not published when sudo asked: %q", l.seen())
	}
}

// A daemon that stops denies a request waiting for its password, and
// tells a writer waiting to give one.
func TestGatePasswordShutdown(t *testing.T) {
	l := newPasswordLab(t)
	req := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "fix", Sudo: true}
	asked := l.askAsync(t, req)
	l.await(t, "bypass.pending "+req.ID+" fix")
	if err := l.gate.Decide(req.ID, "approve"); err != nil {
		t.Fatal(err)
	}
	cv := answered(t, asked)
	defer cv.Close("denied")
	ask := sudoAsks(cv, 1, "")
	l.await(t, "bypass.password "+req.ID+" 1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.gate.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// At once, as a parked request is: not when the daemon's context
	// ends, which waits for conversations with a desktop.
	if r := got(t, ask); !errors.Is(r.err, broker.ErrDenied) || r.err.Error() != "denied: "+gate.ErrShutdown.Error() {
		t.Errorf("after shutdown sudo got %q %v", r.pw, r.err)
	}
	if slices.Contains(l.seen(), "bypass.decided "+req.ID+" timeout") {
		t.Error("a shutdown was published as a timeout")
	}
	if err := l.gate.Password(ctx, req.ID, []byte("late")); err == nil {
		t.Error("a password was taken after shutdown")
	}
}

// A request parked in bypass/pending when the daemon stops is denied
// as stopped, and never published as a timeout: Shutdown ends the
// request's context too, and the two may be seen at once.
func TestGateParkedShutdown(t *testing.T) {
	l := newPasswordLab(t)
	req := &broker.Request{ID: broker.NewID(), Session: "s", Tool: "fix"}
	done := make(chan broker.Answer, 1)
	go func() {
		c, err := net.Dial("unix", l.gateSock)
		if err != nil {
			t.Error(err)
			done <- broker.Answer{}
			return
		}
		defer c.Close()
		_, ans, err := broker.Ask(context.Background(), c, req)
		if err != nil {
			t.Error(err)
		}
		done <- ans
	}()
	l.await(t, "bypass.pending "+req.ID+" fix")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.gate.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case ans := <-done:
		if ans.Decision != broker.Deny || ans.Reason != gate.ErrShutdown.Error() {
			t.Errorf("parked request after shutdown: %+v", ans)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked request was left unanswered")
	}
	if slices.Contains(l.seen(), "bypass.decided "+req.ID+" timeout") {
		t.Error("a shutdown was published as a timeout")
	}
}

func TestCutPassword(t *testing.T) {
	for _, c := range []struct {
		in   string
		pw   string
		isPw bool
	}{
		{"password hunter2", "hunter2", true},
		{"password hunter2\n", "hunter2", true},
		{"password  two spaces \n", " two spaces ", true}, // the rest of the line, as written
		{"password a\n\n", "a\n", true},                   // one newline only: Password refuses the rest
		{"password", "", true},
		{"password\n", "", true},
		{"passwordx", "", false},
		{"approve", "", false},
		{" password x", "", false},
	} {
		pw, ok := gate.CutPassword([]byte(c.in))
		if ok != c.isPw || string(pw) != c.pw {
			t.Errorf("CutPassword(%q) = %q, %v; want %q, %v", c.in, pw, ok, c.pw, c.isPw)
		}
	}
}
