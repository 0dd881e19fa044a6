package fleet

import (
	"context"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestInterrupts: one Ctrl-C interrupts the run's agents once the detach
// window has passed; a second within it, or a hang-up, detaches and
// leaves them working.
func TestInterrupts(t *testing.T) {
	for _, c := range []struct {
		name        string
		sigs        []os.Signal
		interrupted bool
		detached    bool
	}{
		{"one ctrl-c", []os.Signal{os.Interrupt}, true, false},
		{"two ctrl-c at once", []os.Signal{os.Interrupt, os.Interrupt}, false, true},
		{"hang-up", []os.Signal{syscall.SIGHUP}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sigs := make(chan os.Signal, 2)
			var interrupts, detaches atomic.Int32
			interrupted := make(chan struct{}, 1)
			detached := Interrupts(ctx, sigs, "r1", func(string) {}, func() {
				interrupts.Add(1)
				interrupted <- struct{}{}
			}, func() { detaches.Add(1) })
			for _, s := range c.sigs {
				sigs <- s
			}
			select {
			case <-interrupted:
			case <-detached:
			case <-time.After(DetachWindow + 5*time.Second):
				t.Fatal("neither interrupted nor detached")
			}
			if c.interrupted {
				// Past the window no detach may follow an interrupt.
				select {
				case <-detached:
					t.Fatal("detached after interrupting")
				default:
				}
			}
			if got := interrupts.Load() > 0; got != c.interrupted {
				t.Errorf("interrupted: %v, want %v", got, c.interrupted)
			}
			if got := detaches.Load() > 0; got != c.detached {
				t.Errorf("detached: %v, want %v", got, c.detached)
			}
		})
	}
}
