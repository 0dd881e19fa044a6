package desktop

import (
	"context"
	"testing"
	"time"

	"ollie/broker"
)

// TestBrokerRefusesAttemptOutOfRange has a host number its first password
// ask 4, as if three had been asked already: the desktop's own count
// would allow it, but the wire does not, so the person is not asked and
// the host gets no password. (TestBrokerPasswordAttempts holds the
// desktop's own count; this holds what the desktop takes from the wire.)
func TestBrokerRefusesAttemptOutOfRange(t *testing.T) {
	for _, attempt := range []int{4, 0, -1} {
		person := &holder{}
		b := &Broker{Approver: person}
		hostEnd, served := serveOne(b, "h4", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cv, ans, err := broker.Ask(ctx, hostEnd, &broker.Request{Session: "s", Tool: "t", Sudo: true})
		if err != nil || ans.Decision != broker.Once {
			t.Fatalf("%+v %v", ans, err)
		}
		pw, err := cv.Password(ctx, attempt, "wrong password")
		if err == nil {
			t.Errorf("a password ask numbered %d was given %q", attempt, pw)
		}
		broker.Zero(pw)
		if n := person.passwords.Load(); n != 0 {
			t.Errorf("a password ask numbered %d: the person was asked %d times", attempt, n)
		}
		hostEnd.Close()
		waitServed(t, served, 10*time.Second, "a password ask out of range")
		cancel()
	}
}
