// Package await is how a test waits for what another goroutine or process
// will do, when nothing it holds can tell it (a file another process
// writes, a log line, a socket that appears): it asks again, first at once
// and then less and less often, until the answer is yes or time is up, and
// says what never happened. Where an event can be waited on (a channel, a
// process's exit, a blocking read of the namespace), a test waits on that.
package await

import (
	"context"
	"testing"
	"time"
)

// The first ask is at once; the wait between asks doubles from firstGap up
// to maxGap, so a condition that comes true soon is seen soon and one that
// takes seconds costs few asks.
const (
	firstGap = time.Millisecond
	maxGap   = 50 * time.Millisecond
)

// Until asks done until it answers true, and fails t, naming what, if
// within passes first. A nil-safe detail, when given, is added to the
// failure (a log to show, say), read only then.
func Until(t testing.TB, within time.Duration, what string, done func() bool, detail ...func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if Poll(ctx, done) {
		return
	}
	msg := what + ": not within " + within.String()
	for _, d := range detail {
		if d != nil {
			msg += "\n" + d()
		}
	}
	t.Fatal(msg)
}

// Poll asks done until it answers true (Poll returns true) or ctx ends
// (false, after one last ask, so a condition that came true at the end is
// not missed).
func Poll(ctx context.Context, done func() bool) bool {
	gap := firstGap
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if done() {
			return true
		}
		timer.Reset(gap)
		select {
		case <-ctx.Done():
			return done()
		case <-timer.C:
		}
		gap = min(2*gap, maxGap)
	}
}

// For waits d, or less if ctx ends first: a pause that is the point of the
// test (a silence a timeout must outlast, a think time), named as such,
// rather than a guess at how long something else takes.
func For(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
