package keeper

// The approval channel: for as long as it holds a host, the keeper keeps
// the host's registration of this desktop's broker true.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"ollie/broker/desktop"
	"ollie/ns/client"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
)

// The approval channel's states, for status: ok when the host's daemon
// lists this desktop's socket and the keeper watches it; registering
// while it is being written; missing, with the reason, otherwise.
const (
	ApprovalsOK          = "ok"
	ApprovalsRegistering = "registering"
	ApprovalsMissing     = "missing"
)

// carryApprovals forwards, for every SSH connection to the host, a fresh
// socket on the host to the desktop broker (a leftover file from an
// earlier connection can never block it) and registers it in the host's
// bypass/broker, then keeps it registered (keepRegistered). Requests that
// arrive on it are from this host: the broker takes the host's name from
// here (approvalName), never from the request. When the host is let go it removes its
// own registration and socket, no other keeper's.
//
// Each socket has a key of its own, given to the daemon with the
// registration and checked in every request: sshd's socket is open to
// every process of the host's user, sandboxed tools included, and only
// olliesrv has the key.
func (h *heldHost) carryApprovals(b *desktop.Broker, log *slog.Logger) {
	defer close(h.approvalsDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.stop
		cancel()
	}()
	prev := "" // the socket of the connection before, which the host should drop
	for delay := 250 * time.Millisecond; ctx.Err() == nil; {
		c, err := h.th.Client(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.setApprovals(ApprovalsMissing+": no SSH connection: "+err.Error(), "")
			if tunnel.Permanent(err) {
				return
			}
			sleepCtx(ctx, delay)
			continue
		}
		h.setApprovals(ApprovalsRegistering, "")
		h.mu.Lock()
		path := filepath.Join(filepath.Dir(h.remoteSock), "broker-"+deploy.RandomHex(8))
		h.mu.Unlock()
		ln, err := c.ListenUnix(path)
		if err != nil {
			log.Warn("ollie-remote: approvals from this host cannot reach the desktop", "err", err)
			h.setApprovals(ApprovalsMissing+": "+err.Error(), "")
			delay = backOff(c.Done(), ctx.Done(), delay)
			continue
		}
		delay = 250 * time.Millisecond
		key := make([]byte, 32)
		rand.Read(key)
		go desktop.ServeApprovalsAs(b, h.approvalName, ln, key)
		h.keepRegistered(ctx, c, path, hex.EncodeToString(key), prev, log)
		prev = path
		if ctx.Err() != nil {
			h.unregister(c, path, ln, log)
			return
		}
		ln.Close()
	}
}

// keepRegistered registers path with the host's daemon and keeps it
// registered until c or ctx ends. It watches bypass.broker events on a 9P
// connection of its own: a daemon that is new (restarted, crashed and
// started again, upgraded by deploy) ends that connection, and one that
// dropped the registration says so; either way it registers again, within
// a second of the daemon answering. prev, if set, is the socket of an
// earlier connection, which it removes once path is registered.
func (h *heldHost) keepRegistered(ctx context.Context, c *tunnel.Client, path, key, prev string, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	var gone time.Time      // since when the daemon does not answer
	var broke time.Duration // the wait after a connection that broke the protocol
	for wait := time.Duration(0); sleepCtx(ctx, wait); {
		nc, err := h.nsConn(ctx, c)
		if client.IsProtocolError(err) {
			broke = h.broke(err, broke, path, log)
			wait = broke
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if gone.IsZero() {
				gone = time.Now()
				log.Info("ollie-remote: olliesrv does not answer on the host; approvals are registered again once it does", "err", err)
			}
			h.setApprovals(ApprovalsMissing+": olliesrv does not answer on the host", path)
			// Soon after a restart the new daemon answers within a
			// second; one stopped for good is asked less often.
			wait = min(max(2*wait, 50*time.Millisecond), 250*time.Millisecond)
			if time.Since(gone) > time.Minute {
				wait = 5 * time.Second
			}
			// One that died is started again (restart.go), and
			// answers now.
			if h.revive(ctx, c, log) {
				wait = 0
			}
			continue
		}
		gone, wait = time.Time{}, 0
		h.daemonAnswers(c, log)
		start := time.Now()
		err = h.watchRegistration(ctx, nc, path, key, &prev, log)
		cerr := nc.Err()
		nc.Close()
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			broke = 0
		}
		if client.IsProtocolError(cerr) {
			broke = h.broke(cerr, broke, path, log)
			wait = broke
			continue
		}
		if client.IsServerError(err) {
			// The daemon refused the socket (gone from the host, say):
			// the caller forwards a fresh one.
			log.Warn("ollie-remote: the host refused this desktop's broker socket", "err", err)
			h.setApprovals(ApprovalsMissing+": "+err.Error(), path)
			sleepCtx(ctx, time.Second)
			return
		}
		// The daemon went: a new one answers soon.
		h.setApprovals(ApprovalsRegistering, path)
		log.Info("ollie-remote: registering approvals again", "reason", err)
	}
}

