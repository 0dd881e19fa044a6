package desktop

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ollie/broker"
)

// pacedPerson answers every prompt after pace, and records the order in
// which prompts were shown and when.
type pacedPerson struct {
	pace time.Duration

	mu    sync.Mutex
	shown []shownPrompt
}

type shownPrompt struct {
	host string
	at   time.Time
}

func (p *pacedPerson) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	p.mu.Lock()
	p.shown = append(p.shown, shownPrompt{req.Host, time.Now()})
	p.mu.Unlock()
	select {
	case <-time.After(p.pace):
		return broker.Answer{Decision: broker.Deny, Reason: "paced"}, nil
	case <-ctx.Done():
		return broker.Answer{}, context.Cause(ctx)
	}
}

func (p *pacedPerson) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	return nil, broker.ErrDenied
}

// firstShown is when host's first prompt was shown, and how many prompts
// of other hosts were shown after since and before it.
func (p *pacedPerson) firstShown(host string, since time.Time) (time.Time, int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	others := 0
	for _, s := range p.shown {
		if s.host == host {
			return s.at, others, true
		}
		if !s.at.Before(since) {
			others++
		}
	}
	return time.Time{}, others, false
}

func (p *pacedPerson) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.shown)
}

// TestFloodDelay is the figure in docs/benchmarks.md: host A opens 300
// connections at once, each asking in a session of its own, and once A's
// prompts are showing, host B asks once. A person answering every prompt
// in 10 ms must see B's prompt no later than after the one of A's showing
// when it arrived.
func TestFloodDelay(t *testing.T) {
	person := &pacedPerson{pace: 10 * time.Millisecond}
	b := &Broker{Approver: &Queue{Approver: person}}
	dir := t.TempDir()
	listen := func(host string) string {
		sock := filepath.Join(dir, host)
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go b.Serve(host, l)
		return sock
	}
	sockA, sockB := listen("hA"), listen("hB")
	ask := func(sock string, req *broker.Request) (broker.Answer, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return broker.Answer{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cv, ans, err := broker.Ask(ctx, c, req)
		if err == nil {
			cv.Close("denied")
		}
		return ans, err
	}

	const floodSize = 300
	var flood sync.WaitGroup
	var refused atomic.Int32 // answered without being shown: over a cap
	for i := range floodSize {
		flood.Go(func() {
			ans, err := ask(sockA, &broker.Request{Session: fmt.Sprintf("flood-%d", i), Tool: "t", Executable: "/bin/t", Cwd: "/"})
			if err != nil || ans.Reason != "paced" {
				refused.Add(1)
			}
		})
	}
	waitUntil(t, "A's prompts showing", func() bool { return person.count() >= 3 })
	// The flood has arrived when every request of it is shown, waiting or
	// refused, rather than when their count has stopped growing a while.
	q := b.Approver.(*Queue)
	waiting := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		n := 0
		for _, h := range q.hosts {
			n += len(h.waiting)
		}
		return n
	}
	waitUntil(t, "the whole flood to arrive", func() bool {
		return person.count()+waiting()+int(refused.Load()) >= floodSize
	})
	t.Logf("%d of A's prompts waiting when B asks", len(q.Pending()))
	sent := time.Now()
	if _, err := ask(sockB, &broker.Request{Session: "honest", Tool: "t", Executable: "/bin/t", Cwd: "/"}); err != nil {
		t.Fatalf("B: %v", err)
	}
	at, before, ok := person.firstShown("hB", sent)
	if !ok {
		t.Fatal("B's prompt was never shown")
	}
	t.Logf("B's prompt shown %v after its request, after %d of A's prompts", at.Sub(sent).Round(time.Millisecond), before)
	if before > 1 {
		t.Errorf("B's prompt waited for %d of A's prompts, want at most the one showing", before)
	}
	flood.Wait()
}
