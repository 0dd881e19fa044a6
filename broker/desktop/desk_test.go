package desktop

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ollie/broker"
)

// holder approves everything once and gives a password every time it is
// asked, counting the asks; with hold set it keeps every approval
// showing until the test ends.
type holder struct {
	hold      chan struct{}
	approvals atomic.Int32
	passwords atomic.Int32
}

func (h *holder) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	h.approvals.Add(1)
	if h.hold != nil {
		select {
		case <-h.hold:
		case <-ctx.Done():
			return broker.Answer{}, context.Cause(ctx)
		}
	}
	return broker.Answer{Decision: broker.Once}, nil
}

func (h *holder) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	h.passwords.Add(1)
	return []byte("hunter2"), nil
}

// serveOne runs b.ServeConn for host on one end of a pipe and returns the
// other, and a channel closed when ServeConn returns.
func serveOne(b *Broker, host string, wrap func(net.Conn) net.Conn) (net.Conn, chan struct{}) {
	hostEnd, desk := net.Pipe()
	if wrap != nil {
		desk = wrap(desk)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		b.ServeConn(host, desk)
	}()
	return hostEnd, served
}

func waitServed(t *testing.T, served chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-served:
	case <-time.After(within):
		t.Fatalf("the broker still holds the connection %v after %s", within, what)
	}
}

// noDeadlines is a connection that cannot set deadlines, as an SSH
// channel forwarded from a host cannot.
type noDeadlines struct{ net.Conn }

func (noDeadlines) SetReadDeadline(time.Time) error {
	return errors.New("ssh: tcpChan: deadline not supported")
}
func (noDeadlines) SetDeadline(time.Time) error {
	return errors.New("ssh: tcpChan: deadline not supported")
}

// TestBrokerRequestDeadline opens connections that send nothing, or half a
// request, and never more: each is closed at RequestTimeout, also when
// the connection cannot set deadlines.
func TestBrokerRequestDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
		send string
	}{
		{"silent", nil, ""},
		{"half a request", nil, `{"type":"request","request":{"id":"x",`},
		{"silent, no deadlines", func(c net.Conn) net.Conn { return noDeadlines{c} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Broker{Approver: &holder{}, RequestTimeout: 200 * time.Millisecond}
			hostEnd, served := serveOne(b, "h4", tc.wrap)
			defer hostEnd.Close()
			go hostEnd.Write([]byte(tc.send))
			start := time.Now()
			waitServed(t, served, 10*time.Second, "sending nothing")
			if d := time.Since(start); d < 150*time.Millisecond {
				t.Errorf("closed after %v, before the deadline", d)
			}
			if r := b.Refused("h4"); r.Late != 1 {
				t.Errorf("refusals %+v, want one late", r)
			}
		})
	}
}

// TestBrokerReplyDeadline approves a request whose host then owes its
// next message and never sends it.
func TestBrokerReplyDeadline(t *testing.T) {
	b := &Broker{Approver: &holder{}, ReplyTimeout: 200 * time.Millisecond}
	hostEnd, served := serveOne(b, "h4", func(c net.Conn) net.Conn { return noDeadlines{c} })
	defer hostEnd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ans, err := broker.Ask(ctx, hostEnd, &broker.Request{Session: "s", Tool: "t", Sudo: true}); err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v %v", ans, err)
	}
	waitServed(t, served, 10*time.Second, "the host owed its next message")
	if r := b.Refused("h4"); r.Late != 1 {
		t.Errorf("refusals %+v, want one late", r)
	}
}

