package tunnel

import (
	"testing"
	"time"
)

// TestJittered: waits stay within [d/2, d] and are not all the same, so
// that hosts refused together retry apart.
func TestJittered(t *testing.T) {
	d := 4 * time.Second
	seen := map[time.Duration]bool{}
	for range 200 {
		w := jittered(d)
		if w < d/2 || w > d {
			t.Fatalf("jittered(%v) = %v, outside [%v, %v]", d, w, d/2, d)
		}
		seen[w] = true
	}
	if len(seen) < 50 {
		t.Errorf("200 waits took only %d values: not jittered", len(seen))
	}
}
