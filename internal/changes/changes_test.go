package changes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// timeout bounds every wait here. It is a failure guard, never a
// synchronisation: nothing waits for it to pass.
const timeout = 10 * time.Second

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestZeroAndBump(t *testing.T) {
	var c Counter
	if n := c.Load(); n != 0 {
		t.Fatalf("zero Counter at %d, want 0", n)
	}
	if n := c.Bump(); n != 1 {
		t.Errorf("Bump = %d, want 1", n)
	}
	if n := c.Bump(); n != 2 || c.Load() != 2 {
		t.Errorf("second Bump = %d (Load %d), want 2", n, c.Load())
	}
}

func TestChanged(t *testing.T) {
	var c Counter
	a, b := c.Changed(0), c.Changed(0)
	if isClosed(a) || isClosed(b) {
		t.Fatal("Changed(0) closed before any change")
	}
	c.Bump()
	if !isClosed(a) || !isClosed(b) {
		t.Fatal("a Bump left a waiter's channel open")
	}
	if !isClosed(c.Changed(0)) {
		t.Error("Changed(0) at count 1 is not closed")
	}
	next := c.Changed(1)
	if isClosed(next) {
		t.Error("Changed(1) at count 1 is closed")
	}
	c.Bump()
	if !isClosed(next) {
		t.Error("Changed(1) not closed by the next Bump")
	}
}

func TestWait(t *testing.T) {
	var c Counter
	c.Bump()
	if n, err := c.Wait(context.Background(), 0); n != 1 || err != nil {
		t.Errorf("Wait(0) at count 1 = %d, %v; want 1, nil", n, err)
	}

	// A waiter that may park before the change returns with the new count.
	got := make(chan uint64, 1)
	go func() {
		n, err := c.Wait(context.Background(), 1)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		got <- n
	}()
	c.Bump()
	select {
	case n := <-got:
		if n != 2 {
			t.Errorf("Wait(1) returned %d, want 2", n)
		}
	case <-time.After(timeout):
		t.Fatal("Wait did not return after Bump")
	}
}

func TestWaitCancelled(t *testing.T) {
	var c Counter
	stop := errors.New("caller went away")

	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	if n, err := c.Wait(ctx, 0); n != 0 || !errors.Is(err, stop) {
		t.Errorf("Wait with a done ctx = %d, %v; want 0, %v", n, err, stop)
	}

	// A change already made wins over a done ctx.
	c.Bump()
	if n, err := c.Wait(ctx, 0); n != 1 || err != nil {
		t.Errorf("Wait(0) at count 1 with a done ctx = %d, %v; want 1, nil", n, err)
	}

	// Cancelled while parked.
	ctx, cancel = context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx, 1)
		done <- err
	}()
	cancel(stop)
	select {
	case err := <-done:
		if !errors.Is(err, stop) {
			t.Errorf("Wait cancelled while parked: %v, want %v", err, stop)
		}
	case <-time.After(timeout):
		t.Fatal("Wait did not return after its ctx was cancelled")
	}
	if n := c.Load(); n != 1 {
		t.Errorf("count %d after a cancelled Wait, want 1", n)
	}
}

// state is what an owner guards with its own lock and counts with a
// Counter, as the users of this package do.
type state struct {
	mu      sync.Mutex
	value   int
	changes Counter
}

func (s *state) set(v int) {
	s.mu.Lock()
	s.value = v
	s.mu.Unlock()
	s.changes.Bump()
}

func (s *state) get() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

func TestUntil(t *testing.T) {
	s := &state{}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	// A true cond returns at once, even with a done ctx.
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := s.changes.Until(done, func() bool { return s.get() == 0 }); err != nil {
		t.Errorf("Until of a true cond with a done ctx: %v, want nil", err)
	}

	// Many waiters, each for its own value, and one writer going through
	// them all: a waiter that misses its value's moment in the state
	// still sees the count move, and every waiter returns.
	const n = 50
	var wg sync.WaitGroup
	for want := 1; want <= n; want++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.changes.Until(ctx, func() bool { return s.get() >= want }); err != nil {
				t.Errorf("Until(value >= %d): %v", want, err)
			}
		}()
	}
	for v := 1; v <= n; v++ {
		s.set(v)
	}
	wg.Wait()
}

// TestUntilNoLostWakeup races a change against the waiter's check, many
// times: had Until read the count after the state, a change between the
// two would leave it parked for good, and ctx's deadline would end it.
func TestUntilNoLostWakeup(t *testing.T) {
	for i := 0; i < 2000; i++ {
		s := &state{}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		go s.set(1)
		if err := s.changes.Until(ctx, func() bool { return s.get() == 1 }); err != nil {
			cancel()
			t.Fatalf("round %d: Until missed a change: %v", i, err)
		}
		cancel()
	}
}

func TestUntilCancelled(t *testing.T) {
	s := &state{}
	stop := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	calls := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- s.changes.Until(ctx, func() bool {
			calls <- struct{}{}
			return false
		})
	}()
	<-calls // it has looked once and found the cond false
	s.set(1)
	<-calls // a change makes it look again
	cancel(stop)
	select {
	case err := <-done:
		if !errors.Is(err, stop) {
			t.Errorf("Until cancelled: %v, want %v", err, stop)
		}
	case <-time.After(timeout):
		t.Fatal("Until did not return after its ctx was cancelled")
	}
}