// TestBrokerMessageLimit sends 1 MiB without a newline: the broker must
// close the connection once it has read broker.MaxMessage, never holding more.
func TestBrokerMessageLimit(t *testing.T) {
	b := &Broker{Approver: &holder{}}
	hostEnd, served := serveOne(b, "h4", nil)
	defer hostEnd.Close()
	chunk := bytes.Repeat([]byte("a"), 1024)
	written := 0
	var err error
	for written < 1<<20 {
		var n int
		n, err = hostEnd.Write(chunk)
		written += n
		if err != nil {
			break
		}
	}
	if err == nil {
		t.Errorf("the broker read all %d bytes of a line", written)
	} else if written > broker.MaxMessage+8<<10 {
		t.Errorf("the broker read %d bytes of one line before closing, limit %d", written, broker.MaxMessage)
	}
	waitServed(t, served, 10*time.Second, "1 MiB without a newline")
	if r := b.Refused("h4"); r.TooLarge != 1 {
		t.Errorf("refusals %+v, want one too large", r)
	}

	// A request just under the limit is read; the asker refuses to send one
	// over it, saying so.
	hostEnd, served = serveOne(b, "h4", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := &broker.Request{Session: "s", Tool: "t", Args: []byte(`"` + strings.Repeat("x", broker.MaxMessage-200) + `"`)}
	cv, ans, err := broker.Ask(ctx, hostEnd, big)
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("a request of %d bytes: %+v %v", broker.MaxMessage-100, ans, err)
	}
	cv.Close("ran")
	waitServed(t, served, 10*time.Second, "the result")
	a, d := net.Pipe()
	defer d.Close()
	big.ID, big.Args = "", []byte(`"`+strings.Repeat("x", broker.MaxMessage)+`"`)
	if _, _, err := broker.Ask(ctx, a, big); !errors.Is(err, broker.ErrTooLarge) {
		t.Errorf("asking with a request over the limit: %v, want ErrTooLarge", err)
	}
}

// TestBrokerPasswordAttempts has a host ask ten times for the password of
// one approved sudo request, in turn: the person is asked three times, and
// the fourth ask ends the grant. A host that numbers an ask out of turn
// (the first again) is denied at once, the person not asked.
func TestBrokerPasswordAttempts(t *testing.T) {
	person := &holder{}
	b := &Broker{Approver: person}
	hostEnd, served := serveOne(b, "h4", nil)
	defer hostEnd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cv, ans, err := broker.Ask(ctx, hostEnd, &broker.Request{Session: "s", Tool: "t", Sudo: true})
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v %v", ans, err)
	}
	got := 0
	var last error
	for i := range 10 {
		pw, err := cv.Password(ctx, i+1, "wrong password")
		if err != nil {
			last = err
			break
		}
		broker.Zero(pw)
		got++
	}
	if got != broker.MaxPasswordAttempts || person.passwords.Load() != broker.MaxPasswordAttempts {
		t.Errorf("the host got %d passwords, the person was asked %d times; want %d", got, person.passwords.Load(), broker.MaxPasswordAttempts)
	}
	if !errors.Is(last, broker.ErrDenied) || !strings.Contains(last.Error(), "already asked 3 times") {
		t.Errorf("the fourth ask: %v, want a denial saying why", last)
	}
	waitServed(t, served, 10*time.Second, "the grant ended")
	if r := b.Refused("h4"); r.Passwords != 1 {
		t.Errorf("refusals %+v, want one for passwords", r)
	}

	person = &holder{}
	b = &Broker{Approver: person}
	hostEnd, served = serveOne(b, "h4", nil)
	defer hostEnd.Close()
	cv, ans, err = broker.Ask(ctx, hostEnd, &broker.Request{Session: "s", Tool: "t", Sudo: true})
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v %v", ans, err)
	}
	pw, err := cv.Password(ctx, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	broker.Zero(pw)
	_, err = cv.Password(ctx, 1, "wrong password")
	if !errors.Is(err, broker.ErrDenied) || !strings.Contains(err.Error(), "the next ask of this request is 2") {
		t.Errorf("the first ask again: %v, want a denial saying why", err)
	}
	if n := person.passwords.Load(); n != 1 {
		t.Errorf("the person was asked %d times for the password, want once", n)
	}
	waitServed(t, served, 10*time.Second, "the grant ended")
}

