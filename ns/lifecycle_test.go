package ns_test

// The lifecycle contract: Serve returns ErrServerClosed after Shutdown,
// Shutdown interrupts blocked requests and waits for them, and nothing a
// connection started runs after ServeConn returns.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"9fans.net/go/plan9"

	"ollie/ns"
)

func TestShutdown(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	sock := serveUnix(t, srv)
	r := dialRaw(t, "unix", sock)
	r.start(8192, "glenda")
	r.open(1, plan9.OREAD, "log")
	r.open(2, plan9.OREAD, "wait")
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 100})
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 11, Fid: 2, Count: 100})
	<-w.waitIn
	waitFor(t, "both reads to be pending", func() bool { return ns.Pending(srv) == 2 })
	if n := srv.Conns(); n != 1 {
		t.Fatalf("Conns() = %d, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Both blocked reads were answered before the connection closed.
	got := map[uint16]string{}
	for range 2 {
		f := r.recv()
		got[f.Tag] = f.Ename
	}
	if want := "interrupted: server shutting down"; got[10] != want || got[11] != want {
		t.Errorf("blocked reads answered %v, want Rerror %q for both", got, want)
	}
	r.expectClosed()
	if n := srv.Conns(); n != 0 {
		t.Errorf("Conns() = %d after Shutdown", n)
	}

	// A closed server serves nothing more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := srv.Serve(l); !errors.Is(err, ns.ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	a, b := net.Pipe()
	defer b.Close()
	if err := srv.ServeConn(a, ns.Peer{Kind: ns.Owner, UID: -1}); !errors.Is(err, ns.ErrServerClosed) {
		t.Errorf("ServeConn after Shutdown: %v", err)
	}
	if _, err := a.Write([]byte{0}); err == nil {
		t.Errorf("ServeConn after Shutdown left the connection open")
	}
}

// TestShutdownWaitsForHandlers checks that Shutdown returns only after the
// handlers it interrupted have returned.
func TestShutdownWaitsForHandlers(t *testing.T) {
	t.Parallel()
	var running atomic.Int32
	entered := make(chan struct{})
	slow := ns.WaitFile("slow", 0444, "returns some time after its context ends", func(ctx context.Context, _ *ns.Call) ([]byte, error) {
		running.Add(1)
		defer running.Add(-1)
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	tree, err := ns.NewTree(ns.Dir("", 0555, "", slow), "glenda", "ollie")
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: newServer(newWorld(t)).Log}
	sock := serveUnix(t, srv)
	r := dialRaw(t, "unix", sock)
	r.start(8192, "glenda")
	r.open(1, plan9.OREAD, "slow")
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 100})
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("Shutdown returned with %d handlers running", n)
	}
}

// TestNoHandlerAfterServeConn pipelines many requests and hangs up: every
// handler that runs must have run before ServeConn returned.
func TestNoHandlerAfterServeConn(t *testing.T) {
	t.Parallel()
	var returned atomic.Bool
	var running, late atomic.Int32
	probe := &ns.Each{
		List: func(context.Context, *ns.Call) ([]ns.Entry, error) { return nil, nil },
		Lookup: func(context.Context, *ns.Call, string) (ns.Entry, bool) {
			running.Add(1)
			defer running.Add(-1)
			if returned.Load() {
				late.Add(1)
			}
			return ns.Entry{Name: "x", Key: "x"}, true
		},
	}
	tree, err := ns.NewTree(ns.Dir("", 0555, "", ns.Dynamic("p", 0555, "", probe, ns.ReadFile("f", 0444, "", constant("")))), "glenda", "ollie")
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: newServer(newWorld(t)).Log}
	for i := range 20 {
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() {
			err := srv.ServeConn(a, ns.Peer{Kind: ns.Owner, UID: -1})
			returned.Store(true)
			if n := running.Load(); n != 0 {
				err = fmt.Errorf("ServeConn returned with %d handlers running", n)
			}
			done <- err
		}()
		r := newRaw(t, b)
		r.start(8192, "glenda")
		returned.Store(false)
		for fid := uint32(1); fid <= 100; fid++ {
			r.send(&plan9.Fcall{Type: plan9.Twalk, Tag: uint16(fid), Fid: 0, Newfid: fid, Wname: []string{"x"}})
		}
		b.Close()
		if err := <-done; err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d handlers ran after ServeConn returned", n)
	}
}

// TestShutdownWhileConnecting shuts servers down while clients keep
// connecting: a connection accepted during Shutdown is closed, never
// served, and Shutdown still returns.
func TestShutdownWhileConnecting(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for range 20 {
		srv := newServer(w)
		sock := filepath.Join(t.TempDir(), "ns")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.ServeUnix(l) }()
		var wg sync.WaitGroup
		connected := make(chan struct{}, 4)
		for range 4 {
			wg.Go(func() {
				for {
					nc, err := net.Dial("unix", sock)
					if err != nil {
						return // the listener is gone
					}
					plan9.WriteFcall(nc, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"})
					plan9.ReadFcall(nc)
					nc.Close()
					select {
					case connected <- struct{}{}:
					default:
					}
				}
			})
		}
		<-connected
		shutdown(t, srv, done)
		wg.Wait()
	}
}

// TestTraceLeavesOutWrites: the trace shows each write's count, never its
// data, which may be a secret (a sudo password written to bypass/pending).
func TestTraceLeavesOutWrites(t *testing.T) {
	w := newWorld(t)
	srv := newServer(w)
	var trace syncBuffer
	srv.Trace = &trace
	fs := mount(t, "unix", serveUnix(t, srv), "glenda")
	const secret = "password correct-horse-battery"
	f, err := fs.Open("notes", plan9.OWRITE)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(secret)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w.mu.Lock()
	notes := string(w.notes)
	w.mu.Unlock()
	if notes != secret {
		t.Fatalf("notes = %q: the write did not arrive", notes)
	}
	got := trace.String()
	if strings.Contains(got, "correct-horse") {
		t.Errorf("the trace holds what was written:\n%s", got)
	}
	if !strings.Contains(got, fmt.Sprintf("count %d (data not traced)\n", len(secret))) || !strings.Contains(got, "Rwrite tag") {
		t.Errorf("the trace does not show the write's count, or not the rest:\n%s", got)
	}
}

// syncBuffer is a bytes.Buffer that the server's goroutines may write
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
