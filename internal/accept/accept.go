// Package accept is the accept loop that ollie's 9P servers share
// (ns.Server, tunnel/mux.Mux, tunnel/resume.Proxy), and the appliance listener
// (appliance) too.
//
// It lives once so that the three agree on what a listener's failure
// means: out of file descriptors or a peer gone before it was accepted
// passes, and the server backs off rather than stop serving; and on how a
// connection accepted as the server shuts down is closed rather than left
// unserved or unwaited for. Each server keeps its own state (its lock, its
// closed flag, its listeners, its wait group) and its own answers; the
// loop only works on them.
package accept

import (
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
