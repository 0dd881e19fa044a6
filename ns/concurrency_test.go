package ns_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns"
)

// TestManyClients holds a blocked stream read on each of 100 connections
// while other clients walk, open, read and write; then the stream ends and
// every blocked read returns.
func TestManyClients(t *testing.T) {
	t.Parallel()
	const readers, workers, rounds = 100, 8, 40
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxOwnerConns = readers + workers // past the default: this is about load, not the cap
	sock := serveUnix(t, srv)

	type result struct {
		who  int
		data string
		err  error
	}
	results := make(chan result, readers)
	for i := range readers {
		fs := mount(t, "unix", sock, "glenda")
		fid, err := fs.Open("log", plan9.OREAD)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer fid.Close()
			b, err := io.ReadAll(fid) // blocks at the end of the stream
			results <- result{i, string(b), err}
		}()
	}
	waitFor(t, "every reader to block", func() bool { return ns.Pending(srv) == readers })

	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for i := range workers {
		user := []string{"glenda", "alice", "bob", ""}[i%4]
		fs := mount(t, "unix", sock, user)
		wg.Go(func() {
			for j := range rounds {
				if got, err := tryRead(fs, "hello"); err != nil || got != "hello, world\n" {
					errs <- fmt.Errorf("%s: hello: %q, %v", user, got, err)
				}
				if got, err := tryRead(fs, "session/id-2/name"); err != nil || got != "beta\n" {
					errs <- fmt.Errorf("%s: session/id-2/name: %q, %v", user, got, err)
				}
				fid, err := fs.Open("calc", plan9.ORDWR)
				if err != nil {
					errs <- fmt.Errorf("%s: open calc: %v", user, err)
					continue
				}
				req := fmt.Sprintf("worker %d round %d", i, j)
				if _, err := fid.Write([]byte(req)); err != nil {
					errs <- fmt.Errorf("%s: write calc: %v", user, err)
				}
				if got, err := io.ReadAll(fid); err != nil || string(got) != strings.ToUpper(req) {
					errs <- fmt.Errorf("%s: calc reply %q, %v", user, got, err)
				}
				fid.Close()
				fid, err = fs.Open("session", plan9.OREAD)
				if err != nil {
					errs <- fmt.Errorf("%s: open session: %v", user, err)
					continue
				}
				if dirs, err := fid.Dirreadall(); err != nil || len(dirs) != 2 {
					errs <- fmt.Errorf("%s: session/: %d entries, %v", user, len(dirs), err)
				}
				fid.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := ns.Pending(srv); n != readers {
		t.Fatalf("%d requests pending after the workers finished, want the %d blocked reads", n, readers)
	}

	w.log.Write([]byte("the end\n"))
	w.log.Close()
	for n := range readers {
		select {
		case r := <-results:
			if r.err != nil || r.data != "the end\n" {
				t.Errorf("reader %d: %q, %v", r.who, r.data, r.err)
			}
		case <-time.After(timeout):
			t.Fatalf("%d blocked reads did not return after the stream ended", readers-n)
		}
	}
}
