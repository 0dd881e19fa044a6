package appliance

// Limits on what a client that has not logged in can make the listener
// hold, as OpenSSH's sshd sets them (MaxStartups, PerSourceMaxStartups,
// LoginGraceTime), and on what a read-only key can: its sessions.

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
)

// Startups is OpenSSH's MaxStartups, start:rate:full: with Start or more
// connections not yet logged in, a new connection is dropped with the
// chance Rate%, rising linearly to 100% at Full.
type Startups struct {
	Start, Rate, Full int
}

// Defaults for the Server's limits.
var DefaultMaxStartups = Startups{Start: 10, Rate: 30, Full: 100}

const (
	// DefaultMaxStartupsPerSource is half of DefaultMaxStartups.Start:
	// one address alone, holding all it may, never brings the listener
	// to drop anyone else's connection.
	DefaultMaxStartupsPerSource = 5
	DefaultLoginGraceTime       = 30 * time.Second
	// DefaultMaxReadOnlySessions fits, at up to two connections each (an
	// sftp session's), the namespace's 16 connections for peers it
	// reads as none (ns.DefaultMaxRemoteConns).
	DefaultMaxReadOnlySessions = 8
)

// dropChance is the percentage of new connections MaxStartups drops
// with n not yet logged in: OpenSSH's should_drop_connection, to the
// integer division.
func dropChance(n int, m Startups) int {
	switch {
	case n < m.Start:
		return 0
	case n >= m.Full || m.Rate >= 100:
		return 100
	}
	return (100-m.Rate)*(n-m.Start)/(m.Full-m.Start) + m.Rate
}

// startups counts the connections not yet logged in, in all and by
// source.
type startups struct {
	mu       sync.Mutex
	n        int
	bySource map[netip.Prefix]int
}

// take counts in a connection from src, or names the limit that drops
// it.
func (st *startups) take(src netip.Prefix, m Startups, perSource int, intn func(int) int) (limit string, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.bySource[src] >= perSource {
		return "MaxStartupsPerSource", st.n
	}
	if p := dropChance(st.n, m); p >= 100 || p > 0 && intn(100) < p {
		return "MaxStartups", st.n
	}
	if st.bySource == nil {
		st.bySource = map[netip.Prefix]int{}
	}
	st.bySource[src]++
	st.n++
	return "", st.n
}

// give counts out a connection from src: it logged in or closed.
func (st *startups) give(src netip.Prefix) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.n--
	if st.bySource[src]--; st.bySource[src] <= 0 {
		delete(st.bySource, src)
	}
}

// source is the block a per-source limit counts addr in: its IPv4
// address, or its IPv6 /64, as one host holds a whole /64. An address
// that is not IP (a Unix socket's) is one source, the zero Prefix.
func source(addr net.Addr) (netip.Prefix, string) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}, addr.String()
	}
	ip := ta.AddrPort().Addr().Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p, ip.String()
}

// dropMessage is the line a dropped connection reads before its end, in
// place of the version line (RFC 4253 4.2 lets lines come before it;
// OpenSSH's client shows them).
const dropMessage = "ollie: too many connections not yet logged in; try again later\r\n"

// admit decides, in the accepting goroutine, whether nc is served: not
// when a limit on connections not yet logged in drops it.
func (s *Server) admit(nc net.Conn) (serve func()) {
	src, from := source(nc.RemoteAddr())
	limit, n := s.startups.take(src, s.MaxStartups, s.MaxStartupsPerSource, s.intn)
	if limit != "" {
		s.limited(limit, from, "unauthenticated", n)
		// A fresh socket's send buffer takes the line at once; the
		// deadline only bounds a surprise.
		nc.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		nc.Write([]byte(dropMessage))
		nc.Close()
		return nil
	}
	c := &conn{Conn: nc, s: s, src: src, from: from, pending: true}
	return func() { s.serveConn(c) }
}

// A conn is one connection the listener serves, counted in startups
// until it logs in.
type conn struct {
	net.Conn
	s     *Server
	src   netip.Prefix
	from  string
	grace *time.Timer // LoginGraceTime's; set before the handshake begins

	mu      sync.Mutex
	pending bool // not logged in, and counted in s.startups
	expired bool // closed by LoginGraceTime
}

type connKey struct{}

// serveConn runs the SSH connection on c until it ends.
func (s *Server) serveConn(c *conn) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.Close()
		c.ended()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.grace = time.AfterFunc(s.LoginGraceTime, c.expire)
	s.srv.HandleConn(c) // closes c
	c.ended()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// expire closes c if it has not logged in.