// TestBrokerConnCap opens 400 connections from one host, each sending 32
// KiB of a line that never ends: the broker holds 16 of them and closes
// the rest at once, its goroutines and heap stay bounded, another host
// is still served, and once the lines pass the size limit every
// connection is closed.
func TestBrokerConnCap(t *testing.T) {
	person := &holder{hold: make(chan struct{})}
	defer close(person.hold)
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
	sockA, sockB := listen("h4"), listen("h5")
	settle := func() (int, uint64) {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	g0, heap0 := settle()

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	part := bytes.Repeat([]byte("a"), 32<<10)
	for range 400 {
		c, err := net.Dial("unix", sockA)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.Write(part) // a connection closed at once fails here: fine
	}
	waitUntil(t, "the connections over the cap refused", func() bool { return b.Refused("h4").Conns == 400-16 })
	if n := b.Conns("h4"); n != 16 {
		t.Errorf("%d connections of h4 open, want 16", n)
	}
	g1, heap1 := settle()
	t.Logf("400 connections holding 32 KiB each: %d goroutines more, heap %+d KiB", g1-g0, (int64(heap1)-int64(heap0))>>10)
	if g1-g0 > 16+8 {
		t.Errorf("%d goroutines more with 400 connections open, want about 16", g1-g0)
	}
	if d := int64(heap1) - int64(heap0); d > 8<<20 {
		t.Errorf("the heap grew by %d KiB with 400 connections open", d>>10)
	}

	// Another host has connections of its own.
	c, err := net.Dial("unix", sockB)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	asked := make(chan error, 1)
	go func() {
		_, _, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "t"})
		asked <- err
	}()
	waitUntil(t, "h5's request reaches the person", func() bool { return person.approvals.Load() == 1 })

	// The rest of the line: every connection of h4's is closed.
	var wg sync.WaitGroup
	rest := bytes.Repeat([]byte("a"), 1<<20)
	for _, c := range conns {
		wg.Go(func() {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			c.Write(rest)
			io.Copy(io.Discard, c)
		})
	}
	wg.Wait()
	waitUntil(t, "h4's connections closed", func() bool { return b.Conns("h4") == 0 })
	if r := b.Refused("h4"); r.TooLarge != 16 {
		t.Errorf("refusals %+v, want 16 too large", r)
	}
}

// gone is an approver whose person is gone: after approvals approvals it
// returns ErrUnavailable, as a terminal that hung up does; it records the
// requests it was told are finished.
type gone struct {
	approvals int // answered before it is gone
	mu        sync.Mutex
	finished  []*broker.Request
}

func (g *gone) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.approvals == 0 {
		return broker.Answer{}, ErrUnavailable
	}
	g.approvals--
	return broker.Answer{Decision: broker.Once}, nil
}

func (g *gone) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	return nil, ErrUnavailable
}

func (g *gone) Finish(req *broker.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finished = append(g.finished, req)
}

// TestBrokerUnavailable: a request the approver could not put to anyone
// (ErrUnavailable) is not answered, neither at the question nor at the
// password: the conversation is closed, so that whoever relayed it asks
// another approver. A Finisher hears of each request's end.
func TestBrokerUnavailable(t *testing.T) {
	g := &gone{approvals: 1}
	b := &Broker{Approver: g}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, served := serveOne(b, "h1", nil)
	cv, ans, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "t", Sudo: true})
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("the question: %+v, %v", ans, err)
	}
	if _, err := cv.Password(ctx, 1, ""); err == nil || errors.Is(err, broker.ErrDenied) {
		t.Errorf("a password nobody could be asked for: %v, want the conversation closed unanswered", err)
	}
	waitServed(t, served, 5*time.Second, "an unavailable password")

	c, served = serveOne(b, "h1", nil)
	if _, ans, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "t"}); err == nil {
		t.Errorf("a question nobody could be asked: answered %+v, want the conversation closed unanswered", ans)
	}
	waitServed(t, served, 5*time.Second, "an unavailable question")
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.finished) != 2 {
		t.Errorf("Finish was called for %d of 2 requests", len(g.finished))
	}
}
