package desktop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ollie/broker"
	"ollie/internal/await"
)

// queueScript is an approver that answers from a script once let through by
// step, and records what it was asked and how many prompts were showing
// at once.
type queueScript struct {
	step    chan struct{} // one receive (or its close) lets one prompt answer
	started chan string   // each prompt's name as it is shown

	mu        sync.Mutex
	calls     []string
	active    int
	maxActive int
	secrets   int
}

func newQueueScript() *queueScript {
	return &queueScript{step: make(chan struct{}), started: make(chan string, 1000)}
}

// decisionFor is the script: a decision that depends on the request, so
// that a caller handed another request's answer is noticed.
func decisionFor(req *broker.Request) broker.Decision {
	return []broker.Decision{broker.Once, broker.Always, broker.Deny}[len(req.Tool)%3]
}

func (s *queueScript) begin(name string) {
	s.mu.Lock()
	s.calls = append(s.calls, name)
	s.active++
	s.maxActive = max(s.maxActive, s.active)
	s.mu.Unlock()
	s.started <- name
}

func (s *queueScript) end() {
	s.mu.Lock()
	s.active--
	s.mu.Unlock()
}

func (s *queueScript) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	s.begin("approve " + req.ID)
	defer s.end()
	select {
	case <-s.step:
		return broker.Answer{Decision: decisionFor(req), Reason: "script: " + req.Tool}, nil
	case <-ctx.Done():
		return broker.Answer{}, context.Cause(ctx)
	}
}

func (s *queueScript) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	s.begin("password " + req.ID)
	defer s.end()
	select {
	case <-s.step:
		s.mu.Lock()
		s.secrets++
		n := s.secrets
		s.mu.Unlock()
		return []byte(fmt.Sprintf("secret-%d", n)), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (s *queueScript) callList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *queueScript) waitStarted(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-s.started:
		if got != want {
			t.Fatalf("prompt %q shown, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("prompt %q never shown", want)
	}
}

// waiting is how many callers are waiting in q, for tests to know a
// burst has arrived.
func (q *Queue) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	if q.showing != nil {
		n += q.showing.waiters
	}
	for _, h := range q.hosts {
		for _, e := range h.waiting {
			n += e.waiters
		}
	}
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, 10*time.Second, what, cond)
}

