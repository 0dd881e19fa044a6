package desktop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ollie/broker"
	"ollie/internal/await"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func budgetReq(host, tool string) *broker.Request {
	return &broker.Request{ID: broker.NewID(), Host: host, Session: "s", Tool: tool, Executable: "/bin/" + tool, Cwd: "/"}
}

// TestBudgetRate: PerMinute requests of a host are put to a person in
// any minute, the next refused with when to ask again; a minute after
// the first the host has one again; another host's budget is its own;
// a request nobody could be asked about costs nothing.
func TestBudgetRate(t *testing.T) {
	type step struct {
		at     time.Duration // since the start
		host   string
		asked  bool // the person was asked (false: nobody could be)
		refuse bool
		retry  time.Duration // when refused
	}
	tests := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"default: three a minute", Limits{}, []step{
			{at: 0, host: "h1", asked: true},
			{at: time.Second, host: "h1", asked: true},
			{at: 2 * time.Second, host: "h1", asked: true},
			{at: 3 * time.Second, host: "h1", refuse: true, retry: 57 * time.Second},
			{at: 4 * time.Second, host: "h2", asked: true}, // its own budget
			{at: 59 * time.Second, host: "h1", refuse: true, retry: time.Second},
			{at: 60 * time.Second, host: "h1", asked: true}, // the first is a minute old
			{at: 60 * time.Second, host: "h1", refuse: true, retry: time.Second},
			{at: 62 * time.Second, host: "h1", asked: true},
		}},
		{"one a minute", Limits{PerMinute: 1}, []step{
			{at: 0, host: "h1", asked: true},
			{at: 30 * time.Second, host: "h1", refuse: true, retry: 30 * time.Second},
			{at: 60 * time.Second, host: "h1", asked: true},
		}},
		{"nobody asked costs nothing", Limits{PerMinute: 1}, []step{
			{at: 0, host: "h1", asked: false},
			{at: time.Second, host: "h1", asked: true},
			{at: 2 * time.Second, host: "h1", refuse: true, retry: 59 * time.Second},
		}},
		{"no limit", Limits{PerMinute: -1}, []step{
			{at: 0, host: "h1", asked: true}, {at: 0, host: "h1", asked: true},
			{at: 0, host: "h1", asked: true}, {at: 0, host: "h1", asked: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1e9, 0)}
			start := clock.Now()
			g := &Budget{Limits: func() Limits { return tc.limits }, Now: clock.Now}
			refused := 0
			for i, s := range tc.steps {
				clock.advance(start.Add(s.at).Sub(clock.Now()))
				release, err := g.Admit(context.Background(), budgetReq(s.host, fmt.Sprintf("t%d", i)))
				if s.refuse {
					refused++
					var over *OverBudgetError
					if !errors.As(err, &over) || !errors.Is(err, ErrOverBudget) {
						t.Fatalf("step %d: %v, want refused over the budget", i, err)
					}
					if over.Retry != s.retry {
						t.Errorf("step %d: ask again in %v, want %v", i, over.Retry, s.retry)
					}
					if !strings.Contains(err.Error(), "the desktop's limit for this host") {
						t.Errorf("step %d: the host is told %q", i, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v, want admitted", i, err)
				}
				release(s.asked)
			}
			if got := g.Refused("h1"); got != refused {
				t.Errorf("Refused(h1) = %d, want %d", got, refused)
			}
		})
	}
}

