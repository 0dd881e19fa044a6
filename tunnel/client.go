package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// ErrClosed is returned by a Client or Host used after Close.
var ErrClosed = errors.New("tunnel: closed")

// maxJumpDepth bounds ProxyJump chains whose first hop has a ProxyJump of
// its own, so that a config loop ends in an error.
const maxJumpDepth = 8

// Client is one SSH connection carrying everything for a host: command
// sessions, the SFTP subsystem and forwarded Unix sockets.
type Client struct {
	target *Target
	conn   *ssh.Client
	jumps  []*ssh.Client // the hops, first hop first; closed with conn
	log    *slog.Logger
	sem    chan struct{}

	done      chan struct{}
	errMu     sync.Mutex
	err       error
	closeOnce sync.Once

	sftpMu sync.Mutex
	sftp   *sftp.Client
}

// Dial connects to alias, through its ProxyJump hops if it has any, and
// verifies every host key on the way.
func Dial(ctx context.Context, alias string, o Options) (*Client, error) {
	t, err := Resolve(alias, o)
	if err != nil {
		return nil, err
	}
	return dialTarget(ctx, t, o)
}

func dialTarget(ctx context.Context, t *Target, o Options) (*Client, error) {
	log := o.logger()
	conn, jumps, err := connectChain(ctx, t, o, 0)
	if err != nil {
		log.Info("dial failed", "alias", t.Alias, "err", err)
		return nil, err
	}
	c := &Client{
		target: t,
		conn:   conn,
		jumps:  jumps,
		log:    log,
		sem:    make(chan struct{}, o.maxSessions()),
		done:   make(chan struct{}),
	}
	log.Info("connected", "alias", t.Alias, "addr", t.Addr(), "user", t.User, "via", t.ProxyJump)
	go c.watch()
	if t.AliveInterval > 0 {
		go c.keepalive(t.AliveInterval, t.AliveCountMax)
	}
	return c, nil
}

// connectChain connects to t through its hops. As with ssh -J, the first
// hop's own ProxyJump is honoured and later hops are reached through the
// ones before them.
func connectChain(ctx context.Context, t *Target, o Options, depth int) (*ssh.Client, []*ssh.Client, error) {
	if depth > maxJumpDepth {
		return nil, nil, &ConfigError{Err: fmt.Errorf("%s: ProxyJump chain deeper than %d (a loop?)", t.Alias, maxJumpDepth)}
	}
	var via *ssh.Client
	var jumps []*ssh.Client
	fail := func(err error) (*ssh.Client, []*ssh.Client, error) {
		for i := len(jumps) - 1; i >= 0; i-- {
			jumps[i].Close()
		}
		return nil, nil, err
	}
	// An Override is the target's alone: hops are what the config says.
	ho := o
	ho.Override = nil
	for i, alias := range t.ProxyJump {
		hop, err := Resolve(alias, ho)
		if err != nil {
			return fail(err)
		}
		if i == 0 {
			c, js, err := connectChain(ctx, hop, ho, depth+1)
			if err != nil {
				return fail(err)
			}
			jumps = append(jumps, js...)
			jumps = append(jumps, c)
			via = c
			interactive(c)
			continue
		}
		c, err := connectOne(ctx, hop, o, via)
		if err != nil {
			return fail(err)
		}
		jumps = append(jumps, c)
		via = c
		interactive(c)
	}
	c, err := connectOne(ctx, t, o, via)
	if err != nil {
		return fail(err)
	}
	return c, jumps, nil
}

// interactive runs an empty command on a jump host's connection, best
// effort: sshd turns on TCP_NODELAY for a connection only once a session
// ran on it, and a jump connection otherwise carries only forwarded
// channels, whose small packets Nagle's algorithm then holds for a delayed
// ACK (a deploy through a jump host ran ten times slower).
func interactive(c *ssh.Client) {
	s, err := c.NewSession()
	if err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		s.Run("true")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
	s.Close()
}