// TestQueueBurst sends 200 requests at once: 20 distinct ones, each 10
// times, from three sessions, one of which has more distinct requests
// than the cap. Every caller must get an answer, the right one, and the
// person must be asked once for each distinct request that was not
// capped, one prompt at a time.
func TestQueueBurst(t *testing.T) {
	s := newQueueScript()
	q := &Queue{Approver: s}
	distinct := map[string]int{"s1": 12, "s2": 5, "s3": 3}
	type call struct {
		req *broker.Request
		ans broker.Answer
		err error
	}
	var reqs []*broker.Request
	for sess, n := range distinct {
		for i := range n {
			for copy := range 10 {
				reqs = append(reqs, &broker.Request{
					ID: fmt.Sprintf("%s-%d-%d", sess, i, copy), Host: "web1", Session: sess,
					Tool: strings.Repeat("t", i+1), Executable: "/bin/true", Cwd: "/",
				})
			}
		}
	}
	if len(reqs) != 200 {
		t.Fatalf("%d requests, want 200", len(reqs))
	}

	results := make(chan call, len(reqs))
	var returned atomic.Int32
	for _, r := range reqs {
		go func() {
			ans, err := q.Approve(context.Background(), r)
			returned.Add(1)
			results <- call{r, ans, err}
		}()
	}
	// Nothing is answered until the whole burst has arrived: the capped
	// have returned, the rest are waiting.
	waitUntil(t, "the burst arrived", func() bool { return int(returned.Load())+q.waiting() == len(reqs) })
	if p := q.Pending(); len(p) != 16 {
		t.Errorf("%d distinct requests pending, want 8+5+3", len(p))
	}
	close(s.step)

	askedBySession := map[string]map[string]bool{}
	cappedBySession := map[string]map[string]bool{}
	for range reqs {
		c := <-results
		if c.err != nil {
			t.Fatalf("%s: %v", c.req.ID, c.err)
		}
		key := c.req.Tool
		if strings.HasPrefix(c.ans.Reason, "too many pending approval requests") {
			want := fmt.Sprintf("too many pending approval requests for session %s (cap 8); try again later", c.req.Session)
			if c.ans.Decision != broker.Deny || c.ans.Reason != want {
				t.Errorf("%s: capped with %+v, want deny %q", c.req.ID, c.ans, want)
			}
			if cappedBySession[c.req.Session] == nil {
				cappedBySession[c.req.Session] = map[string]bool{}
			}
			cappedBySession[c.req.Session][key] = true
			continue
		}
		if c.ans.Decision != decisionFor(c.req) || c.ans.Reason != "script: "+c.req.Tool {
			t.Errorf("%s: answer %+v belongs to another request", c.req.ID, c.ans)
		}
		if askedBySession[c.req.Session] == nil {
			askedBySession[c.req.Session] = map[string]bool{}
		}
		askedBySession[c.req.Session][key] = true
	}

	for sess, n := range distinct {
		asked, capped := len(askedBySession[sess]), len(cappedBySession[sess])
		if asked != min(n, 8) || asked+capped != n {
			t.Errorf("session %s: %d distinct asked, %d capped; want %d asked, %d capped", sess, asked, capped, min(n, 8), n-min(n, 8))
		}
		for k := range askedBySession[sess] {
			if cappedBySession[sess][k] {
				t.Errorf("session %s: request %q was both asked and capped", sess, k)
			}
		}
	}
	calls := s.callList()
	if len(calls) != 16 {
		t.Errorf("the person was asked %d times, want 16 (the distinct requests not capped)", len(calls))
	}
	if s.maxActive != 1 {
		t.Errorf("%d prompts showing at once, want 1", s.maxActive)
	}
	if p := q.Pending(); len(p) != 0 {
		t.Errorf("%d still pending after every answer", len(p))
	}
	// The cap is on what is waiting: once answered, the session may ask again.
	again := &broker.Request{ID: "again", Host: "web1", Session: "s1", Tool: "tttttttttttttttttttt"}
	if ans, err := q.Approve(context.Background(), again); err != nil || ans.Decision != decisionFor(again) {
		t.Errorf("s1 after its burst was answered: %+v, %v", ans, err)
	}
}

func queueReq(id, session, tool string) *broker.Request {
	return &broker.Request{ID: id, Host: "web1", Session: session, Tool: tool, Executable: "/bin/" + tool, Cwd: "/"}
}

