package ns

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"9fans.net/go/plan9"
)

// Defaults for the Server limits.
const (
	DefaultMaxMsize    = 256<<10 + plan9.IOHDRSZ
	MinMsize           = 256
	DefaultMaxFids     = 4096
	DefaultMaxRequests = 128
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("ns: server closed")

// errInterrupted answers a request flushed or cut short by the connection
// or server ending.
var errInterrupted = errors.New("interrupted")

// errShuttingDown answers a request cut short by Shutdown, so that a client
// can tell it from its own flush.
var errShuttingDown = errors.New("interrupted: server shutting down")

// A Server serves a Tree over any number of connections.
//
// The zero value of each limit means its default. Who an attach is
// follows from what the transport proves (see PeerKind), never from the
// name it claims: ServeUnix admits only peers running as the server's own
// OS user or root, and every attach of such a peer is the admin, unless
// the peer runs with no_new_privs. Every sandboxed tool does (Landlock
// requires it), so such a peer is only who Identify says its attach
// proves, or none. Serve's peers (TCP) are none. none never writes.
type Server struct {
	Tree *Tree

	MaxMsize    uint32 // the largest msize negotiated (DefaultMaxMsize)
	MaxFids     int    // fids per connection (DefaultMaxFids)
	MaxRequests int    // outstanding requests per connection (DefaultMaxRequests)

	// InGroup reports whether user belongs to group. Nil means no user
	// belongs to any group.
	InGroup func(user, group string) bool

	// Identify names the principal a sandboxed peer's attach proves to
	// be, from its uname and aname (an agent's capability, say), or ""
	// for none. The names admin and none are never taken from it. Nil
	// makes every sandboxed peer none.
	Identify func(uname, aname string) string

	// CheckAttach, if set, vets every Tattach; its error refuses it. A
	// server for one trusted parent uses it to demand a secret as the
	// attach name (srv9p offers no writable auth fids).
	CheckAttach func(user, aname string) error

	Log   *slog.Logger // nil: slog.Default()
	Trace io.Writer    // if set, every 9P message is printed here

	once      sync.Once
	ctx       context.Context
	cancel    context.CancelCauseFunc
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // connections being served
	started   time.Time
}

func (s *Server) init() {
	s.once.Do(func() {
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*conn]struct{}{}
		s.started = time.Now()
		if s.MaxMsize == 0 {
			s.MaxMsize = DefaultMaxMsize
		}
		s.MaxMsize = max(s.MaxMsize, MinMsize)
		if s.MaxFids == 0 {
			s.MaxFids = DefaultMaxFids
		}
		if s.MaxRequests == 0 {
			s.MaxRequests = DefaultMaxRequests
		}
		if s.Log == nil {
			s.Log = slog.Default()
		}
	})
}

// ServeUnix accepts connections on l and serves those whose peer is the
// server's own OS user or root: as the admin, or as a sandboxed peer when
// it runs with no_new_privs. It always returns a
// non-nil error; after Shutdown, ErrServerClosed.
func (s *Server) ServeUnix(l *net.UnixListener) error {
	return s.serve(l, true)
}

// Serve accepts connections on l and serves them as Remote peers.
// It always returns a non-nil error; after Shutdown, ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	return s.serve(l, false)
}

func (s *Server) serve(l net.Listener, unix bool) error {
	s.init()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || temporaryAccept(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		peer := Peer{Kind: Remote, UID: -1}
		if unix {
			if peer, err = checkPeer(nc); err != nil {
				s.Log.Warn("ns: refused connection", "err", err)
				nc.Close()
				continue
			}
		}
		// Add under mu, ordered before Shutdown's Wait: a connection
		// accepted as Shutdown runs is closed, not served.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.ServeConn(nc, peer)
		}()
	}
}

// temporaryAccept reports an accept failure that passes: out of file
// descriptors, or a peer gone before it was accepted. The server backs off
// rather than stop serving.
func temporaryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// ServeConn serves one 9P conversation on rwc until it ends, then closes
// rwc. peer is what the transport proved about the client (see Server).
func (s *Server) ServeConn(rwc io.ReadWriteCloser, peer Peer) error {
	s.init()
	c := &conn{srv: s, peer: peer, rwc: rwc, ended: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(s.ctx)
	c.guard = newGuard(rwc, s.MaxMsize, MinMsize, s.MaxRequests)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		rwc.Close()
		return ErrServerClosed
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()

	c.srv9p().Serve(c.guard, c.guard)
	close(c.ended)
	c.cancel(errors.New("connection closed"))
	rwc.Close()
	c.drain()

	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	return nil
}

// Shutdown closes the listeners, interrupts blocked requests, waits for
// requests in flight to finish and closes every connection. If ctx ends
// first it returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	s.cancel(ErrServerClosed)
	done := make(chan struct{})
	go func() {
		for _, c := range conns {
			c.drain()
			// srv9p writes a reply after its handler returns: let the
			// replies of the requests just interrupted reach the client
			// before the connection is cut.
			c.guard.waitAnswered(time.Second, c.ended)
			c.rwc.Close()
		}
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.rwc.Close()
		}
		return ctx.Err()
	}
}

// Conns returns the number of connections being served.
func (s *Server) Conns() int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