func (c *conn) expire() {
	c.mu.Lock()
	if !c.pending {
		c.mu.Unlock()
		return
	}
	c.expired = true
	c.mu.Unlock()
	c.s.limited("LoginGraceTime", c.from, "after", c.s.LoginGraceTime)
	c.Close()
}

// loggedIn counts c out of the connections not yet logged in.
func (c *conn) loggedIn() {
	c.mu.Lock()
	if !c.pending || c.expired {
		c.mu.Unlock()
		return
	}
	c.pending = false
	c.mu.Unlock()
	c.grace.Stop()
	c.s.startups.give(c.src)
}

// ended counts c out, if it never logged in.
func (c *conn) ended() {
	if c.grace != nil {
		c.grace.Stop()
	}
	c.mu.Lock()
	was := c.pending
	c.pending = false
	c.mu.Unlock()
	if was {
		c.s.startups.give(c.src)
	}
}

// bindConn ties the connection's context to its conn (gliderlabs'
// ConnCallback): the handshake's configuration finds it there.
func bindConn(ctx gliderssh.Context, nc net.Conn) net.Conn {
	if c, ok := nc.(*conn); ok {
		ctx.SetValue(connKey{}, c)
	}
	return nc
}

// handshakeConfig is each connection's x/crypto configuration, before
// gliderlabs adds the host key and the authentication callbacks: it
// learns when the connection has logged in, the one success x/crypto
// reports to AuthLogCallback (a key that is only queried is not).
func handshakeConfig(ctx gliderssh.Context) *ssh.ServerConfig {
	c, _ := ctx.Value(connKey{}).(*conn)
	return &ssh.ServerConfig{
		AuthLogCallback: func(_ ssh.ConnMetadata, _ string, err error) {
			if err == nil && c != nil {
				c.loggedIn()
			}
		},
	}
}

// handshakeFailed logs a handshake that failed (a password login, no key
// accepted, a scanner), once per kind of cause in each limitLogEvery; one
// closed by a limit or Shutdown was logged there. The kinds are few, as
// the causes' texts are not: they carry addresses, and what the client
// said.
func (s *Server) handshakeFailed(nc net.Conn, err error) {
	if errors.Is(err, net.ErrClosed) {
		return
	}
	_, from := source(nc.RemoteAddr())
	kind := "other"
	var ae *ssh.ServerAuthError
	switch {
	case errors.As(err, &ae):
		kind = "no login"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		kind = "closed by the client"
	}
	if ok, unlogged := s.limitLog.note("handshake: "+kind, time.Now()); ok {
		s.Log.Warn("sshd: refused", "what", "handshake", "from", from, "err", err, "unlogged", unlogged)
	}
}

// takeReadOnly counts in a read-only key's session, unless
// MaxReadOnlySessions are open.
func (s *Server) takeReadOnly() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readOnlySessions >= s.MaxReadOnlySessions {
		return false
	}
	s.readOnlySessions++
	return true
}

func (s *Server) giveReadOnly() {
	s.mu.Lock()
	s.readOnlySessions--
	s.mu.Unlock()
}

// limited logs what a limit refused: the first at once, then one every
// limitLogEvery for each limit, with the source of the one logged and
// how many went unlogged since the last.
func (s *Server) limited(limit, from string, args ...any) {
	if ok, unlogged := s.limitLog.note(limit, time.Now()); ok {
		s.Log.Warn("sshd: limit", append([]any{"limit", limit, "from", from}, append(args, "unlogged", unlogged)...)...)
	}
}

// limitLogEvery is how often each limit, and each kind of failed
// handshake, is logged while it keeps refusing.
const limitLogEvery = 10 * time.Second

// rateLog rate-limits a log by kind; the kinds are a few constants.
type rateLog struct {
	mu       sync.Mutex
	last     map[string]time.Time
	unlogged map[string]int
}

// note counts one of kind and reports whether to log it, with how many
// went unlogged since the last that was.
func (r *rateLog) note(kind string, now time.Time) (logIt bool, unlogged int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.last[kind]; ok && now.Sub(last) < limitLogEvery {
		r.unlogged[kind]++
		return false, 0
	}
	if r.last == nil {
		r.last, r.unlogged = map[string]time.Time{}, map[string]int{}
	}
	unlogged = r.unlogged[kind]
	r.last[kind], r.unlogged[kind] = now, 0
	return true, unlogged
}
