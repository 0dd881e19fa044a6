package shell

import (
	"context"
	"errors"
	"fmt"
	"ollie/host/daemon"
	"ollie/ns/client"
	"os"
	"time"
)

// dialOrStart connects to the namespace at addr; with start set and the
// default namespace not answering, it starts the daemon first, as the
// installed ollie command does for "ssh host ollie". A namespace that is
// not the user's (another user's directory or socket) is refused as it
// is: a daemon started there would refuse it too.
func dialOrStart(addr, uname string, start bool) (*client.Conn, error) {
	c, err := client.DialTimeout(addr, uname, envDuration("OLLIE_HANDSHAKE_TIMEOUT", client.DefaultHandshakeTimeout))
	var de *client.DialError
	if err == nil || !start || addr != "" || !errors.As(err, &de) || client.IsUntrusted(err) {
		return c, err
	}
	exe, xerr := os.Executable()
	if xerr != nil {
		return nil, err
	}
	if daemon.PID() == 0 {
		if _, serr := daemon.StartDetached(exe, 15*time.Second); serr != nil {
			return nil, fmt.Errorf("%w; starting olliesrv: %v", err, serr)
		}
	}
	return client.DialTimeout(addr, uname, envDuration("OLLIE_HANDSHAKE_TIMEOUT", client.DefaultHandshakeTimeout))
}

// requestTimeout bounds an ollie command a person waits on (ls, stat,
// write, rdwr, and the stat a read starts with): $OLLIE_TIMEOUT, default 30 s, 0
// for none. The read itself is not bounded: a stream (chat), a wait
// file (statewait) and a subscription block by design, and nothing on the
// wire says which a file is.
func requestTimeout() time.Duration { return envDuration("OLLIE_TIMEOUT", 30*time.Second) }

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

// noAnswerError is a command cut short because the server answered
// nothing in time. It wraps client.ErrConnLost: ollie exits 3.
type noAnswerError struct {
	Addr  string
	After time.Duration
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("ollie: no answer from %s within %v (set OLLIE_TIMEOUT to wait longer)", e.Addr, e.After)
}

func (e *noAnswerError) Unwrap() error { return client.ErrConnLost }

// bounded returns ctx ended after d (unless d is 0) with a *noAnswerError
// as its cause. Ending it interrupts c's calls; a server that answers
// neither them nor the flush has c closed a second later, so the calls
// return whatever the server does.
func bounded(ctx context.Context, c *client.Conn, addr string, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(ctx)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, d, &noAnswerError{Addr: addr, After: d})
	stop := context.AfterFunc(tctx, func() {
		if _, ok := context.Cause(tctx).(*noAnswerError); ok {
			time.AfterFunc(time.Second, func() { c.Close() })
		}
	})
	return tctx, func() { stop(); cancel() }
}

// timedOut returns the *noAnswerError that ended ctx, if that is what did.
func timedOut(ctx context.Context) error {
	if e, ok := context.Cause(ctx).(*noAnswerError); ok {
		return e
	}
	return nil
}
