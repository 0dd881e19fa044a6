package deploy

import (
	"testing"
	"time"
)

// TestWritesInFlight: an upload keeps a round trip's worth of writes in
// flight and no more, within pkg/sftp's bounds: on a near link the
// fewest, which spares sshd copying a queue it cannot drain; on a far
// one enough to fill the link.
func TestWritesInFlight(t *testing.T) {
	for _, c := range []struct {
		rtt  time.Duration
		want int
	}{
		{0, maxWrites}, // not measured
		{200 * time.Microsecond, minWrites},
		{5 * time.Millisecond, 17},
		{20 * time.Millisecond, maxWrites},
		{time.Second, maxWrites},
	} {
		if got := writesInFlight(c.rtt); got != c.want {
			t.Errorf("writesInFlight(%v) = %d, want %d", c.rtt, got, c.want)
		}
	}
}