// connectOne dials t directly or through via, within t.ConnectTimeout for
// both the TCP connection and the SSH handshake.
func connectOne(ctx context.Context, t *Target, o Options, via *ssh.Client) (*ssh.Client, error) {
	log := o.logger()
	hk, err := newHostKeys(t, o.AcceptNew, log)
	if err != nil {
		return nil, err
	}
	keys := loadKeyring(t, log)
	defer keys.close()
	cfg := &ssh.ClientConfig{
		User:              t.User,
		HostKeyCallback:   hk.check,
		HostKeyAlgorithms: hk.algorithms(),
	}
	keys.configure(cfg, t)

	ctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	addr := t.Addr()
	how := ""
	var nc net.Conn
	if via == nil {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		how = " through " + via.User() + "@" + via.RemoteAddr().String()
		nc, err = via.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v (ConnectTimeout): %w", t.ConnectTimeout, err)
		}
		return nil, fmt.Errorf("tunnel: %s: connect to %s%s: %w", t.Alias, addr, how, err)
	}
	// x/crypto has no context for the handshake, and a channel through a
	// jump host has no deadlines: closing the connection ends it.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(nc, addr, cfg)
	if !stop() {
		if sc != nil {
			sc.Close()
		}
		cause := ctx.Err()
		if errors.Is(cause, context.DeadlineExceeded) {
			cause = fmt.Errorf("no answer within %v (ConnectTimeout): %w", t.ConnectTimeout, cause)
		}
		return nil, fmt.Errorf("tunnel: %s: ssh handshake with %s%s: %w", t.Alias, addr, how, cause)
	}
	if err != nil {
		if r := refusal(err); r != nil {
			log.Info("ssh handshake refused", "alias", t.Alias, "addr", addr, "cause", err)
			return nil, r
		}
		return nil, fmt.Errorf("tunnel: %s: ssh handshake with %s%s: %w", t.Alias, addr, how, err)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// refusal digs out of a handshake error the refusals that carry their own
// message for users, so that the "ssh: handshake failed" wrapping does
// not bury it.
func refusal(err error) error {
	var (
		ue *UnknownHostError
		ce *ChangedHostKeyError
		re *RevokedHostKeyError
		ae *AuthError
	)
	switch {
	case errors.As(err, &ue):
		return ue
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &re):
		return re
	case errors.As(err, &ae):
		return ae
	}
	return nil
}

// Permanent reports whether err is one that retrying does not mend: an
// unknown, changed or revoked host key, refused authentication, a bad
// ssh config, or a name that does not resolve (a typo, not an outage: a
// resolver that cannot be reached fails otherwise).
func Permanent(err error) bool {
	var ce *ConfigError
	var dns *net.DNSError
	return refusal(err) != nil || errors.As(err, &ce) || errors.As(err, &dns) && dns.IsNotFound
}

// Target returns what the client's alias resolved to.
func (c *Client) Target() *Target { return c.target }

// SSH returns the underlying connection, for what this package does not
// wrap. Session channels opened on it do not count against MaxSessions.
func (c *Client) SSH() *ssh.Client { return c.conn }

// ApplianceVersion is how ollie's own SSH listener (appliance) names itself
// in the SSH version exchange.
const ApplianceVersion = "SSH-2.0-ollie"

// Appliance reports whether the host's SSH server is ollie's own listener
// rather than OpenSSH: then there is no shell to run scripts and no
// filesystem SFTP, and deploy and up use the listener's olliesrv commands.
// It is the server's word, trusted only to choose which commands to send.
func (c *Client) Appliance() bool {
	return c.conn != nil && string(c.conn.ServerVersion()) == ApplianceVersion
}

// Done is closed when the connection has dropped or was closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why the connection ended: ErrClosed after Close, the cause of
// a drop otherwise; nil while it is up.
func (c *Client) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// fail records why the connection ends (the first reason wins) and closes it.
func (c *Client) fail(err error) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.errMu.Unlock()
	c.closeOnce.Do(func() {
		c.conn.Close()
		for i := len(c.jumps) - 1; i >= 0; i-- {
			c.jumps[i].Close()
		}
	})
}

// Close closes the connection, its sessions, SFTP client and forwards.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

func (c *Client) watch() {
	err := c.conn.Wait()
	if err == nil {
		err = io.EOF
	}
	c.fail(fmt.Errorf("tunnel: %s: connection lost: %w", c.target.Alias, err))
	c.sftpMu.Lock()
	if c.sftp != nil {
		c.sftp.Close()
	}
	c.sftpMu.Unlock()
	c.log.Info("disconnected", "alias", c.target.Alias, "err", c.Err())
	close(c.done)
}

// keepalive sends keepalive@openssh.com every interval and closes the
// connection when max of them in a row go unanswered: a path that died
// silently (a NAT dropping state, a frozen host) shows no error otherwise.
func (c *Client) keepalive(interval time.Duration, max int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	replies := make(chan error, 1)
	pending, missed := false, 0
	for {
		select {
		case <-c.done:
			return
		case err := <-replies:
			pending, missed = false, 0
			if err != nil {
				return
			}
		case <-tick.C:
			if pending {
				missed++
				if missed >= max {
					c.log.Info("keepalive unanswered; closing", "alias", c.target.Alias, "missed", missed)
					c.fail(fmt.Errorf("tunnel: %s: connection lost: no answer to %d keepalives in %v (ServerAliveInterval %v, ServerAliveCountMax %d)",
						c.target.Alias, missed, time.Duration(missed)*interval, interval, max))
					return
				}
				continue
			}
			pending = true
			go func() {
				// OpenSSH answers with a failure; any answer means it is alive.
				_, _, err := c.conn.SendRequest("keepalive@openssh.com", true, nil)
				replies <- err
			}()
		}
	}
}

