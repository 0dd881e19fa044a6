package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"ollie/internal/changes"
)

// Backoff between connection attempts of a Host: it doubles from
// MinBackoff after each failure up to MaxBackoff, and each wait is
// jittered between half and all of it, so that a fleet whose handshakes
// sshd refused at once (MaxStartups) does not come back at once too.
const (
	MinBackoff = 250 * time.Millisecond
	MaxBackoff = 10 * time.Second
)

// Host keeps one connection to a host up. The first Client call dials;
// after a drop it dials again, backing off between failed attempts, until
// Close. Errors that retrying does not mend (see Permanent) stop it.
type Host struct {
	alias string
	o     Options
	log   *slog.Logger

	ctx    context.Context // cancelled by Close, ending dials in flight
	cancel context.CancelFunc

	mu        sync.Mutex
	changed   changes.Counter // bumped under mu at every change below
	client    *Client
	running   bool  // a dial loop is running
	gen       int   // counts dial loops, so a waiter knows its loop ended
	attempt   int   // failed attempts since the last connection
	connected bool  // the loop has been connected once
	lastErr   error // why the last attempt failed or the connection dropped
	permErr   error // the error that stopped the last loop
	closed    bool
}

// NewHost returns a Host for alias. It does not dial until Client.
func NewHost(alias string, o Options) *Host {
	ctx, cancel := context.WithCancel(context.Background())
	return &Host{alias: alias, o: o, log: o.logger(), ctx: ctx, cancel: cancel}
}

// Alias returns the alias the Host was made for.
func (h *Host) Alias() string { return h.alias }

func (h *Host) broadcast() { h.changed.Bump() }

func alive(c *Client) bool {
	if c == nil {
		return false
	}
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

// Client returns the live connection, dialling or waiting for a reconnect
// as needed, until ctx ends. A permanent error (see Permanent) is returned
// as soon as it happens; the next call tries once more, so that a fix (a
// known_hosts entry, an agent key) takes effect without a new Host.
func (h *Host) Client(ctx context.Context) (*Client, error) {
	h.mu.Lock()
	joined := -1
	for {
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		if alive(h.client) {
			c := h.client
			h.mu.Unlock()
			return c, nil
		}
		if !h.running {
			if joined == h.gen && h.permErr != nil {
				err := h.permErr
				h.mu.Unlock()
				return nil, err
			}
			h.gen++
			h.running, h.permErr = true, nil
			go h.loop()
		}
		joined = h.gen
		seen := h.changed.Load()
		h.mu.Unlock()
		if _, err := h.changed.Wait(ctx, seen); err != nil {
			h.mu.Lock()
			last := h.lastErr
			h.mu.Unlock()
			if last != nil {
				return nil, fmt.Errorf("tunnel: %s: not connected (%w): %w", h.alias, context.Cause(ctx), last)
			}
			return nil, fmt.Errorf("tunnel: %s: not connected: %w", h.alias, context.Cause(ctx))
		}
		h.mu.Lock()
	}
}

func backoff(attempt int) time.Duration {
	d := MinBackoff
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// jittered is a random wait between d/2 and d.
func jittered(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

func (h *Host) loop() {
	for {
		t, err := Resolve(h.alias, h.o)
		var c *Client
		if err == nil {
			c, err = dialTarget(h.ctx, t, h.o)
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil {
			h.attempt++
			h.lastErr = err
			if Permanent(err) {
				h.running, h.permErr = false, err
				h.broadcast()
				h.mu.Unlock()
				return
			}
			wait := jittered(backoff(h.attempt))
			h.broadcast()
			h.mu.Unlock()
			h.log.Info("connect failed; retrying", "alias", h.alias, "attempt", h.attempt, "in", wait, "err", err)
			select {
			case <-time.After(wait):
			case <-h.ctx.Done():
			}
			continue
		}
		h.client, h.attempt, h.lastErr, h.connected = c, 0, nil, true
		h.broadcast()
		h.mu.Unlock()
		select {
		case <-c.Done():
		case <-h.ctx.Done():
			return
		}
		h.mu.Lock()
		h.attempt, h.lastErr = 1, c.Err()
		h.broadcast()
		h.mu.Unlock()
		h.log.Info("connection dropped; reconnecting", "alias", h.alias, "err", c.Err())
	}
}

// State describes the connection for people: "idle" (never asked for),
// "connected", "connecting", "connecting (attempt N): ERR" (first
// connection failing), "reconnecting (attempt N): ERR" (after a drop),
// "failed: ERR" (a permanent error stopped it) or "closed".
func (h *Host) State() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return "closed"
	case alive(h.client):
		return "connected"
	case !h.running && h.permErr != nil:
		return "failed: " + h.permErr.Error()
	case !h.running:
		return "idle"
	case h.connected && h.lastErr != nil:
		return fmt.Sprintf("reconnecting (attempt %d): %v", h.attempt, h.lastErr)
	case h.lastErr != nil:
		return fmt.Sprintf("connecting (attempt %d): %v", h.attempt+1, h.lastErr)
	}
	return "connecting"
}

// Close closes the connection and stops reconnecting.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	c := h.client
	h.broadcast()
	h.mu.Unlock()
	h.cancel()
	if c != nil {
		c.Close()
	}
	return nil
}
