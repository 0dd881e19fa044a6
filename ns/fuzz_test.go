package ns_test

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns"
)

// FuzzServe feeds arbitrary bytes to one connection as what the client
// sent, after a valid Tversion and Tattach or without them. Whatever the
// bytes, the server must neither panic (srv9p runs each request in a
// goroutine of its own, so a panic there ends the process) nor hang:
// ServeConn returns once the input ends, and a fresh connection to the
// same server still works. Seeds are in testdata/fuzz/FuzzServe.
//
// CI runs it briefly with
//
//	go test ./ns -run '^$' -fuzz FuzzServe -fuzztime 20s
func FuzzServe(f *testing.F) {
	prefix := frames(
		&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
		&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: ""},
	)
	f.Fuzz(func(t *testing.T, withPrefix bool, data []byte) {
		w := newWorld(t)
		srv := newServer(w)
		var chunks [][]byte
		if withPrefix {
			chunks = append(chunks, prefix)
		}
		conn := &fuzzConn{srv: srv, chunks: append(chunks, data)}
		done := make(chan error, 1)
		go func() { done <- srv.ServeConn(conn, ns.Peer{Kind: ns.Owner, UID: -1}) }()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Fatalf("ServeConn did not return within %v of the input's end", timeout)
		}
		fs := mountPipe(t, srv, "glenda")
		if got := readFile(t, fs, "hello"); got != "hello, world\n" {
			t.Fatalf("a fresh connection read %q", got)
		}
	})
}

// frames encodes fcalls as a client would send them.
func frames(fs ...*plan9.Fcall) []byte {
	var b []byte
	for _, f := range fs {
		m, err := f.Bytes()
		if err != nil {
			panic(err)
		}
		b = append(b, m...)
	}
	return b
}

// fuzzConn is a connection whose client sends chunks and then hangs up.
// Before each later chunk, and before hanging up, it gives the server a
// moment to answer what it has, so that requests reach their handlers
// rather than all finding the connection closed.
type fuzzConn struct {
	srv    *ns.Server
	chunks [][]byte
	cur    *bytes.Reader
	mu     sync.Mutex
	wrote  int
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	for c.cur == nil || c.cur.Len() == 0 {
		if c.cur != nil {
			c.settle()
		}
		if len(c.chunks) == 0 {
			return 0, io.EOF
		}
		c.cur = bytes.NewReader(c.chunks[0])
		c.chunks = c.chunks[1:]
	}
	return c.cur.Read(p)
}

// settle waits a little for the requests sent so far to be answered.
// Blocked reads never are, until the connection ends.
func (c *fuzzConn) settle() {
	deadline := time.Now().Add(20 * time.Millisecond)
	for ns.Pending(c.srv) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}

func (c *fuzzConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wrote += len(p)
	return len(p), nil
}

func (c *fuzzConn) Close() error { return nil }
