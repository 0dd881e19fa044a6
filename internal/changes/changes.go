// Package changes counts the changes of a piece of state and lets
// goroutines wait for the next one.
//
// Waiting by count rather than by value is what lets a waiter see a
// change that came and went (idle, running, idle again) before it looked.
// The package is a leaf, so that the agent loop, the tool server, the
// tunnel and the broker can share it without linking each other.
package changes

import (
	"context"
	"sync"
)

// A Counter is the version of some state: a count that moves on at each
// change. The zero value is ready to use, at 0, and a Counter must not be
// copied after first use.
//
// The state it counts is guarded by its owner's lock, not by the Counter.
// The owner makes a change visible first, then calls Bump; a waiter reads
// the count first, then the state. Either order the two interleave in, a
// waiter that missed the change in the state finds the count moved.
type Counter struct {
	mu sync.Mutex
	n  uint64
	ch chan struct{} // closed at the next Bump; nil while nobody waits
}

// closed is what Changed returns for a change already made.
var closed = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Load returns the count.
func (c *Counter) Load() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Bump counts a change, wakes every waiter, and returns the new count.
func (c *Counter) Bump() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	return c.n
}

// BumpPast counts a change, to past n if the count is not already:
// for a count that goes on from an earlier owner's.
func (c *Counter) BumpPast(n uint64) uint64 {
	c.mu.Lock()
	c.n = max(c.n, n)
	c.mu.Unlock()
	return c.Bump()
}

// Changed returns a channel that is closed once the count differs from
// since (at once if it does already), for a select that waits on more
// than the next change.
func (c *Counter) Changed(since uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n != since {
		return closed
	}
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Wait blocks until the count differs from since, and returns it; or until
// ctx is done, and returns since and ctx's cause. A change already made
// wins over a done ctx.
func (c *Counter) Wait(ctx context.Context, since uint64) (uint64, error) {
	if n := c.Load(); n != since {
		return n, nil
	}
	select {
	case <-c.Changed(since):
		return c.Load(), nil
	case <-ctx.Done():
		return since, context.Cause(ctx)
	}
}

// Until blocks until cond reports true, calling it at once and again after
// each change; or until ctx is done, and returns ctx's cause. cond reads
// the state under its owner's lock; a true cond wins over a done ctx.
func (c *Counter) Until(ctx context.Context, cond func() bool) error {
	for {
		seen := c.Load()
		if cond() {
			return nil
		}
		if _, err := c.Wait(ctx, seen); err != nil {
			return err
		}
	}
}
