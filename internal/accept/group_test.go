package accept

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// A connection that comes as the group closes is either counted in, and
// handed to Close's caller to end, or refused: never served unwaited for.
func TestGroupClose(t *testing.T) {
	var g Group[int]
	if !g.Join(1) {
		t.Fatal("an open group refused a connection")
	}
	left := make(chan struct{})
	go func() {
		<-g.Context().Done()
		g.Leave(1)
		close(left)
	}()
	if got := g.Close(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("Close handed back %v, want [1]", got)
	}
	if g.Join(2) {
		t.Error("a closed group took a connection in")
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-left
	if !g.Closed() {
		t.Error("Closed is false after Close")
	}
}

func TestGroupWaitBounded(t *testing.T) {
	var g Group[string]
	g.Join("stuck")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a connection that never left: %v", err)
	}
}

func TestGroupServeEndsAtClose(t *testing.T) {
	var g Group[int]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errClosed := errors.New("closed")
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln, errClosed, func(c net.Conn) func() { return func() { c.Close() } }) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	g.Close()
	if err := <-served; err != errClosed {
		t.Fatalf("Serve after Close: %v, want the server's closed error", err)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}