// acquire takes a session slot, so that no more than MaxSessions session
// channels are open at once: sshd refuses the ones past its MaxSessions.
func (c *Client) acquire(ctx context.Context) (release func(), err error) {
	select {
	case c.sem <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-c.sem }) }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-c.done:
		return nil, c.Err()
	}
}

func (c *Client) newSession() (*ssh.Session, error) {
	var s *ssh.Session
	err := c.retryOpen(func() error {
		var err error
		s, err = c.conn.NewSession()
		return err
	})
	return s, err
}

// retryOpen retries a session open that sshd refused for a short while.
// sshd frees a session's slot some time after the channel is closed, so a
// client that keeps under MaxSessions by its own count may still be
// refused ("open failed") for a moment after a session ends.
func (c *Client) retryOpen(open func() error) error {
	delay := 5 * time.Millisecond
	for i := 0; ; i++ {
		err := open()
		var oce *ssh.OpenChannelError
		if err == nil || !errors.As(err, &oce) || oce.Reason != ssh.ConnectionFailed || i == 7 {
			return err
		}
		select {
		case <-time.After(delay):
		case <-c.done:
			return err
		}
		delay *= 2
	}
}

// ExitError is a remote command that ran and failed.
type ExitError struct {
	Alias  string
	Cmd    string
	Status int    // exit status; -1 when killed by a signal
	Signal string // the signal's name ("TERM") when killed by one
	Stderr []byte
}