// TestQueueOrder checks one prompt at a time, in arrival order, with a
// password going before the approvals still waiting, and Pending showing
// the queue.
func TestQueueOrder(t *testing.T) {
	s := newQueueScript()
	q := &Queue{Approver: s}
	var wg sync.WaitGroup
	approve := func(r *broker.Request) {
		wg.Go(func() {
			if _, err := q.Approve(context.Background(), r); err != nil {
				t.Error(err)
			}
		})
	}
	approve(queueReq("A", "s1", "a"))
	s.waitStarted(t, "approve A")
	for _, id := range []string{"B", "C", "D"} {
		approve(queueReq(id, "s"+id, strings.ToLower(id)))
		waitUntil(t, id+" queued", func() bool { return len(q.Pending()) == int(id[0]-'A')+1 })
	}
	var pw []byte
	wg.Go(func() {
		var err error
		pw, err = q.Password(context.Background(), queueReq("A", "s1", "a"), 1, "")
		if err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, "password queued", func() bool { return len(q.Pending()) == 5 })
	var ids []string
	for _, r := range q.Pending() {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "A,B,C,D,A" {
		t.Errorf("Pending: %s, want A,B,C,D,A", got)
	}
	for _, want := range []string{"password A", "approve B", "approve C", "approve D"} {
		s.step <- struct{}{}
		s.waitStarted(t, want)
	}
	s.step <- struct{}{}
	wg.Wait()
	if string(pw) != "secret-1" {
		t.Errorf("password %q, want secret-1", pw)
	}
}

// TestQueuePasswordsNotShared asks for the password of two identical
// requests at once: each must be asked, and each gets its own.
func TestQueuePasswordsNotShared(t *testing.T) {
	s := newQueueScript()
	q := &Queue{Approver: s}
	got := make(chan string, 2)
	for _, id := range []string{"P1", "P2"} {
		go func() {
			r := queueReq(id, "s1", "system_logs")
			pw, err := q.Password(context.Background(), r, 1, "")
			if err != nil {
				t.Error(err)
			}
			got <- string(pw)
		}()
	}
	close(s.step)
	a, b := <-got, <-got
	if a == b {
		t.Errorf("two requests were handed the same password %q", a)
	}
	if n := len(s.callList()); n != 2 {
		t.Errorf("asked %d times for two passwords", n)
	}
}

// TestQueueWithdraw checks what happens when callers stop waiting.
func TestQueueWithdraw(t *testing.T) {
	s := newQueueScript()
	q := &Queue{Approver: s, MaxPerSession: 2}

	// A is being asked; B waits behind it.
	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() { _, err := q.Approve(ctxA, queueReq("A", "s1", "a")); errA <- err }()
	s.waitStarted(t, "approve A")
	ctxB, cancelB := context.WithCancel(context.Background())
	errB := make(chan error, 1)
	go func() { _, err := q.Approve(ctxB, queueReq("B", "s1", "b")); errB <- err }()
	waitUntil(t, "B queued", func() bool { return len(q.Pending()) == 2 })

	// The session is at its cap.
	if ans, _ := q.Approve(context.Background(), queueReq("C", "s1", "c")); ans.Decision != broker.Deny {
		t.Fatalf("third request of a session with cap 2: %+v, want deny", ans)
	}

	// B's caller gives up before B is shown: B leaves the queue, frees
	// its place, and is never asked.
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Errorf("B: %v, want context.Canceled", err)
	}
	if p := q.Pending(); len(p) != 1 || p[0].ID != "A" {
		t.Errorf("Pending after B withdrew: %v", p)
	}

	// A second caller joins A, then A's first caller gives up: the
	// prompt stays for the one still waiting.
	ans2 := make(chan broker.Answer, 1)
	go func() {
		ans, err := q.Approve(context.Background(), queueReq("A2", "s1", "a"))
		if err != nil {
			t.Error(err)
		}
		ans2 <- ans
	}()
	waitUntil(t, "A2 joined A", func() bool { return q.waiting() == 2 })
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Errorf("A: %v, want context.Canceled", err)
	}
	s.step <- struct{}{}
	if a := <-ans2; a.Decision != decisionFor(queueReq("A2", "s1", "a")) {
		t.Errorf("A2 got %+v", a)
	}

	// Everyone waiting for a prompt that is showing gives up: the prompt
	// itself is withdrawn.
	ctxD, cancelD := context.WithCancel(context.Background())
	go func() { q.Approve(ctxD, queueReq("D", "s1", "d")) }()
	s.waitStarted(t, "approve D")
	cancelD()
	waitUntil(t, "D withdrawn", func() bool { return len(q.Pending()) == 0 })
	if got := s.callList(); strings.Join(got, ",") != "approve A,approve D" {
		t.Errorf("asked %v, want A and D only", got)
	}
}