// TestBudgetAtOnce: with AtOnce 1 a host's second request waits until
// its first is answered, then takes its place; one the same as the one
// at the person joins it and costs nothing; a waiting request whose
// context ends leaves, and another host is never held up.
func TestBudgetAtOnce(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	g := &Budget{Limits: func() Limits { return Limits{PerMinute: 3, AtOnce: 1} }, Now: clock.Now}
	ctx := context.Background()

	first := budgetReq("h1", "a")
	release1, err := g.Admit(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	// The same again, with a fresh id: it joins the first.
	same := *first
	same.ID = broker.NewID()
	releaseSame, err := g.Admit(ctx, &same)
	if err != nil {
		t.Fatalf("the same request: %v", err)
	}
	// Another host is not held up.
	releaseOther, err := g.Admit(ctx, budgetReq("h2", "a"))
	if err != nil {
		t.Fatalf("another host: %v", err)
	}
	releaseOther(true)

	// A second request of h1 waits; one whose context ends leaves.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := g.Admit(short, budgetReq("h1", "b")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second request while the first is at the person: %v, want it to wait until its context ends", err)
	}
	got := make(chan func(bool), 1)
	go func() {
		release, err := g.Admit(ctx, budgetReq("h1", "c"))
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	select {
	case <-got:
		t.Fatal("a second request was admitted while the first is at the person")
	case <-time.After(50 * time.Millisecond):
	}
	release1(true)
	select {
	case <-got:
		t.Fatal("admitted while the same request that joined the first is still at the person")
	case <-time.After(50 * time.Millisecond):
	}
	releaseSame(true)
	var release3 func(bool)
	select {
	case release3 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request never took the place")
	}
	// a, then c (b left before it was asked, and gave its cost back), so one is left.
	release3(true)
	r, err := g.Admit(ctx, budgetReq("h1", "d"))
	if err != nil {
		t.Fatalf("the third of the minute: %v", err)
	}
	r(true)
	if _, err := g.Admit(ctx, budgetReq("h1", "e")); !errors.Is(err, ErrOverBudget) {
		t.Errorf("the fourth of the minute: %v, want over the budget", err)
	}
}

// TestBudgetNotice: one notice per burst of refusals, with the count so
// far; a minute without a refusal ends a burst, and the next one is told
// again, its count the host's refusals in all.
func TestBudgetNotice(t *testing.T) {
	tests := []struct {
		name    string
		gaps    []time.Duration // between refused requests, after the budget is spent
		notices []int           // the counts told
	}{
		{"one burst", []time.Duration{0, time.Second, time.Second, 10 * time.Second}, []int{1}},
		{"a steady stream is one burst", []time.Duration{0, 50 * time.Second, 50 * time.Second, 50 * time.Second}, []int{1}},
		{"two bursts", []time.Duration{0, time.Second, 61 * time.Second, time.Second}, []int{1, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1e9, 0)}
			var notices []Notice
			// No limit of prompts can be reached this way but by the
			// refusals themselves: the budget is one, taken first.
			g := &Budget{Limits: func() Limits { return Limits{PerMinute: 1, AtOnce: -1} }, Now: clock.Now,
				NoticeDelay: -1, Notice: func(n Notice) { notices = append(notices, n) }}
			hold := func() {
				// Keep the host's one prompt of the minute taken.
				g.mu.Lock()
				h := g.host("h7")
				h.began = []time.Time{clock.Now()}
				g.mu.Unlock()
			}
			for _, gap := range tc.gaps {
				clock.advance(gap)
				hold()
				if _, err := g.Admit(context.Background(), budgetReq("h7", "t")); !errors.Is(err, ErrOverBudget) {
					t.Fatalf("%v, want refused", err)
				}
			}
			var counts []int
			for _, n := range notices {
				counts = append(counts, n.Refused)
				if n.Host != "h7" || n.PerMinute != 1 {
					t.Errorf("notice %+v", n)
				}
			}
			if fmt.Sprint(counts) != fmt.Sprint(tc.notices) {
				t.Errorf("notices with counts %v, want %v", counts, tc.notices)
			}
		})
	}
	text := Notice{Host: "h7", Refused: 47, PerMinute: 3}.Text()
	for _, want := range []string{"h7", "47 requests", "3 prompts a minute", "prompts_per_minute", "broker-policy.yaml"} {
		if !strings.Contains(text, want) {
			t.Errorf("the notice does not say %q: %s", want, text)
		}
	}
}

// countingPerson answers every approval after pace, denying, and counts
// the prompts by host.
type countingPerson struct {
	pace time.Duration

	mu     sync.Mutex
	asked  map[string]int
	asking map[string]int // at once, by host
	most   map[string]int
}

func (p *countingPerson) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	p.mu.Lock()
	p.asked[req.Host]++
	p.asking[req.Host]++
	p.most[req.Host] = max(p.most[req.Host], p.asking[req.Host])
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.asking[req.Host]--
		p.mu.Unlock()
	}()
	select {
	case <-time.After(p.pace):
		return broker.Answer{Decision: broker.Deny, Reason: "the person said no"}, nil
	case <-ctx.Done():
		return broker.Answer{}, context.Cause(ctx)
	}
}

func (p *countingPerson) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	return nil, broker.ErrDenied
}

func (p *countingPerson) count(host string) (asked, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked[host], p.most[host]
}

