package resume

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"9fans.net/go/plan9/client"
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

	once      sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{}
	wg        sync.WaitGroup // ServeConn calls running

	stateMu   sync.Mutex
	lastState string
}

// Backoff between failed dials: short, because Dial is expected to do the
// real waiting (an SSH reconnect loop), and the proxy only keeps trying.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

func (p *Proxy) init() {
	p.once.Do(func() {
		p.ctx, p.cancel = context.WithCancel(context.Background())
		p.listeners = map[net.Listener]struct{}{}
		p.sessions = map[*session]struct{}{}
	})
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
	p.init()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || temporaryAccept(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
				case <-p.ctx.Done():
				}
				continue
			}
			return err
		}
		delay = 0
		// Counted before the goroutine starts, so that Close waits for it.
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return nil
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.ServeConn(c)
		}()
	}
}

// temporaryAccept reports an accept failure that passes: out of file
// descriptors, or a peer gone before it was accepted.
func temporaryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS)
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// ServeConn relays one client connection, and returns when the client
// goes away, its session cannot be resumed, or the proxy is closed. It
// closes c.
func (p *Proxy) ServeConn(c net.Conn) {
	p.init()
	s := newSession(p, c)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.sessions[s] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.sessions, s)
		p.mu.Unlock()
		p.wg.Done()
	}()
	s.run()
}

// Close stops serving: it closes the listeners, every client connection
// and every server connection, and waits for the client connections'
// goroutines to end. It returns nil.
func (p *Proxy) Close() error {
	p.init()
	p.mu.Lock()
	p.closed = true
	p.cancel()
	for l := range p.listeners {
		l.Close()
	}
	for s := range p.sessions {
		s.shut()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}