// broke records that the host's daemon broke the 9P protocol on a
// connection of the keeper's (which the client ended at once): status
// names the host's fault, and the keeper tries again after a wait that
// doubles from a second to 30 s, the last being last. It returns the wait.
func (h *heldHost) broke(err error, last time.Duration, path string, log *slog.Logger) time.Duration {
	wait := min(max(2*last, time.Second), 30*time.Second)
	log.Warn("ollie-remote: olliesrv on the host broke the 9P protocol; disconnected", "err", err, "again_in", wait)
	h.setApprovals(fmt.Sprintf("%s: olliesrv broke the 9P protocol, so the keeper disconnected (%v); trying again in %v", ApprovalsMissing, err, wait), path)
	return wait
}

// watchRegistration registers path with its key (hex) on nc and watches
// that it stays so, until nc fails or ctx ends. It returns why it stopped.
func (h *heldHost) watchRegistration(ctx context.Context, nc *client.Conn, path, key string, prev *string, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := &eventLines{c: make(chan string, 64)}
	subscribed := make(chan error, 1)
	on := make(chan struct{})
	go func() {
		subscribed <- nc.SubscribeFrom(ctx, "event", []byte("bypass.broker"), func() { close(on) }, events)
	}()
	register := func() error {
		if err := nc.Write(ctx, "bypass/broker", []byte(path+" key="+key)); err != nil {
			return err
		}
		h.setApprovals(ApprovalsOK, path)
		if *prev != "" {
			// The earlier connection's socket: sshd left it behind.
			nc.Write(ctx, "bypass/broker", []byte("-"+*prev))
			*prev = ""
		}
		return nil
	}
	// Register once the watch is on, so that the event of our own
	// registration confirms it. Registering again would make this desktop
	// the newest one asked, ahead of a desktop that registered after it:
	// without the event (a loaded host), the list is read instead. A
	// daemon without events is read every 2 s (below).
	select {
	case <-on:
		if err := register(); err != nil {
			return err
		}
	case err := <-subscribed:
		subscribed <- err
	case <-ctx.Done():
		return ctx.Err()
	}
	h.giveModelsKey(ctx, nc, log)
	confirm := time.NewTimer(time.Second)
	defer confirm.Stop()
	var poll <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-subscribed:
			if err == nil || !client.IsServerError(err) {
				return fmt.Errorf("the watch on olliesrv ended: %v", err)
			}
			// The daemon refused the subscription: it is going (it
			// interrupts every Request), or has no event file (an
			// older olliesrv): then read bypass/broker every 2 s.
			if lerr := h.checkListed(ctx, nc, path, register); lerr != nil {
				return fmt.Errorf("the watch on olliesrv ended: %v", err)
			}
			subscribed = nil
			ticker := time.NewTicker(2 * time.Second)
			defer ticker.Stop()
			poll = ticker.C
			confirm.Stop()
		case <-poll:
			if err := h.checkListed(ctx, nc, path, register); err != nil {
				return err
			}
		case <-confirm.C:
			if err := h.checkListed(ctx, nc, path, register); err != nil {
				return err
			}
			confirm.Reset(time.Second)
		case ev := <-events.c:
			topic, data, _ := strings.Cut(ev, " ")
			switch {
			case topic == "bypass.broker" && (data == "+"+path || data == path): // an older olliesrv says PATH
				if confirm.Stop() {
					log.Info("ollie-remote: approvals from the host come to this desktop", "socket", path)
				}
			case topic == "bypass.broker" && data == "-"+path, topic == "event.lost":
				// Dropped (or maybe dropped) while the socket is ours:
				// register again, not in a tight loop.
				if !sleepCtx(ctx, 250*time.Millisecond) {
					return ctx.Err()
				}
				if err := h.checkListed(ctx, nc, path, register); err != nil {
					return err
				}
			}
		}
	}
}

