package accept

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// script is a listener that answers each Accept with the next of its
// results, and then with errPermanent.
type script struct {
	mu      sync.Mutex
	results []any // net.Conn or error
	accepts int
	closed  bool

	onAccept func() // if set, runs before each Accept answers
}

var errPermanent = errors.New("listener broken")

func (l *script) Accept() (net.Conn, error) {
	if l.onAccept != nil {
		l.onAccept()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepts++
	if len(l.results) == 0 {
		return nil, errPermanent
	}
	r := l.results[0]
	l.results = l.results[1:]
	if c, ok := r.(net.Conn); ok {
		return c, nil
	}
	return nil, r.(error)
}

func (l *script) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}

func (l *script) Addr() net.Addr { return &net.UnixAddr{Name: "script", Net: "unix"} }

// server is the state a server shares with its accept loop.
type server struct {
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	wg        sync.WaitGroup
}

var errClosed = errors.New("server closed")

func (s *server) loop() Loop {
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	return Loop{Mu: &s.mu, Closed: &s.closed, Listeners: s.listeners, WG: &s.wg, ErrClosed: errClosed}
}

// conn is one end of a pipe that records whether it was closed.
type conn struct {
	net.Conn
	mu     sync.Mutex
	closed bool
}

func newConn(t *testing.T) *conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &conn{Conn: a}
}

func (c *conn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// A failure that passes is waited out, with a back-off that doubles, and
// the loop goes on to serve the next connection; another failure ends it.
func TestTemporaryFailureBacksOff(t *testing.T) {
	c := newConn(t)
	l := &script{results: []any{
		&os.SyscallError{Syscall: "accept4", Err: syscall.EMFILE},
		timeoutError{},
		&net.OpError{Op: "accept", Err: &os.SyscallError{Syscall: "accept4", Err: syscall.ECONNABORTED}},
		c,
	}}
	var s server
	served := make(chan net.Conn, 1)
	start := time.Now()
	err := s.loop().Serve(l, func(c net.Conn) func() {
		return func() { served <- c }
	})
	took := time.Since(start)
	if !errors.Is(err, errPermanent) {
		t.Fatalf("Serve = %v, want the listener's own error %v", err, errPermanent)
	}
	if got := <-served; got != c {
		t.Errorf("served %v, want the accepted connection", got)
	}
	if l.accepts != 5 {
		t.Errorf("Accept called %d times, want 5 (3 failures that pass, a connection, the failure that ends it)", l.accepts)
	}
	if min := 5*time.Millisecond + 10*time.Millisecond + 20*time.Millisecond; took < min {
		t.Errorf("Serve took %v, want a back-off of at least %v (5 ms doubling)", took, min)
	}
	s.wg.Wait()
}

// Done cuts a back-off short: a server that is shutting down does not
// sleep out a second before it sees its listener closed.
func TestDoneEndsBackOff(t *testing.T) {
	var results []any
	for range 10 { // 5 ms doubling to 1 s: about 3.3 s asleep without Done
		results = append(results, &os.SyscallError{Syscall: "accept4", Err: syscall.ENFILE})
	}
	done := make(chan struct{})
	close(done)
	var s server
	lp := s.loop()
	lp.Done = done
	start := time.Now()
	err := lp.Serve(&script{results: results}, func(net.Conn) func() { return nil })
	if !errors.Is(err, errPermanent) {
		t.Fatalf("Serve = %v, want %v", err, errPermanent)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Serve took %v with Done closed, want no back-off", took)
	}
}

// Once the server is closed, an Accept failure is the server's closing,
// not the listener's error.
func TestClosedServerReturnsErrClosed(t *testing.T) {
	var s server
	l := &script{onAccept: func() {
		s.mu.Lock()
		s.closed = true // Shutdown, which then closes the listener
		s.mu.Unlock()
	}}
	if err := s.loop().Serve(l, nil); err != errClosed {
		t.Fatalf("Serve = %v, want ErrClosed %v", err, errClosed)
	}
}

// A connection accepted while the server shuts down is closed, not
// served, and Serve ends with ErrClosed.
func TestAcceptedDuringShutdownIsClosed(t *testing.T) {
	c := newConn(t)
	var s server
	served := false
	err := s.loop().Serve(&script{results: []any{c}}, func(net.Conn) func() {
		s.mu.Lock()
		s.closed = true // Shutdown ran between Accept and counting
		s.mu.Unlock()
		return func() { served = true }
	})
	s.wg.Wait()
	if err != errClosed {
		t.Errorf("Serve = %v, want ErrClosed", err)
	}
	if served {
		t.Errorf("connection served after the server closed")
	}
	if !c.isClosed() {
		t.Errorf("connection left open after the server closed")
	}
}

// A connection admit refuses is not served, and the loop goes on.
func TestAdmitRefuses(t *testing.T) {
	refused, taken := newConn(t), newConn(t)
	var s server
	var mu sync.Mutex
	var served []net.Conn
	err := s.loop().Serve(&script{results: []any{refused, taken}}, func(c net.Conn) func() {
		if c == refused {
			c.Close()
			return nil
		}
		return func() {
			mu.Lock()
			served = append(served, c)
			mu.Unlock()
		}
	})
	s.wg.Wait()
	if !errors.Is(err, errPermanent) {
		t.Fatalf("Serve = %v, want %v", err, errPermanent)
	}
	if len(served) != 1 || served[0] != taken {
		t.Errorf("served %v, want only the admitted connection", served)
	}
}

// The listener is registered while Serve runs, for Shutdown to close,
// and no longer once it returns.
func TestListenerRegistered(t *testing.T) {
	var s server
	l := &script{}
	during := false
	l.onAccept = func() {
		s.mu.Lock()
		_, during = s.listeners[l]
		s.mu.Unlock()
	}
	if err := s.loop().Serve(l, nil); !errors.Is(err, errPermanent) {
		t.Fatalf("Serve = %v, want %v", err, errPermanent)
	}
	if !during {
		t.Errorf("listener not among Listeners while Serve runs")
	}
	if _, after := s.listeners[l]; after {
		t.Errorf("listener still among Listeners after Serve returned")
	}
}

// A listener handed to a server already closed is closed with CloseLate
// (Mux, Proxy), left to its caller without (ns.Server); neither is served.
func TestServeAfterClose(t *testing.T) {
	for _, closeLate := range []bool{true, false} {
		s := server{closed: true}
		l := &script{}
		lp := s.loop()
		lp.CloseLate = closeLate
		if err := lp.Serve(l, nil); err != errClosed {
			t.Errorf("CloseLate %v: Serve = %v, want ErrClosed", closeLate, err)
		}
		if l.closed != closeLate {
			t.Errorf("CloseLate %v: listener closed = %v", closeLate, l.closed)
		}
		if l.accepts != 0 {
			t.Errorf("CloseLate %v: Accept called on a closed server", closeLate)
		}
	}
}
