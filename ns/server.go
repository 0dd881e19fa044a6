package ns

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/accept"
)

// Defaults for the Server limits.
//
// The connection caps leave room for what each kind of peer runs at
// once (a 9pfuse mount and a few ollie commands; a tool call of every
// agent that uses the namespace) while bounding what a peer can make the
// server hold: each connection costs a 64 KiB read buffer, a frame of up
// to msize and its fids. Remote peers only read what is world-readable,
// so they get fewer.
const (
	DefaultMaxMsize          = 256<<10 + plan9.IOHDRSZ
	MinMsize                 = 256
	DefaultMaxFids           = 4096
	DefaultMaxRequests       = 128
	DefaultMaxOwnerConns     = 64
	DefaultMaxSandboxedConns = 64
	DefaultMaxRemoteConns    = 16
	DefaultMaxKindFids       = 16384
	DefaultMaxKindHeld       = 64 << 20
	DefaultFrameTimeout      = 30 * time.Second
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

	// Connections served at once, for each kind of peer apart, so that
	// tools holding all theirs leave the owner's clients room. One past
	// the cap has its first message answered with an Rerror saying so,
	// then is closed.
	MaxOwnerConns     int // DefaultMaxOwnerConns
	MaxSandboxedConns int // DefaultMaxSandboxedConns
	MaxRemoteConns    int // DefaultMaxRemoteConns

	// MaxKindFids caps the fids held at once by all connections of one
	// kind of peer (DefaultMaxKindFids), besides MaxFids for each: a fid
	// costs about 1 KiB, and connections are many. Each kind has its own
	// budget for the same reason as its own connections, so the server
	// holds at most three times this.
	MaxKindFids int

	// MaxKindHeld caps the bytes of the requests that all connections of
	// one kind of peer have sent and not yet had answered
	// (DefaultMaxKindHeld): a request blocked in its handler (a Twrite
	// of a full msize, say) holds its message, and connections times
	// requests times msize would be gigabytes. A request past it is
	// answered with an Rerror at once; a Tflush always gets through.
	MaxKindHeld int64

	// FrameTimeout bounds the time from the first byte of a message to
	// its last (DefaultFrameTimeout); past it the connection is closed.
	// Between messages a connection may stay idle as long as it likes.
	// It applies only where the transport has SetReadDeadline (a
	// net.Conn: every connection Serve and ServeUnix accept); on other
	// transports a frame has no deadline.
	FrameTimeout time.Duration

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
	// attach name (ns offers no auth fids).
	CheckAttach func(user, aname string) error

	Log *slog.Logger // nil: slog.Default()
	// Trace, if set, is where every 9P message is printed, but for the
	// data of writes, of which only the count is: what a client writes
	// may be a secret (a sudo password written to bypass/pending), and a
	// trace is a log.
	Trace io.Writer

	once      sync.Once
	ctx       context.Context
	cancel    context.CancelCauseFunc
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // connections being served
	started   time.Time

	kindConns [numKinds]int          // connections served, by peer kind; under mu
	kindFids  [numKinds]atomic.Int64 // fids held, by peer kind
	kindHeld  [numKinds]atomic.Int64 // bytes of requests not yet answered, by peer kind
	refusals  [numKinds]refusalLog   // connections refused, by peer kind; under mu
}

// numKinds is the number of PeerKinds, which count up from Remote.
const numKinds = Owner + 1

// refusalLog rate-limits the log of refused connections: a peer that
// retries in a loop must not fill the log.
type refusalLog struct {
	last       time.Time
	suppressed int
}

// refusalLogEvery is how often refused connections of one kind are logged.
const refusalLogEvery = 10 * time.Second

