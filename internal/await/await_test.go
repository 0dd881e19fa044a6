package await

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollSeesTrueSoon(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 5 {
			n.Add(1)
		}
	}()
	start := time.Now()
	if !Poll(context.Background(), func() bool { return n.Load() == 5 }) {
		t.Fatal("Poll gave up with no deadline")
	}
	t.Logf("seen after %v", time.Since(start))
}

func TestPollGivesUpAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	asks := 0
	if Poll(ctx, func() bool { asks++; return false }) {
		t.Fatal("Poll said true for a condition that never held")
	}
	// At once, then 1, 2, 4, 8, 16 ms: a handful of asks, not a busy loop.
	if asks < 3 || asks > 12 {
		t.Errorf("%d asks in 30 ms, want a few", asks)
	}
}

func TestPollLastAsk(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	// Cancelled before the first wait: the ask after the deadline still
	// counts.
	if !Poll(ctx, func() bool { calls++; return calls == 2 }) {
		t.Fatal("the ask at the deadline was not taken")
	}
}

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Fatal(args ...any) { f.failed = args[0].(string) }

func TestUntilNamesWhatNeverHappened(t *testing.T) {
	ft := &fakeT{TB: t}
	Until(ft, 10*time.Millisecond, "the socket appeared", func() bool { return false }, func() string { return "log: nothing" })
	if ft.failed != "the socket appeared: not within 10ms\nlog: nothing" {
		t.Errorf("failure read %q", ft.failed)
	}
	ft = &fakeT{TB: t}
	Until(ft, time.Second, "at once", func() bool { return true })
	if ft.failed != "" {
		t.Errorf("a true condition failed: %q", ft.failed)
	}
}

func TestForEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	For(ctx, time.Hour)
	if time.Since(start) > time.Second {
		t.Error("For outlived its context")
	}
}