// checkListed reads bypass/broker and registers path again unless it is
// listed.
func (h *heldHost) checkListed(ctx context.Context, nc *client.Conn, path string, register func() error) error {
	// The host writes the file: read no more than a list of sockets holds.
	b, err := nc.ReadLimit(ctx, "bypass/broker", 64<<10)
	if err != nil {
		return err
	}
	if Listed(b, path) {
		h.setApprovals(ApprovalsOK, path)
		return nil
	}
	return register()
}

// Listed reports whether a read of bypass/broker lists path.
func Listed(b []byte, path string) bool {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == path {
			return true
		}
	}
	return false
}

// unregister removes this keeper's registration from the host, and its
// socket (sshd leaves the file), then stops the forward.
func (h *heldHost) unregister(c *tunnel.Client, path string, ln net.Listener, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if nc, err := h.nsConn(ctx, c); err == nil {
		if err := nc.Write(ctx, "bypass/broker", []byte("-"+path)); err != nil {
			log.Info("ollie-remote: removing this desktop's registration", "err", err)
		}
		nc.Close()
	}
	ln.Close()
	// The daemon removes the socket with the registration; if it did not
	// answer, remove it here.
	if c.Appliance() {
		// Its SFTP serves the namespace; the listener removed the socket
		// with the forward.
	} else if sc, err := c.SFTP(); err == nil {
		if fi, err := sc.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			sc.Remove(path)
		}
	}
	h.setApprovals(ApprovalsMissing+": the host is down", "")
}

// nsConn opens a 9P connection of its own to the host's namespace over c,
// the handshake bounded by 10 s.
func (h *heldHost) nsConn(ctx context.Context, c *tunnel.Client) (*client.Conn, error) {
	h.mu.Lock()
	sock := h.remoteSock
	h.mu.Unlock()
	conn, err := c.DialUnix(sock)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	nc, err := client.NewConn(conn, "")
	if !stop() {
		err = fmt.Errorf("olliesrv did not answer the 9P handshake: %w", context.Cause(ctx))
		if nc != nil {
			nc.Close()
		}
	}
	cancel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	return nc, nil
}

// approvalName is the name this host's requests are shown under now
// (keeper.approvalName); status counts what was refused under either.
func (h *heldHost) approvalName() string {
	name := h.name
	if h.named != nil {
		name = h.named(h.name)
	}
	if name != h.name {
		h.mu.Lock()
		h.shownAs = name
		h.mu.Unlock()
	}
	return name
}

func (h *heldHost) setApprovals(state, sock string) {
	h.mu.Lock()
	h.approvals, h.brokerSock = state, sock
	h.mu.Unlock()
}

// sleepCtx waits d, and reports whether ctx is still going.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// eventLines hands the lines written to it to c, whole. The writes come
// from one Subscribe.
type eventLines struct {
	mu   sync.Mutex
	part []byte
	c    chan string
}

func (e *eventLines) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.part = append(e.part, p...)
	for {
		i := bytes.IndexByte(e.part, '\n')
		if i < 0 {
			break
		}
		line := string(e.part[:i])
		e.part = e.part[i+1:]
		select {
		case e.c <- line:
		default:
			// The watcher is behind: say so as the bus would.
			select {
			case e.c <- "event.lost 1":
			default:
			}
		}
	}
	if len(e.part) > 64<<10 {
		return 0, fmt.Errorf("an event line over 64 KiB")
	}
	return len(p), nil
}

// backOff waits delay, or less if the connection or the keeper ends, and
// returns the next wait: twice as long, up to 10 s. A forward that could
// not be made is tried again at once after a reconnect.
func backOff(conn, keeper <-chan struct{}, delay time.Duration) time.Duration {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-conn:
	case <-keeper:
	case <-t.C:
	}
	return min(2*delay, 10*time.Second)
}
