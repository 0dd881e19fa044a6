// Package client is the namespace client: it connects to olliesrv and
// reads, writes and lists the files of the namespace, the way the ollie
// command and shell do.
//
// It is built on 9fans.net/go/plan9/client and adds what that client lacks
// and an interactive user needs: interruption. [Conn.Interrupt] flushes
// the requests in flight (a read blocked at the end of a stream, a request
// waiting on an agent), and every helper takes a context whose end does
// the same. Reading a file to its end (Follow, ReadAll) goes around that
// client for speed: several reads in flight, each reply's data straight
// into the caller's buffer (follow.go).
//
// The package trusts the server it dials to speak 9P2000; it checks reply
// sizes and tags but not what files contain. It trusts a Unix socket only
// as far as the kernel vouches for it: before it sends a byte, the
// namespace's directory must be the user's own and private (ns/nsdir's
// Check) and the process at the socket's other end must run as the user
// (see DialTimeout).
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	p9 "9fans.net/go/plan9/client"

	"ollie/internal/peer"
	"ollie/ns/nsdir"
)

// ErrInterrupted is the server's answer to a request cut short, by
// Interrupt or by the server shutting down. 9P carries errors as text, so
// this is the text ns answers with; test for it with IsInterrupted.
const ErrInterrupted = p9.Error("interrupted")

// IsInterrupted reports whether err is, or wraps, the server's answer to an
// interrupted request.
func IsInterrupted(err error) bool { return errors.Is(err, ErrInterrupted) }

// IsServerError reports whether err is, or wraps, an error the server
// answered (Rerror), as opposed to a failure to reach it.
func IsServerError(err error) bool {
	var e p9.Error
	return errors.As(err, &e) && e != errLost
}

// IsNotExist reports whether err is the server's answer that a file it was
// asked for does not exist: a walk that failed on a name ("PATH: file does
// not exist", as ns and Plan 9 servers word it), the one error 9P's text
// is the interface of.
func IsNotExist(err error) bool {
	var e p9.Error
	return errors.As(err, &e) && e != errLost && strings.HasSuffix(string(e), "file does not exist")
}

// A DialError reports that no namespace could be reached at Addr.
type DialError struct {
	Addr string // the socket path or TCP address
	Err  error
	unix bool
}

