package broker_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/gate"
)

// Dialed's three ends, as the tool runner and deploy -system meet them:
// nobody to dial, a denial with its reason, and an approval whose grant
// carries on.
func TestDialedApprover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := func() *broker.Request {
		return &broker.Request{Session: "s1", Tool: "tail_log", Variant: -1, Executable: "/usr/bin/tail", Cwd: "/", Bypass: true}
	}

	nobody := broker.Dialed(func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") })
	_, err := nobody.Approve(ctx, req())
	var unasked *broker.UnaskedError
	if !errors.As(err, &unasked) || unasked.Reached || !errors.Is(err, broker.ErrNotApproved) {
		t.Fatalf("no answerer: %v, want an UnaskedError not reached that wraps ErrNotApproved", err)
	}

	g := gate.New(nil)
	parked := make(chan string, 2)
	g.Publish = func(topic, data string) {
		if topic == "bypass.pending" {
			id, _, _ := strings.Cut(data, " ")
			parked <- id
		}
	}
	sock := filepath.Join(t.TempDir(), "elevate")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	defer g.Shutdown(context.Background())
	dial := broker.Dialed(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})

	for _, c := range []struct {
		decision string
		approved bool
	}{{"deny", false}, {"approve", true}} {
		type result struct {
			g   broker.Grant
			err error
		}
		done := make(chan result, 1)
		go func() {
			g, err := dial.Approve(ctx, req())
			done <- result{g, err}
		}()
		if err := g.Decide(<-parked, c.decision); err != nil {
			t.Fatal(err)
		}
		r := <-done
		var denied *broker.DeniedError
		switch {
		case c.approved && (r.err != nil || r.g == nil):
			t.Errorf("approved: grant %v, error %v", r.g, r.err)
		case c.approved:
			r.g.Close("ran")
		case !errors.As(r.err, &denied) || !errors.Is(r.err, broker.ErrNotApproved) || r.g != nil:
			t.Errorf("denied: grant %v, error %v; want a DeniedError that wraps ErrNotApproved", r.g, r.err)
		}
	}
}