// A LimitError reports a request or connection refused because a limit
// was reached. Clients see its text in an Rerror.
type LimitError struct {
	What  string // what there are too many of: "fids", "sandboxed connections"
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("ns: too many %s (limit %d)", e.What, e.Limit)
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
		if s.MaxOwnerConns <= 0 {
			s.MaxOwnerConns = DefaultMaxOwnerConns
		}
		if s.MaxSandboxedConns <= 0 {
			s.MaxSandboxedConns = DefaultMaxSandboxedConns
		}
		if s.MaxRemoteConns <= 0 {
			s.MaxRemoteConns = DefaultMaxRemoteConns
		}
		if s.MaxKindFids <= 0 {
			s.MaxKindFids = DefaultMaxKindFids
		}
		if s.MaxKindHeld <= 0 {
			s.MaxKindHeld = DefaultMaxKindHeld
		}
		if s.FrameTimeout <= 0 {
			s.FrameTimeout = DefaultFrameTimeout
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
	// No Done: a back-off sleeps its course, and Shutdown's closing of l
	// ends the loop at the next Accept.
	lp := accept.Loop{
		Mu: &s.mu, Closed: &s.closed, Listeners: s.listeners, WG: &s.wg,
		ErrClosed: ErrServerClosed,
	}
	return lp.Serve(l, func(nc net.Conn) func() {
		peer := Peer{Kind: Remote, UID: -1}
		if unix {
			var err error
			if peer, err = checkPeer(nc); err != nil {
				s.Log.Warn("ns: refused connection", "err", err)
				nc.Close()
				return nil
			}
		}
		return func() { s.ServeConn(nc, peer) }
	})
}

// ServeConn serves one 9P conversation on rwc until it ends, then closes
// rwc. peer is what the transport proved about the client (see Server).
// It returns nil once the conversation ends, ErrServerClosed after
// Shutdown, and a *LimitError if peer's kind already has all the
// connections it may.
func (s *Server) ServeConn(rwc io.ReadWriteCloser, peer Peer) error {
	s.init()
	if peer.Kind < 0 || peer.Kind >= numKinds {
		peer.Kind = Remote // what principalFor makes of a kind it does not know
	}
	kind := peer.Kind
	c := &conn{srv: s, peer: peer, rwc: rwc, ended: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancelCause(s.ctx)
	c.guard = newGuard(rwc, s.MaxMsize, MinMsize, s.MaxRequests)
	c.guard.refused = c.refused
	c.guard.held, c.guard.maxHeld, c.guard.kind = &s.kindHeld[kind], s.MaxKindHeld, kind
	if d, ok := rwc.(readDeadliner); ok {
		c.guard.deadline, c.guard.frameTimeout = d, s.FrameTimeout
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		rwc.Close()
		return ErrServerClosed
	}
	if limit := s.maxConns(kind); s.kindConns[kind] >= limit {
		err := &LimitError{What: kind.String() + " connections", Limit: limit}
		logIt, unlogged := s.refusals[kind].note(time.Now())
		s.mu.Unlock()
		if logIt {
			s.Log.Warn("ns: refused connection", "err", err, "peer", kind.String(), "pid", peer.PID, "uid", peer.UID, "unlogged", unlogged)
		}
		s.refuse(rwc, err)
		return err
	}
	s.kindConns[kind]++
	s.conns[c] = struct{}{}
	s.mu.Unlock()

	if s.Trace != nil {
		c.trace = untracedWrites{s.Trace}
	}
	c.serve()
	close(c.ended)
	c.cancel(errors.New("connection closed"))
	rwc.Close()
	c.drain()
	// A reply that passed the stopped check before the loop ended may
	// still be going out: once the lock is free, nothing more is written
	// to rwc, so the caller may treat the connection as finished.
	c.wmu.Lock()
	c.wmu.Unlock()
	c.guard.releaseAll()

	s.mu.Lock()
	delete(s.conns, c)
	s.kindConns[kind]--
	s.mu.Unlock()
	return nil
}

func (s *Server) maxConns(k PeerKind) int {
	switch k {
	case Owner:
		return s.MaxOwnerConns
	case Sandboxed:
		return s.MaxSandboxedConns
	}
	return s.MaxRemoteConns
}

// note counts a refused connection and reports whether to log it: the
// first, and then one every refusalLogEvery, with how many went unlogged
// since the last.
func (r *refusalLog) note(now time.Time) (logIt bool, unlogged int) {
	if !r.last.IsZero() && now.Sub(r.last) < refusalLogEvery {
		r.suppressed++
		return false, 0
	}
	unlogged = r.suppressed
	r.last, r.suppressed = now, 0
	return true, unlogged
}

// refuseTimeout bounds how long a refused connection may take to send
// the message its refusal answers.
const refuseTimeout = time.Second

// refuse answers the first message on rwc with err and closes it, so that
// the client reads why rather than a bare EOF. Reading that message first
// keeps the order a client expects (it writes Tversion, then reads), and
// closing with it unread could reset the connection before the client
// reads the answer.
func (s *Server) refuse(rwc io.ReadWriteCloser, err error) {
	defer rwc.Close()
	if d, ok := rwc.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(time.Now().Add(min(refuseTimeout, s.FrameTimeout)))
	}
	var hdr [7]byte
	if _, err := io.ReadFull(rwc, hdr[:]); err != nil {
		return
	}
	size := binary.LittleEndian.Uint32(hdr[:4])
	if size < 7 || size > MinMsize<<4 {
		return
	}
	if _, err := io.CopyN(io.Discard, rwc, int64(size-7)); err != nil {
		return
	}
	f := &plan9.Fcall{Type: plan9.Rerror, Tag: binary.LittleEndian.Uint16(hdr[5:7]), Ename: err.Error()}
	if b, err := f.Bytes(); err == nil {
		rwc.Write(b)
	}
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
			// A reply is written after its handler returns: let the
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

// untracedWrites passes the trace on without the data of Twrite
// messages, which the trace prints after their count. The loop prints
// each message with one Write.
type untracedWrites struct{ w io.Writer }

func (u untracedWrites) Write(b []byte) (int, error) {
	i := bytes.Index(b, []byte(" Twrite tag "))
	if i < 0 {
		return u.w.Write(b)
	}
	j := bytes.Index(b[i:], []byte(" count "))
	if j < 0 {
		return u.w.Write(b)
	}
	k := i + j + len(" count ")
	for k < len(b) && '0' <= b[k] && b[k] <= '9' {
		k++
	}
	if _, err := u.w.Write(append(b[:k:k], " (data not traced)\n"...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
