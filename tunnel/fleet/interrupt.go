package fleet

import (
	"context"
	"fmt"
	"os"
	"time"
)

// DetachWindow is how long after a first Ctrl-C a second one detaches
// rather than finding the agents interrupted already.
const DetachWindow = time.Second

// Interrupts turns the person's signals while a run is watched into what
// they mean: a first Ctrl-C interrupts every agent of the run, but only
// once DetachWindow has passed, so that a second Ctrl-C within it (or
// any other signal) detaches instead and leaves the agents working, as
// the first one's message says. say tells the person; the returned
// channel is closed on a detach, after detach is called. It returns when
// ctx ends.
func Interrupts(ctx context.Context, sigs <-chan os.Signal, runID string, say func(string), interrupt func(), detach func()) <-chan struct{} {
	detached := make(chan struct{})
	go func() {
		interrupted := false
		var wait <-chan time.Time
		for {
			select {
			case s := <-sigs:
				if s == os.Interrupt && !interrupted {
					interrupted = true
					say(fmt.Sprintf("interrupting every agent of run %s (Ctrl-C again to detach and leave them working)", runID))
					wait = time.After(DetachWindow)
					continue
				}
				say(fmt.Sprintf("detached: the agents go on; ollie-remote fleet attach %s", runID))
				close(detached)
				detach()
				return
			case <-wait:
				wait = nil
				go interrupt()
			case <-ctx.Done():
				return
			}
		}
	}()
	return detached
}