// TestQueueHostsTakeTurns floods the queue with 300 requests from host A,
// each in a session of its own, while host B asks once: B's prompt must
// come right after the one of A's showing when it arrived, and A's
// requests past its cap are denied at once, saying why, and counted.
func TestQueueHostsTakeTurns(t *testing.T) {
	s := newQueueScript()
	q := &Queue{Approver: s}
	var wg sync.WaitGroup
	var capped atomic.Int32
	for i := range 300 {
		wg.Go(func() {
			r := &broker.Request{ID: fmt.Sprintf("A%d", i), Host: "hA", Session: fmt.Sprintf("s%d", i), Tool: "t", Cwd: "/"}
			ans, err := q.Approve(context.Background(), r)
			if err != nil {
				t.Error(err)
			}
			if strings.HasPrefix(ans.Reason, "too many") {
				if want := "too many pending approval requests from host hA (cap 16); try again later"; ans.Reason != want || ans.Decision != broker.Deny {
					t.Errorf("%s: %+v, want deny %q", r.ID, ans, want)
				}
				capped.Add(1)
			}
		})
	}
	waitUntil(t, "A's flood arrived", func() bool { return int(capped.Load())+q.waiting() == 300 })
	if n := q.Refused("hA"); n != 300-16 || int(capped.Load()) != n {
		t.Errorf("Refused(hA) = %d, %d denials seen; want %d", n, capped.Load(), 300-16)
	}
	first := <-s.started
	// A session name is the host's to choose: A's sessions fill nothing
	// of B's, even with the same names.
	bAns := make(chan broker.Answer, 1)
	wg.Go(func() {
		ans, err := q.Approve(context.Background(), &broker.Request{ID: "B", Host: "hB", Session: "s1", Tool: "t", Cwd: "/"})
		if err != nil {
			t.Error(err)
		}
		bAns <- ans
	})
	waitUntil(t, "B queued", func() bool { return len(q.Pending()) == 17 })
	s.step <- struct{}{}
	s.waitStarted(t, "approve B")
	s.step <- struct{}{}
	if a := <-bAns; a.Reason != "script: t" {
		t.Errorf("B: %+v", a)
	}
	close(s.step)
	wg.Wait()
	calls := s.callList()
	if len(calls) != 17 || calls[0] != first || calls[1] != "approve B" {
		t.Errorf("asked %d times, first %v; want A's first, B's, then A's other 15", len(calls), calls[:min(3, len(calls))])
	}
	if n := q.Refused("hB"); n != 0 {
		t.Errorf("Refused(hB) = %d", n)
	}
}

// TestQueueCaps checks the two caps apart: a session's, and its host's
// across sessions, each counting distinct prompts waiting or showing.
func TestQueueCaps(t *testing.T) {
	s := newQueueScript()
	q := &Queue{Approver: s, MaxPerHost: 3, MaxPerSession: 2}
	var wg sync.WaitGroup
	ask := func(id, host, session string) {
		wg.Go(func() {
			q.Approve(context.Background(), &broker.Request{ID: id, Host: host, Session: session, Tool: id, Cwd: "/"})
		})
	}
	deny := func(id, host, session, want string) {
		t.Helper()
		ans, err := q.Approve(context.Background(), &broker.Request{ID: id, Host: host, Session: session, Tool: id, Cwd: "/"})
		if err != nil || ans.Decision != broker.Deny || ans.Reason != want {
			t.Errorf("%s: %+v %v, want deny %q", id, ans, err, want)
		}
	}
	ask("a1", "hA", "s1")
	s.waitStarted(t, "approve a1")
	ask("a2", "hA", "s1")
	waitUntil(t, "a2 queued", func() bool { return len(q.Pending()) == 2 })
	deny("a3", "hA", "s1", "too many pending approval requests for session s1 (cap 2); try again later")
	ask("a4", "hA", "s2")
	waitUntil(t, "a4 queued", func() bool { return len(q.Pending()) == 3 })
	deny("a5", "hA", "s3", "too many pending approval requests from host hA (cap 3); try again later")
	// Another host, and the same session name there, is not capped.
	ask("b1", "hB", "s1")
	waitUntil(t, "b1 queued", func() bool { return len(q.Pending()) == 4 })
	// A request identical to one waiting joins it, over the cap or not.
	ask("a2", "hA", "s1")
	waitUntil(t, "a2 joined", func() bool { return q.waiting() == 5 })
	if q.Refused("hA") != 2 || q.Refused("hB") != 0 {
		t.Errorf("refused: hA %d, hB %d; want 2, 0", q.Refused("hA"), q.Refused("hB"))
	}
	close(s.step)
	wg.Wait()
	if got := strings.Join(s.callList(), ","); got != "approve a1,approve b1,approve a2,approve a4" {
		t.Errorf("asked %s", got)
	}
	if len(q.hosts) != 0 {
		t.Errorf("%d host queues left after every answer", len(q.hosts))
	}
}