func (e *DialError) Error() string {
	var de *nsdir.DirError
	var pe *PeerError
	switch {
	case errors.As(e.Err, &de):
		return "ollie: " + de.Error()
	case errors.As(e.Err, &pe):
		return "ollie: " + pe.Error()
	case e.unix && (errors.Is(e.Err, fs.ErrNotExist) || errors.Is(e.Err, syscall.ECONNREFUSED)):
		return fmt.Sprintf("ollie: no olliesrv at %s (start it with `olliesrv`)", e.Addr)
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return fmt.Sprintf("ollie: no olliesrv at %s: connection refused", e.Addr)
	case e.unix && errors.Is(e.Err, io.EOF):
		return fmt.Sprintf("ollie: olliesrv at %s hung up (on its Unix socket it admits only its own user and root)", e.Addr)
	}
	return fmt.Sprintf("ollie: cannot connect to %s: %v", e.Addr, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// A PeerError reports a Unix socket served by a process of another user,
// to which the client sent nothing.
type PeerError struct {
	Socket string
	UID    int    // the uid the kernel reports for the socket's other end
	Owner  string // its name, "" if it has none
}

func (e *PeerError) Error() string {
	who := fmt.Sprintf("uid %d", e.UID)
	if e.Owner != "" {
		who = fmt.Sprintf("%s (uid %d)", e.Owner, e.UID)
	}
	return fmt.Sprintf("%s is served by %s, not by you (uid %d): it is not your olliesrv, and nothing was sent to it",
		e.Socket, who, os.Geteuid())
}

// IsUntrusted reports whether err is a refusal to talk to a namespace
// that is not the user's own (*nsdir.DirError, *PeerError), as opposed
// to there being none: starting a daemon cannot mend it.
func IsUntrusted(err error) bool {
	var de *nsdir.DirError
	var pe *PeerError
	return errors.As(err, &de) || errors.As(err, &pe)
}

// A Conn is one attached 9P conversation with the namespace. Its methods
// may be called concurrently.
type Conn struct {
	addr string
	w    *wire
	c    *p9.Conn
	fsys *p9.Fsys
}

// TokenEnv names the variable holding an agent's capability: olliesrv puts
// it in the environment of every tool the agent runs, and a client
// presents it as its attach's aname. It is how a sandboxed tool acts as
// its agent, and as no one else.
const TokenEnv = "OLLIE_AGENT_TOKEN"

// Dial connects to the namespace at addr and attaches as $OLLIE_UNAME. See
// DialAs.
func Dial(addr string) (*Conn, error) { return DialAs(addr, os.Getenv("OLLIE_UNAME")) }

// DefaultHandshakeTimeout bounds DialAs: the connect, Tversion and
// Tattach together.
const DefaultHandshakeTimeout = 10 * time.Second

// DialAs connects to the namespace at addr and attaches as uname, within
// DefaultHandshakeTimeout (see DialTimeout).
//
// addr is a Unix socket path, "unix!PATH", "tcp!HOST!PORT" or "HOST:PORT";
// empty means nsdir.SocketPath(). Who the attach is follows from the
// transport, not from uname: the server's own user on the Unix socket is
// the admin, a sandboxed tool is the agent whose $OLLIE_AGENT_TOKEN it
// presents (see NewConn), and a TCP client is "none".
func DialAs(addr, uname string) (*Conn, error) {
	return DialTimeout(addr, uname, DefaultHandshakeTimeout)
}

// DialTimeout is DialAs with the connect, Tversion and Tattach bounded by
// d together: a server that accepts and answers nothing (a hung or
// hostile host behind ollie-remote's tunnel) is a *DialError saying so.
//
// On a Unix socket it sends nothing until it knows whom it talks to.
// The namespace's own socket (nsdir.SocketPath(), the default) must lie
// in a directory nsdir.Check accepts: the user's, not a link, mode 0700.
// And the process at the other end must run as the user (the effective
// uid, from SO_PEERCRED), whoever made the socket: that is what keeps
// another local user who made /tmp/ns.$USER.$DISPLAY first from playing
// the namespace. Root may name another user's socket (a test attaching
// to a user's daemon as its admin), but not in its own namespace
// directory. A refusal is a *DialError wrapping a *nsdir.DirError or a
// *PeerError (see IsUntrusted).
func DialTimeout(addr, uname string, d time.Duration) (*Conn, error) {
	network, address, err := splitAddr(addr)
	if err != nil {
		return nil, err
	}
	ownNS := false
	if network == "unix" {
		ownNS = filepath.Clean(address) == filepath.Clean(nsdir.SocketPath())
		if ownNS {
			if err := nsdir.Check(filepath.Dir(address)); err != nil {
				return nil, &DialError{Addr: address, Err: err, unix: true}
			}
		}
	}
	dl := net.Dialer{Timeout: d}
	nc, err := dl.Dial(network, address)
	if err != nil {
		return nil, &DialError{Addr: address, Err: err, unix: network == "unix"}
	}
	if network == "unix" {
		if err := checkPeer(nc, address, ownNS); err != nil {
			nc.Close()
			return nil, &DialError{Addr: address, Err: err, unix: true}
		}
	}
	nc.SetDeadline(time.Now().Add(d))
	c, err := NewConn(nc, uname)
	if err != nil {
		nc.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("no answer to the 9P handshake within %v: %w", d, err)
		}
		return nil, &DialError{Addr: address, Err: err, unix: network == "unix"}
	}
	nc.SetDeadline(time.Time{})
	c.addr = address
	return c, nil
}

// peerUID reads the uid at a Unix socket's other end; a test stands in
// another user's process.
var peerUID = defaultPeerUID

var defaultPeerUID = peer.UID

// checkPeer refuses a Unix socket whose other end does not run as this
// user (see admitPeer). ownNS is whether it is the namespace's socket.
func checkPeer(nc net.Conn, sock string, ownNS bool) error {
	uid, err := peerUID(nc)
	if err != nil {
		return fmt.Errorf("whom the socket belongs to is unknown, so nothing was sent to it: %w", err)
	}
	if admitPeer(uid, os.Geteuid(), ownNS) {
		return nil
	}
	pe := &PeerError{Socket: sock, UID: uid}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		pe.Owner = u.Username
	}
	return pe
}