func (e *ExitError) Error() string {
	how := fmt.Sprintf("exit status %d", e.Status)
	if e.Signal != "" {
		how = "killed by SIG" + e.Signal
	}
	msg := fmt.Sprintf("tunnel: %s: %s: %s", e.Alias, e.Cmd, how)
	if s := lastLine(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// DefaultMaxOutput is the standard output Run keeps: enough for a deploy's
// manifest and reports, little enough that a host cannot fill the
// desktop's memory.
const DefaultMaxOutput = 1 << 20

// maxStderr is how much of a command's standard error is kept, for its
// ExitError: the first bytes; the rest is read and discarded.
const maxStderr = 64 << 10

// OutputError is a command that wrote more standard output than its
// caller's limit. The command was stopped (SIGTERM, channel closed) and
// none of its output is returned.
type OutputError struct {
	Alias string
	Cmd   string
	Limit int64
}

func (e *OutputError) Error() string {
	return fmt.Sprintf("tunnel: %s: %s: more than %d bytes of output; stopped", e.Alias, e.Cmd, e.Limit)
}

// Run runs cmd through the user's login shell on the host and returns its
// standard output, at most DefaultMaxOutput bytes of it (see RunLimit). A
// command that fails returns its output so far and an *ExitError holding
// its status and the first 64 KiB of its standard error; a connection
// that fails returns another error. stdin, if not nil, is read to its
// end. Cancelling ctx sends SIGTERM to the command and closes its
// channel.
func (c *Client) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	return c.RunLimit(ctx, cmd, stdin, DefaultMaxOutput)
}

// RunLimit is Run keeping at most limit bytes of standard output: past
// them the command is stopped as a cancelled one is and RunLimit returns
// an *OutputError, so that what a host prints never grows the caller.
func (c *Client) RunLimit(ctx context.Context, cmd string, stdin io.Reader, limit int64) ([]byte, error) {
	release, err := c.acquire(ctx)
	if err != nil {
		if errors.Is(err, context.Cause(ctx)) {
			return nil, fmt.Errorf("tunnel: %s: %s: waiting for a free session: %w", c.target.Alias, cmd, err)
		}
		return nil, err
	}
	s, err := c.newSession()
	if err != nil {
		release()
		if cerr := c.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("tunnel: %s: open session: %w", c.target.Alias, err)
	}
	stdout := &capWriter{limit: limit, over: make(chan struct{})}
	stderr := &capWriter{limit: maxStderr}
	s.Stdout, s.Stderr, s.Stdin = stdout, stderr, stdin
	if err := s.Start(cmd); err != nil {
		s.Close()
		release()
		return nil, fmt.Errorf("tunnel: %s: start %s: %w", c.target.Alias, cmd, err)
	}
	waited := make(chan error, 1)
	go func() {
		err := s.Wait()
		s.Close()
		// The slot is free only once the channel is, not when Run returns.
		release()
		waited <- err
	}()
	select {
	case err = <-waited:
	case <-stdout.over:
		s.Signal(ssh.SIGTERM)
		s.Close()
		return nil, &OutputError{Alias: c.target.Alias, Cmd: cmd, Limit: limit}
	case <-ctx.Done():
		s.Signal(ssh.SIGTERM)
		s.Close()
		select {
		case <-waited:
		case <-time.After(time.Second):
			// The copies may still write to stdout: return none of it.
			return nil, fmt.Errorf("tunnel: %s: %s: %w", c.target.Alias, cmd, context.Cause(ctx))
		}
		return stdout.Bytes(), fmt.Errorf("tunnel: %s: %s: %w", c.target.Alias, cmd, context.Cause(ctx))
	}
	if stdout.exceeded() {
		// Past the limit just as the command ended.
		return nil, &OutputError{Alias: c.target.Alias, Cmd: cmd, Limit: limit}
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		x := &ExitError{Alias: c.target.Alias, Cmd: cmd, Status: ee.ExitStatus(), Signal: ee.Signal(), Stderr: stderr.Bytes()}
		if x.Signal != "" {
			x.Status = -1
		}
		return stdout.Bytes(), x
	}
	if cerr := c.Err(); cerr != nil {
		return stdout.Bytes(), fmt.Errorf("tunnel: %s: %s: %w", c.target.Alias, cmd, cerr)
	}
	return stdout.Bytes(), fmt.Errorf("tunnel: %s: %s: %w", c.target.Alias, cmd, err)
}

// capWriter keeps the first limit bytes written to it. Past them it
// discards the rest and, if over is set, closes over once, so that the
// command is stopped rather than read to its end.
type capWriter struct {
	buf   bytes.Buffer
	limit int64
	over  chan struct{}
	once  sync.Once
	past  bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.limit - int64(w.buf.Len())
	if int64(len(p)) <= room {
		w.buf.Write(p)
		return len(p), nil
	}
	if room > 0 {
		w.buf.Write(p[:room])
	}
	w.past = true
	if w.over != nil {
		w.once.Do(func() { close(w.over) })
	}
	return len(p), nil
}

// Bytes and exceeded may be called once the session's copies have ended.
func (w *capWriter) Bytes() []byte  { return w.buf.Bytes() }
func (w *capWriter) exceeded() bool { return w.past }

// SFTP returns the connection's SFTP client, opening it on first use. It
// is shared: callers must not Close it (Client.Close does). If it fails
// or was closed anyway, the next call opens another.
func (c *Client) SFTP() (*sftp.Client, error) {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	if c.sftp != nil {
		return c.sftp, nil
	}
	release, err := c.acquire(context.Background())
	if err != nil {
		return nil, err
	}
	var sc *sftp.Client
	err = c.retryOpen(func() error {
		var err error
		// Many writes in flight: one 32 KiB write per round trip would
		// make a deploy over a 50 ms link take 40 s for the binary alone.
		sc, err = sftp.NewClient(c.conn, sftp.UseConcurrentWrites(true))
		return err
	})
	if err != nil {
		release()
		if cerr := c.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("tunnel: %s: sftp: %w", c.target.Alias, err)
	}
	c.sftp = sc
	go func() {
		sc.Wait()
		release()
		c.sftpMu.Lock()
		if c.sftp == sc {
			c.sftp = nil
		}
		c.sftpMu.Unlock()
	}()
	return sc, nil
}

// DialUnix connects to a Unix socket on the host (direct-streamlocal),
// as the login user.
func (c *Client) DialUnix(path string) (net.Conn, error) {
	conn, err := c.conn.Dial("unix", path)
	if err != nil {
		if cerr := c.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("tunnel: %s: connect to socket %s on the host: %w", c.target.Alias, path, err)
	}
	return conn, nil
}

// ListenUnix has sshd listen on a Unix socket on the host and forward its
// connections here (streamlocal-forward). sshd refuses to bind over an
// existing file unless StreamLocalBindUnlink is set, which it is not by
// default; so when the first request is refused and a socket (only a
// socket) is left at path, ListenUnix removes it over SFTP and asks again.
func (c *Client) ListenUnix(path string) (net.Listener, error) {
	ln, err := c.conn.ListenUnix(path)
	if err == nil {
		return ln, nil
	}
	if cerr := c.Err(); cerr != nil {
		return nil, cerr
	}
	if sc, serr := c.SFTP(); serr == nil {
		if fi, lerr := sc.Lstat(path); lerr == nil && fi.Mode()&os.ModeSocket != 0 {
			if rerr := sc.Remove(path); rerr == nil {
				c.log.Info("removed stale socket before forwarding", "alias", c.target.Alias, "path", path)
				if ln, err = c.conn.ListenUnix(path); err == nil {
					return ln, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("tunnel: %s: forward socket %s on the host: %w (sshd needs AllowStreamLocalForwarding, and the login user must be able to create the file)",
		c.target.Alias, path, err)
}
