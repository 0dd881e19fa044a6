package resume

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/internal/accept"
)

// The answers the proxy gives itself when a connection loss makes a request
// impossible to complete faithfully. 9P carries errors as text; a client
// of 9fans.net/go/plan9/client can test for them with errors.Is.
const (
	// ErrUncertain answers a request that changes the server (Twrite,
	// Tcreate, Tremove, Twstat, Tauth) and was in flight when the connection
	// broke: resending it could do it twice.
	ErrUncertain = client.Error("connection to the host was lost while this request was in flight; it may or may not have taken effect")

	// ErrLost answers every request on a fid that could not be restored
	// after a reconnect: one written to (its state lived in the server's
	// fid), an auth fid, or one whose file could no longer be reached.
	ErrLost = client.Error("connection to the host was lost; open the file again")

	// errInterrupted answers a request flushed while the server was out of
	// reach. It is the text ns answers a flush with, so that ns/client's
	// IsInterrupted sees the same thing through the proxy.
	errInterrupted = client.Error("interrupted")
)

// Proxy serves 9P2000 clients and relays them to a server it reaches
// through Dial. When the server connection breaks, it dials again (Dial is
// expected to wait/back off itself; the proxy retries with a short backoff
// while Dial errors, until Close), re-establishes each client's fids
// (Tversion, Tattach, Twalk from the root to the fid's path, Topen with the
// same mode), then resends the requests that were in flight.
//
// Each client connection gets a server connection of its own, so fids and
// tags pass through unchanged.
type Proxy struct {
	Dial    func(ctx context.Context) (net.Conn, error)
	Log     *slog.Logger       // nil = discard
	OnState func(state string) // optional: "connected", "reconnecting: <err>", for status displays

	// MaxMsize is the largest msize negotiated with either side: a
	// client's Tversion asking for more is lowered to it before the server
	// sees it, and a server's Rversion offering more is lowered before the
	// client does. No message buffer is larger. 0 means DefaultMaxMsize.
	MaxMsize uint32

	// HandshakeTimeout bounds the wait for the server's answer to a
	// Tversion, the client's or a replay's, and for the whole replay on a
	// reconnect (at least 3 times it); past it the server connection is
	// dropped and dialled again after a back-off. 0 means 10 s.
	HandshakeTimeout time.Duration

	life accept.Group[*session]

	stateMu   sync.Mutex
	lastState string
}

// DefaultMaxMsize is ns's own largest msize: 256 KiB of data and the
// Tread/Rwrite header.
const DefaultMaxMsize = 256<<10 + plan9.IOHDRSZ

// Back-off before dialling again after a server connection that did
// nothing useful: a dial error, a failed replay, or a connection that
// ended before it answered any request past the handshake (a host that
// fails right after Tversion was redialled 10,354 times in 15 s). It
// doubles, with jitter, and is reset by a connection that answered a
// request; a connection that worked is redialled at once.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// maxUnexpected is how many replies to no request (an unknown tag, a
// second reply, a reply of the wrong type) a server connection may send
// before it is dropped. Each is discarded; none is logged on its own.
const maxUnexpected = 16

func (p *Proxy) maxMsize() uint32 {
	if p.MaxMsize == 0 {
		return DefaultMaxMsize
	}
	return max(p.MaxMsize, 256)
}

func (p *Proxy) handshakeTimeout() time.Duration {
	if p.HandshakeTimeout <= 0 {
		return 10 * time.Second
	}
	return p.HandshakeTimeout
}

func (p *Proxy) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

// state reports a state change to OnState, once per change across all
// client connections.
func (p *Proxy) state(s string) {
	if p.OnState == nil {
		return
	}
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	if s == p.lastState {
		return
	}
	p.lastState = s
	p.OnState(s)
}

// Serve accepts client connections on l and serves each with ServeConn.
// It returns nil after Close, or the listener's error.
func (p *Proxy) Serve(l net.Listener) error {
	return p.life.Serve(l, nil, func(c net.Conn) func() {
		return func() { p.ServeConn(c) }
	})
}

// ServeConn relays one client connection, and returns when the client
// goes away, its session cannot be resumed, or the proxy is closed. It
// closes c.
func (p *Proxy) ServeConn(c net.Conn) {
	s := newSession(p, c)
	if !p.life.Join(s) {
		c.Close()
		return
	}
	defer p.life.Leave(s)
	s.run()
}

// Close stops serving: it closes the listeners, every client connection
// and every server connection, and waits for the client connections'
// goroutines to end. It returns nil.
func (p *Proxy) Close() error {
	for _, s := range p.life.Close() {
		s.shut()
	}
	return p.life.Wait(context.Background())
}
