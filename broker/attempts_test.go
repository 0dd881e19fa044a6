package broker_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"ollie/broker"
)

// The credential gate asks for a request's sudo password three times at
// most. These tests hold the wire to that number: the answering side of a
// conversation (the host's gate, the desktop's broker) takes a password
// ask only for attempts 1 to 3, so that an asker cannot go on asking by
// numbering its asks as it likes. They say 3 rather than
// MaxPasswordAttempts: three is the promise, and a larger constant would
// break it.

// maxAttempts is the promise.
const maxAttempts = 3

func TestMaxPasswordAttemptsIsThree(t *testing.T) {
	if broker.MaxPasswordAttempts != maxAttempts {
		t.Errorf("MaxPasswordAttempts is %d: a sudo password is asked %d times at most", broker.MaxPasswordAttempts, maxAttempts)
	}
}

// converse opens a conversation for an approved sudo request over a
// pipe: the asker's end and the answerer's.
func converse(t *testing.T) (*broker.Conversation, *broker.Incoming) {
	t.Helper()
	a, d := net.Pipe()
	t.Cleanup(func() { a.Close(); d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	received := make(chan *broker.Incoming, 1)
	go func() {
		in, err := broker.Receive(ctx, d)
		if err != nil {
			t.Error(err)
			d.Close()
			received <- nil
			return
		}
		if err := in.Answer(broker.Answer{Decision: broker.Once}); err != nil {
			t.Error(err)
		}
		received <- in
	}()
	cv, ans, err := broker.Ask(ctx, a, &broker.Request{Session: "s", Tool: "fix_nginx", Sudo: true})
	in := <-received
	if err != nil || ans.Decision != broker.Once || in == nil {
		t.Fatalf("asking: %+v %v", ans, err)
	}
	return cv, in
}

// TestNextTakesThreeAttempts asks three times in one conversation, then a
// fourth: Next takes the three and refuses the fourth, and a conversation
// whose first ask is numbered out of range is refused at once.
func TestNextTakesThreeAttempts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cv, in := converse(t)
	for attempt := 1; attempt <= maxAttempts+1; attempt++ {
		asked := make(chan error, 1)
		go func() {
			pw, err := cv.Password(ctx, attempt, "wrong password")
			broker.Zero(pw)
			asked <- err
		}()
		got, problem, _, err := in.Next(ctx)
		if attempt <= maxAttempts {
			if err != nil || got != attempt || problem != "wrong password" {
				t.Fatalf("ask %d: Next gave %d %q %v", attempt, got, problem, err)
			}
			if err := in.Secret([]byte("hunter2")); err != nil {
				t.Fatal(err)
			}
			if err := <-asked; err != nil {
				t.Fatalf("ask %d: %v", attempt, err)
			}
			continue
		}
		if err == nil || got != 0 {
			t.Errorf("a fourth password ask was taken: Next gave attempt %d, %v", got, err)
		}
		in.Close()
		if err := <-asked; err == nil {
			t.Error("the asker was given a fourth password")
		}
	}

	for _, attempt := range []int{0, -1, maxAttempts + 1, 1000} {
		t.Run(strconv.Itoa(attempt), func(t *testing.T) {
			cv, in := converse(t)
			asked := make(chan error, 1)
			go func() {
				pw, err := cv.Password(ctx, attempt, "")
				broker.Zero(pw)
				asked <- err
			}()
			if got, _, _, err := in.Next(ctx); err == nil || got != 0 {
				t.Errorf("a password ask numbered %d was taken: Next gave %d, %v", attempt, got, err)
			}
			in.Close()
			if err := <-asked; err == nil {
				t.Errorf("the asker was given a password for attempt %d", attempt)
			}
		})
	}
}
