package deploy

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
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

// scriptedConn answers keepalives, each taking the next of rtts on a fake
// clock (the last one again once they run out), and tells answered of
// each one.
type scriptedConn struct {
	ssh.Conn
	mu       sync.Mutex
	clock    time.Time
	rtts     []time.Duration
	answered chan int
	n        int
}

func (c *scriptedConn) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clock
}

func (c *scriptedConn) SendRequest(string, bool, []byte) (bool, []byte, error) {
	c.mu.Lock()
	d := c.rtts[min(c.n, len(c.rtts)-1)]
	c.clock = c.clock.Add(d)
	c.n++
	n := c.n
	c.mu.Unlock()
	c.answered <- n
	return false, nil, nil
}

// TestLinkMeasure: the least round trip counts, and the measure goes on
// while the probe does, so that a host busy starting the probe's session
// (its first answers slow) is still found near once it answers quickly.
func TestLinkMeasure(t *testing.T) {
	for _, c := range []struct {
		name    string
		rtts    []time.Duration
		samples int // answered before the probe is done
		near    bool
		rtt     time.Duration
	}{
		{"quick", []time.Duration{200 * time.Microsecond, 100 * time.Microsecond}, minSamples, true, 100 * time.Microsecond},
		{"far", []time.Duration{20 * time.Millisecond}, minSamples, false, 20 * time.Millisecond},
		{"busy, then quick", []time.Duration{40 * time.Millisecond, 9 * time.Millisecond, 8 * time.Millisecond, 7 * time.Millisecond, 6 * time.Millisecond, 300 * time.Microsecond}, 6, true, 300 * time.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := &scriptedConn{rtts: c.rtts, answered: make(chan int)}
			l := startMeasure(conn, conn.now)
			for range c.samples {
				<-conn.answered
			}
			go func() { // the measure ends at the next sample past minSamples
				for range conn.answered {
				}
			}()
			if near, rtt := l.near(), l.rtt(); near != c.near || rtt != c.rtt {
				t.Errorf("near %v, rtt %v; want %v, %v", near, rtt, c.near, c.rtt)
			}
		})
	}
}
