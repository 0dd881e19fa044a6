// Package accept is the accept loop and the life (listeners, connections,
// closing) that ollie's 9P servers share (ns.Server, tunnel/mux.Mux,
// tunnel/resume.Proxy), and the appliance listener too.
//
// It lives once so that the three agree on what a listener's failure
// means: out of file descriptors or a peer gone before it was accepted
// passes, and the server backs off rather than stop serving; and on how a
// connection accepted as the server shuts down is closed rather than left
// unserved or unwaited for. A server whose lock guards only that keeps a
// Group; one whose lock guards more (ns.Server, the appliance) keeps the
// state itself and hands Loop pointers to it.
package accept

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// The back-off after a temporary accept failure: 5 ms, doubling to 1 s,
// and back to none once a connection is accepted.
const (
	minDelay = 5 * time.Millisecond
	maxDelay = time.Second
)

// A Loop is one server's state as its accept loop sees it. Its fields
// point into the server, which shares them with its Shutdown.
type Loop struct {
	Mu        *sync.Mutex               // guards Closed and Listeners
	Closed    *bool                     // set by the server's Shutdown, under Mu
	Listeners map[net.Listener]struct{} // what Shutdown closes, under Mu
	WG        *sync.WaitGroup           // the connections being served, for Shutdown to wait on

	// Done, once closed, ends a back-off early (the server's context).
	// Nil: a back-off always runs its course.
	Done <-chan struct{}

	// ErrClosed is what Serve returns once the server is closed: the
	// server's ErrServerClosed, or nil.
	ErrClosed error

	// CloseLate closes a listener handed to Serve after the server was
	// closed; without it Serve leaves that listener to its caller.
	CloseLate bool
}

// Serve accepts connections on l until the server is closed, when it
// returns ErrClosed, or until Accept fails other than for a while, when it
// returns that error. l is among Listeners while Serve runs.
//
// admit runs in the accepting goroutine for each connection, before it is
// counted: it returns the function that serves c, or nil to drop c (having
// closed it) and accept the next. The connection is then counted in WG
// under Mu unless the server closed meanwhile, in which case it is closed
// and Serve returns ErrClosed; serve runs in a goroutine of its own.
func (lp Loop) Serve(l net.Listener, admit func(c net.Conn) (serve func())) error {
	lp.Mu.Lock()
	if *lp.Closed {
		lp.Mu.Unlock()
		if lp.CloseLate {
			l.Close()
		}
		return lp.ErrClosed
	}
	lp.Listeners[l] = struct{}{}
	lp.Mu.Unlock()
	defer func() {
		lp.Mu.Lock()
		delete(lp.Listeners, l)
		lp.Mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if lp.closed() {
				return lp.ErrClosed
			}
			if !temporary(err) {
				return err
			}
			delay = min(max(2*delay, minDelay), maxDelay)
			select {
			case <-time.After(delay):
			case <-lp.Done:
			}
			continue
		}
		delay = 0
		serve := admit(c)
		if serve == nil {
			continue
		}
		// Counted under Mu, ordered before Shutdown's Wait: a connection
		// accepted as Shutdown runs is closed, not served unwaited for.
		lp.Mu.Lock()
		if *lp.Closed {
			lp.Mu.Unlock()
			c.Close()
			return lp.ErrClosed
		}
		lp.WG.Add(1)
		lp.Mu.Unlock()
		go func() {
			defer lp.WG.Done()
			serve()
		}()
	}
}

func (lp Loop) closed() bool {
	lp.Mu.Lock()
	defer lp.Mu.Unlock()
	return *lp.Closed
}

// temporary reports an accept failure that passes: a timeout, out of file
// descriptors or buffers, or a peer gone before it was accepted.
func temporary(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS)
}

// A Group is the part of a server's life that does not depend on what it
// serves: its listeners, the connections it serves (of type C, the
// server's own), and its closing. A proxy in front of 9P keeps one
// (tunnel/mux.Mux, tunnel/resume.Proxy); ns.Server and the appliance keep
// their state in fields their other locks share, and use Loop. The zero
// value is ready.
type Group[C comparable] struct {
	once      sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[C]struct{}
	wg        sync.WaitGroup
}

func (g *Group[C]) init() {
	g.once.Do(func() {
		g.ctx, g.cancel = context.WithCancel(context.Background())
		g.listeners = map[net.Listener]struct{}{}
		g.conns = map[C]struct{}{}
	})
}

// Context ends when the group is closed.
func (g *Group[C]) Context() context.Context {
	g.init()
	return g.ctx
}

// Serve is Loop.Serve over the group: it accepts on l until the group is
// closed (returning errClosed, and closing l) or l fails for good.
func (g *Group[C]) Serve(l net.Listener, errClosed error, admit func(c net.Conn) (serve func())) error {
	g.init()
	lp := Loop{
		Mu: &g.mu, Closed: &g.closed, Listeners: g.listeners, WG: &g.wg,
		Done: g.ctx.Done(), ErrClosed: errClosed, CloseLate: true,
	}
	return lp.Serve(l, admit)
}

// Join counts c in until Leave, unless the group is closed: then it is
// false and c is the caller's to close.
func (g *Group[C]) Join(c C) bool {
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	g.wg.Add(1)
	return true
}

// Leave counts out a c that Join counted in.
func (g *Group[C]) Leave(c C) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	g.wg.Done()
}

// Closed reports whether Close was called.
func (g *Group[C]) Closed() bool {
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Close closes the group: no listener or connection is taken in after it,
// the listeners are closed, Context ends, and the connections counted in
// now are returned for the server to end as it ends them.
func (g *Group[C]) Close() []C {
	g.init()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.cancel()
	for l := range g.listeners {
		l.Close()
	}
	conns := make([]C, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	return conns
}

// Wait waits until every connection counted in has left and every
// connection Serve accepted has been served, or for ctx.
func (g *Group[C]) Wait(ctx context.Context) error {
	g.init()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Track counts a piece of a server's work (a channel, a forwarded
// connection) in wg unless the server is closed, both under mu, the
// server's lock: ordered before its Shutdown's wait, as Loop.Serve counts
// a connection.
func Track(mu *sync.Mutex, closed *bool, wg *sync.WaitGroup) bool {
	mu.Lock()
	defer mu.Unlock()
	if *closed {
		return false
	}
	wg.Add(1)
	return true
}
