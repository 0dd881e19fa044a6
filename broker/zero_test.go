package broker

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

func TestZero(t *testing.T) {
	buf := []byte("correct horse battery staple")
	Zero(buf[2:9]) // only the part it is given
	want := []byte("co\x00\x00\x00\x00\x00\x00\x00orse battery staple")
	if !bytes.Equal(buf, want) {
		t.Errorf("after Zero(buf[2:9]): %q, want %q", buf, want)
	}
	Zero(buf)
	if !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Errorf("after Zero(buf): %q, want only zero bytes", buf)
	}
	Zero(nil) // no panic
}

// keeper is a person who types passwords, and the test keeps hold of the
// slices they were handed in, to see them zeroed.
type keeper struct {
	mu    sync.Mutex
	given [][]byte
}

func (k *keeper) Approve(ctx context.Context, req *Request) (Answer, error) {
	return Answer{Decision: Once}, nil
}

func (k *keeper) Password(ctx context.Context, req *Request, attempt int, problem string) ([]byte, error) {
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
	cv, ans, err := Ask(ctx, host, &Request{Session: "s", Tool: "fix_nginx", Sudo: true})
	if err != nil || ans.Decision != Once {
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

// TestSecretZeroes checks the answering side of the wire: Secret zeroes
// the password it was given once written.
func TestSecretZeroes(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	in := &Incoming{w: newWire(b), Req: &Request{ID: "id1"}}
	read := make(chan *message, 1)
	go func() {
		m, _ := newWire(a).read(context.Background())
		read <- m
	}()
	pw := []byte("s3cret")
	if err := in.Secret(pw); err != nil {
		t.Fatal(err)
	}
	if m := <-read; m == nil || string(m.Secret) != "s3cret" {
		t.Fatalf("sent %+v", m)
	}
	if !bytes.Equal(pw, make([]byte, len(pw))) {
		t.Errorf("Secret left the password in its buffer: %q", pw)
	}
}
