package remote

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/await"
)

// orderedPerson answers each approval after pace and records whose it was.
type orderedPerson struct {
	pace time.Duration
	mu   sync.Mutex
	seen []string // hosts, in the order their prompts were shown
}

func (p *orderedPerson) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	p.mu.Lock()
	p.seen = append(p.seen, req.Host)
	p.mu.Unlock()
	select {
	case <-time.After(p.pace):
		return broker.Answer{Decision: broker.Deny, Reason: "paced"}, nil
	case <-ctx.Done():
		return broker.Answer{}, context.Cause(ctx)
	}
}

func (p *orderedPerson) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	return nil, broker.ErrDenied
}

func (p *orderedPerson) shown() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// approvalSockets serves b's approvals for each host on a socket of its
// own in dir, as the keeper does for each host's SSH connection.
func approvalSockets(t *testing.T, b *desktop.Broker, dir string, hosts ...string) map[string]string {
	socks := map[string]string{}
	for _, h := range hosts {
		socks[h] = filepath.Join(dir, h)
		l, err := net.Listen("unix", socks[h])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go desktop.ServeApprovals(b, h, l, nil)
	}
	return socks
}

func privateRemoteDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "oap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("OLLIE_REMOTE_DIR", dir)
	return dir
}

// TestApprovalsHostsTakeTurns: h4 floods the keeper with 300 requests, each
// in a session of its own, while h5 asks once: h5's prompt is shown no
// later than after the one of h4's showing when it asked, and h4's
// requests past its caps are refused at once.
func TestApprovalsHostsTakeTurns(t *testing.T) {
	dir := privateRemoteDir(t) // no terminal broker runs there
	person := &orderedPerson{pace: 10 * time.Millisecond}
	q := &desktop.Queue{Approver: person}
	// No budget (broker/README.md, "A host's budget"): this test is about
	// the queue's caps, which a flood reaches only past it.
	b := &desktop.Broker{Approver: q, Budget: desktop.NoBudget}
	socks := approvalSockets(t, b, dir, "h4", "h5")
	ask := func(host, session string) error {
		c, err := net.Dial("unix", socks[host])
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cv, _, err := broker.Ask(ctx, c, &broker.Request{Session: session, Tool: "t", Executable: "/bin/t", Cwd: "/"})
		if err == nil {
			cv.Close("denied")
		}
		return err
	}
	var flood sync.WaitGroup
	var refused atomic.Int32
	for i := range 300 {
		flood.Go(func() {
			if ask("h4", fmt.Sprintf("flood-%d", i)) != nil {
				refused.Add(1) // closed at the connection cap
			}
		})
	}
	// h5 asks once the flood has arrived: each request of it shown,
	// waiting (Pending lists the one showing too: one may count twice),
	// or refused at a cap.
	await.Until(t, 20*time.Second, "the flood never arrived", func() bool {
		return len(person.shown())+len(q.Pending())+b.Refused("h4").Conns+q.Refused("h4") >= 300
	}, func() string {
		return fmt.Sprintf("%d shown, %d waiting, %+v refused", len(person.shown()), len(q.Pending()), b.Refused("h4"))
	})
	// Counted from when h5's request is in the queue: the prompts of h4
	// begun while it was still on its way (a dial and a handshake, slow
	// under load) do not count against the queue.
	asked := make(chan error, 1)
	go func() { asked <- ask("h5", "honest") }()
	before := -1
	await.Until(t, 30*time.Second, "h5's request was never seen queued", func() bool {
		select {
		case err := <-asked:
			t.Fatalf("h5's request was answered before it was seen queued: %v", err)
		default:
		}
		n := len(person.shown())
		for _, r := range q.Pending() {
			if r.Host == "h5" {
				before = n
			}
		}
		if i := slices.Index(person.shown(), "h5"); i >= 0 {
			before = min(n, i)
		}
		return before >= 0
	})
	if err := <-asked; err != nil {
		t.Fatalf("h5: %v", err)
	}
	seen := person.shown()
	i := before
	for i < len(seen) && seen[i] != "h5" {
		i++
	}
	if i == len(seen) {
		t.Fatal("h5's prompt was never shown")
	}
	t.Logf("h5's prompt came after %d of h4's prompts shown since it asked", i-before)
	if i-before > 1 {
		t.Errorf("h5's prompt waited for %d of h4's prompts, want at most the one showing", i-before)
	}
	flood.Wait()
	r := b.Refused("h4")
	t.Logf("h4: %d connections closed at the cap, %d requests denied at the queue's caps; %d prompts shown in all", r.Conns, q.Refused("h4"), len(person.shown()))
	if r.Conns != int(refused.Load()) {
		t.Errorf("%d connections counted as refused, %d asks failed", r.Conns, refused.Load())
	}
}

// TestApprovalsConnCapThroughTerminal: with "ollie-remote broker" running
// (here a stand-in that never answers), the keeper holds at most 16 of one
// host's connections at once, with goroutines to match, and hands the
// terminal broker none of them before its request is whole; another
// host's whole request reaches it.
func TestApprovalsConnCapThroughTerminal(t *testing.T) {
	dir := privateRemoteDir(t)
	term, err := net.Listen("unix", desktop.TerminalSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	var relayed sync.Map // host's connections relayed, by header
	var relays atomic.Int32
	go func() {
		for {
			c, err := term.Accept()
			if err != nil {
				return
			}
			relays.Add(1)
			relayed.Store(c, true)
		}
	}()
	b := &desktop.Broker{Approver: desktop.NewHandoff(desktop.Nobody{Reason: "the terminal broker answers"}, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	socks := approvalSockets(t, b, dir, "h4", "h5")

	g0 := runtime.NumGoroutine()
	part := bytes.Repeat([]byte("a"), 32<<10)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 400 {
		c, err := net.Dial("unix", socks["h4"])
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.Write(part)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		await.Until(t, 15*time.Second, "never: "+what, cond)
	}
	waitFor("h4's connections over the cap refused", func() bool { return b.Refused("h4").Conns == 400-16 })
	if n, r := b.Conns("h4"), relays.Load(); n != 16 || r != 0 {
		t.Errorf("h4: %d connections held, %d relayed to the terminal broker; want 16, none (no request is whole)", n, r)
	}
	g1 := runtime.NumGoroutine()
	t.Logf("400 connections of h4's: %d held, %d goroutines more", b.Conns("h4"), g1-g0)
	if g1-g0 > 16*3+8 {
		t.Errorf("%d goroutines more for 16 held connections", g1-g0)
	}

	c, err := net.Dial("unix", socks["h5"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "t", Executable: "/bin/t", Cwd: "/"})
	waitFor("h5 relayed", func() bool { return relays.Load() == 1 })
	relayed.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
}