// TestBudgetHostileHost drives the desktop's broker over its real
// sockets as a host holding its broker key would (issue 29): 50 sudo
// requests with fresh ids, one every 20 ms, in sessions of their own.
// The person is asked at most the budget's 3 times, one at a time, the
// desktop gets one notice naming the host, the rest are denied at once
// saying why, and an honest host asking in the middle of it is answered
// within 2 s. Before the budget every one of the 50 was asked.
func TestBudgetHostileHost(t *testing.T) {
	person := &countingPerson{pace: 100 * time.Millisecond, asked: map[string]int{}, asking: map[string]int{}, most: map[string]int{}}
	var notices atomic.Int32
	var notice atomic.Value
	b := &Broker{Approver: &Queue{Approver: person}, Budget: &Budget{NoticeDelay: 200 * time.Millisecond, Notice: func(n Notice) {
		notices.Add(1)
		notice.Store(n)
	}}}
	key := []byte("0123456789abcdef0123456789abcdef")
	dir := t.TempDir()
	listen := func(host string) string {
		sock := filepath.Join(dir, host)
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go ServeApprovals(b, host, l, key)
		return sock
	}
	bad, good := listen("h7"), listen("h5")
	ask := func(sock string, req *broker.Request) (broker.Answer, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return broker.Answer{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cv, ans, err := broker.AskKeyed(ctx, c, req, key)
		if err == nil {
			cv.Close("denied")
		}
		return ans, err
	}

	const flood = 50
	var wg sync.WaitGroup
	var overBudget, byPerson atomic.Int32
	start := time.Now()
	for i := range flood {
		wg.Go(func() {
			req := &broker.Request{ID: broker.NewID(), Host: "h5", Session: fmt.Sprintf("s%d", i), Tool: "root_tool",
				Executable: "/bin/sh", Cwd: "/", Sudo: true}
			ans, err := ask(bad, req)
			switch {
			case err != nil:
				t.Errorf("request %d: %v", i, err)
			case ans.Decision == broker.Deny && strings.Contains(ans.Reason, "the desktop's limit for this host"):
				overBudget.Add(1)
			case ans.Reason == "the person said no":
				byPerson.Add(1)
			default:
				t.Errorf("request %d: %+v", i, ans)
			}
		})
		if i == flood/2 {
			// The honest host, in the middle of the flood.
			asked := time.Now()
			ans, err := ask(good, &broker.Request{ID: broker.NewID(), Session: "web", Tool: "fix_nginx", Executable: "/bin/fix", Cwd: "/", Sudo: true})
			took := time.Since(asked)
			t.Logf("figure: the honest host answered %v after asking, in the middle of %d requests", took.Round(time.Millisecond), flood)
			if err != nil || ans.Reason != "the person said no" {
				t.Errorf("the honest host: %+v, %v; want the person's answer", ans, err)
			}
			if took > 2*time.Second {
				t.Errorf("the honest host was answered %v after asking, want within 2s", took)
			}
		}
		// The pace is the point: a flood that keeps coming, one every 20 ms.
		await.For(t.Context(), 20*time.Millisecond)
	}
	wg.Wait()
	t.Logf("figure: %d requests in %v: %d put to the person, %d denied over the budget", flood, time.Since(start).Round(time.Millisecond), byPerson.Load(), overBudget.Load())
	waitUntil(t, "the notice", func() bool { return notices.Load() > 0 })
	// The silence is the point: a second notice, were one due, would
	// come within the NoticeDelay of 200 ms.
	await.For(t.Context(), 300*time.Millisecond)
	asked, most := person.count("h7")
	if asked > DefaultPromptsPerMinute || int(byPerson.Load()) != asked {
		t.Errorf("the person was asked %d times about h7 (%d answers), want at most %d", asked, byPerson.Load(), DefaultPromptsPerMinute)
	}
	if most > 1 {
		t.Errorf("%d of h7's prompts at once, want 1", most)
	}
	if int(overBudget.Load()) != flood-asked {
		t.Errorf("%d denied over the budget, want the %d not asked", overBudget.Load(), flood-asked)
	}
	if n := notices.Load(); n != 1 {
		t.Errorf("%d notices, want 1", n)
	}
	if n := notice.Load().(Notice); n.Host != "h7" || n.Refused < 1 {
		t.Errorf("the notice: %+v", n)
	}
	if r := b.Refused("h7"); r.Budget != int(overBudget.Load()) {
		t.Errorf("Refused(h7).Budget = %d, want %d", r.Budget, overBudget.Load())
	}
}
