package deploy

// What the link to a host measures decides whether the binary travels
// compressed, as a person decides whether to give rsync -z: not to a host
// on the same machine, rack or wired LAN, where moving the bytes costs
// less than compressing them on the desktop and decompressing them on the
// host; compressed to any other. A round trip is what deploy can measure
// without sending anything: a host that answers within nearRTT is near.

import (
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// nearRTT is the round trip under which a link counts as near. Loopback
// and a LAN (Wi-Fi too) answer within a millisecond or two, and within
// five when busy: nine lab hosts sharing the desktop's two cores measured
// up to 4.9 ms. A routed path between sites takes 10 ms and more.
const nearRTT = 5 * time.Millisecond

// A link measure times keepalive round trips one after the other while
// the probe runs, at least minSamples and at most maxSamples; the least
// counts. The first waits while sshd starts the probe's session (40 ms on
// a loaded loopback host); on a host that stays busy only some of the
// later ones are quick, so the measure goes on as long as the probe does.
const (
	minSamples = 3
	maxSamples = 50
)

// maxMeasure bounds the wait for a measure: a link whose round trips take
// longer is not near.
const maxMeasure = time.Second

// linkMeasure times round trips to a host in the background.
type linkMeasure struct {
	now  func() time.Time
	stop chan struct{} // closed once the probe is done
	done chan struct{} // closed once the measure ends
	best time.Duration // the least round trip; 0 when none was answered

	once   sync.Once
	result time.Duration
}

// measureLink starts timing keepalive round trips on conn. sshd answers
// keepalive@openssh.com (with a refusal) itself, with nothing to run on
// the host.
func measureLink(conn ssh.Conn) *linkMeasure {
	return startMeasure(conn, time.Now)
}

func startMeasure(conn ssh.Conn, now func() time.Time) *linkMeasure {
	l := &linkMeasure{now: now, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := range maxSamples {
			if i >= minSamples {
				select {
				case <-l.stop:
					return
				default:
				}
			}
			t0 := l.now()
			if _, _, err := conn.SendRequest("keepalive@openssh.com", true, nil); err != nil {
				return
			}
			if d := l.now().Sub(t0); l.best == 0 || d < l.best {
				l.best = d
			}
		}
	}()
	return l
}

// near reports the link near by rtt.
func (l *linkMeasure) near() bool {
	rtt := l.rtt()
	return rtt > 0 && rtt < nearRTT
}

// rtt ends the measure and returns the least round trip, waiting for the
// samples under way but no longer than maxMeasure; 0 when none was
// answered.
func (l *linkMeasure) rtt() time.Duration {
	l.once.Do(func() {
		close(l.stop)
		t := time.NewTimer(maxMeasure)
		defer t.Stop()
		select {
		case <-l.done:
			l.result = l.best
		case <-t.C:
		}
	})
	return l.result
}

// Writes an upload keeps in flight: a round trip's worth at fillRate, at
// least minWrites and at most maxWrites (pkg/sftp's own most). More than a
// link needs only queue in sshd, which copies what is queued: 64 writes
// of 32 KiB in flight to each of nine loopback hosts took 3.4 times the
// CPU of 8, and three times as long.
const (
	fillRate  = 100 << 20
	sftpWrite = 32 << 10
	minWrites = 8
	maxWrites = 64
)

// writesInFlight is how many SFTP writes an upload over a link whose
// round trip is rtt (0: not measured) keeps in flight.
func writesInFlight(rtt time.Duration) int {
	if rtt <= 0 {
		return maxWrites
	}
	n := int(rtt.Seconds()*fillRate/sftpWrite) + 1
	return min(max(n, minWrites), maxWrites)
}
