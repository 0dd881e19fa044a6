package mux

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/accept"
)

// Defaults for the Mux's limits.
const (
	// DefaultMaxMsize is ns's own largest msize: 256 KiB of data and the
	// Tread/Rwrite header.
	DefaultMaxMsize         = 256<<10 + plan9.IOHDRSZ
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxFids          = 4096
	DefaultMaxRequests      = 128
)

// minMsize is the smallest msize the mux accepts from either side, as ns
// does.
const minMsize = 256

// ErrServerClosed is returned by Serve and ServeConn after Shutdown.
var ErrServerClosed = errors.New("mux: server closed")

// A Mux serves 9P2000: the tree Local reaches, with other servers mounted
// at directories of it. See the package documentation.
//
// The zero value of each limit means its default. Local must be set; a nil
// Mount mounts nothing.
type Mux struct {
	// Local dials the tree served at the root. Each client connection
	// gets a connection of its own, dialled at the client's Tversion and
	// attached with the client's uname and aname.
	Local func(ctx context.Context) (net.Conn, error)

	// Mount says whether the directory at path (the names from the root,
	// such as ["host", "web1"]) is a mount point, and how to reach the
	// server mounted there. It is asked for each name a walk takes in
	// the local tree, so it must answer at once; it is not asked inside
	// a mount (mounts do not nest). path is the mux's: copy it to keep
	// it. Each client connection dials a mount the first time a walk
	// reaches it, and again after its connection ended.
	Mount func(path []string) (dial func(ctx context.Context) (net.Conn, error), ok bool)

	// MaxMsize is the largest msize negotiated with a client, the local
	// tree or a mount (DefaultMaxMsize). No message buffer is larger.
	MaxMsize uint32

	// HandshakeTimeout bounds a dial with its Tversion, an attach, and
	// a server's answer to a Tflush (DefaultHandshakeTimeout). A mount
	// that takes longer is cut off; its fids fail, the rest go on.
	// Other requests wait as long as the server takes, by design: a read
	// of a stream blocks until there is more, and the client decides how
	// long to wait (and flushes).
	HandshakeTimeout time.Duration

	MaxFids     int // fids per client connection (DefaultMaxFids)
	MaxRequests int // outstanding requests per client connection (DefaultMaxRequests); Tflush may take as many again

	Log *slog.Logger // nil: discard

	life accept.Group[*session]
}

func (m *Mux) maxMsize() uint32 {
	if m.MaxMsize == 0 {
		return DefaultMaxMsize
	}
	return max(m.MaxMsize, minMsize)
}

func (m *Mux) timeout() time.Duration {
	if m.HandshakeTimeout <= 0 {
		return DefaultHandshakeTimeout
	}
	return m.HandshakeTimeout
}

func (m *Mux) maxFids() int {
	if m.MaxFids <= 0 {
		return DefaultMaxFids
	}
	return m.MaxFids
}

func (m *Mux) maxRequests() int {
	if m.MaxRequests <= 0 {
		return DefaultMaxRequests
	}
	return m.MaxRequests
}

func (m *Mux) log() *slog.Logger {
	if m.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Log
}

// Serve accepts client connections on ln and serves each with ServeConn.
// It always returns a non-nil error: ErrServerClosed after Shutdown, else
// the listener's.
func (m *Mux) Serve(ln net.Listener) error {
	return m.life.Serve(ln, ErrServerClosed, func(c net.Conn) func() {
		return func() { m.ServeConn(c) }
	})
}

// ServeConn serves one client connection until it ends, then closes c and
// every connection it made for c. It returns nil when the client hung up,
// ErrServerClosed after Shutdown, or what ended the conversation: a
// malformed message from the client, or the local tree's connection lost.
func (m *Mux) ServeConn(c net.Conn) error {
	s := newSession(m, c)
	if !m.life.Join(s) {
		c.Close()
		return ErrServerClosed
	}
	defer m.life.Leave(s)
	err := s.run()
	if m.life.Closed() {
		return ErrServerClosed
	}
	return err
}

// Shutdown closes the listeners and every client connection, with the
// connections to the local tree and the mounts made for them, and waits
// for their goroutines to end, or for ctx.
func (m *Mux) Shutdown(ctx context.Context) error {
	for _, s := range m.life.Close() {
		s.cc.Close()
	}
	return m.life.Wait(ctx)
}
