package desktop

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"ollie/broker"
)

// keeper is a person who types passwords, and the test keeps hold of the
// slices they were handed in, to see them zeroed.
type keeper struct {
	mu    sync.Mutex
	given [][]byte
}

func (k *keeper) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	return broker.Answer{Decision: broker.Once}, nil
}

func (k *keeper) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	pw := []byte("hunter2-attempt-x")
	pw[len(pw)-1] = byte('0' + attempt)
	k.mu.Lock()
	k.given = append(k.given, pw)
	k.mu.Unlock()
	return pw, nil
}

// TestDesktopZeroesPasswords checks the Approver contract from the
// broker's side: every password it was given is zeroed once it has been
// sent on to the host.
func TestDesktopZeroesPasswords(t *testing.T) {
	k := &keeper{}
	b := &Broker{Approver: k}
	host, desk := net.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		b.ServeConn("web1", desk)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cv, ans, err := broker.Ask(ctx, host, &broker.Request{Session: "s", Tool: "fix_nginx", Sudo: true})
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("answer %+v %v", ans, err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		pw, err := cv.Password(ctx, attempt, "")
		if err != nil || string(pw) != "hunter2-attempt-"+string(rune('0'+attempt)) {
			t.Fatalf("password %d: %q %v", attempt, pw, err)
		}
	}
	cv.Close("ran")
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not end the conversation")
	}
	if len(k.given) != 2 {
		t.Fatalf("%d passwords asked, want 2", len(k.given))
	}
	for i, pw := range k.given {
		if !bytes.Equal(pw, make([]byte, len(pw))) {
			t.Errorf("password %d is still in memory after it was sent: %q", i+1, pw)
		}
	}
}