// admitPeer is whether a client running as uid me talks to a server
// running as uid peer. Only its own: a root-run server is not the
// user's, as none serves a user today. Root may name another user's
// socket (ownNS false), as it could read that user's files anyway; in
// root's own namespace directory, the server must be root's.
func admitPeer(peer, me int, ownNS bool) bool {
	return peer == me || (me == 0 && !ownNS)
}

// splitAddr turns an ollie address into a network and address for net.Dial.
func splitAddr(addr string) (network, address string, err error) {
	if addr == "" {
		return "unix", nsdir.SocketPath(), nil
	}
	if netw, rest, ok := strings.Cut(addr, "!"); ok {
		switch netw {
		case "unix":
			return "unix", rest, nil
		case "tcp", "net":
			host, port, ok := strings.Cut(rest, "!")
			if ok && host != "" && port != "" && !strings.Contains(port, "!") {
				return "tcp", net.JoinHostPort(host, port), nil
			}
		}
		return "", "", fmt.Errorf("ollie: bad address %q: use a socket path, tcp!HOST!PORT or HOST:PORT", addr)
	}
	if !strings.Contains(addr, "/") {
		if _, _, err := net.SplitHostPort(addr); err == nil {
			return "tcp", addr, nil
		}
	}
	return "unix", addr, nil
}

// NewConn speaks 9P over rwc, which it then owns, and attaches as uname.
func NewConn(rwc io.ReadWriteCloser, uname string) (*Conn, error) {
	w := newWire(rwc)
	c, err := p9.NewConn(w)
	if err != nil {
		rwc.Close()
		return nil, err
	}
	fsys, err := c.Attach(nil, uname, os.Getenv(TokenEnv))
	if err != nil {
		c.Close()
		if ferr := w.failed(); errors.Is(err, errLost) && ferr != nil {
			// Why the connection failed (the server broke the protocol,
			// say), not that it did.
			err = ferr
		}
		return nil, err
	}
	addr := "the namespace"
	if nc, ok := rwc.(net.Conn); ok && nc.RemoteAddr() != nil {
		addr = nc.RemoteAddr().String()
	}
	return &Conn{addr: addr, w: w, c: c, fsys: fsys}, nil
}

// Close ends the conversation; calls in flight return errors.
func (c *Conn) Close() error { return c.c.Close() }

// Err returns why the connection failed (a server breaking the protocol
// is an error for which IsProtocolError reports true), or nil while it
// holds.
func (c *Conn) Err() error { return c.w.failed() }

// Interrupt cuts short every walk, open, read, write and stat in flight on
// c: each is flushed, and its call returns an error for which
// IsInterrupted reports true (unless the call completed first). Calls
// started afterwards are not affected. Interrupt does not wait, and may be
// called concurrently and more than once.
func (c *Conn) Interrupt() { c.w.interrupt(0) }

// watch interrupts c's calls once ctx is done, until stop is called.
// Requests sent after ctx ends are flushed as they are sent, so a call
// that had not yet reached a blocking read when ctx ended still returns.
//
// Interruption is per connection: ending the context of one call cuts
// short every call in flight on c. Use one Conn per activity that must be
// interrupted on its own.
func (c *Conn) watch(ctx context.Context) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-ctx.Done():
			c.w.interrupt(+1)
			<-done
			c.w.interrupt(-1)
		case <-done:
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
