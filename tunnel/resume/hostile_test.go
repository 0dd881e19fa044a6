package resume_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/tunnel/resume"
)

// A hostile server: the host's olliesrv replaced by one that answers as
// the attack says. Each test gives it a handler for every connection the
// proxy dials.
type hostile struct {
	t     testing.TB
	addr  string
	dials atomic.Int32
	proxy *resume.Proxy
	paddr string
	log   *lockedBuffer
}

func newHostile(t testing.TB, handler func(nc net.Conn), p *resume.Proxy) *hostile {
	dir := t.TempDir()
	h := &hostile{t: t, addr: filepath.Join(dir, "srv"), paddr: filepath.Join(dir, "proxy"), log: &lockedBuffer{}}
	ln, err := net.Listen("unix", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				handler(nc)
			}()
		}
	}()
	p.Dial = func(ctx context.Context) (net.Conn, error) {
		h.dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", h.addr)
	}
	p.Log = slog.New(slog.NewTextHandler(h.log, nil))
	h.proxy = p
	pl, err := net.Listen("unix", h.paddr)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(pl)
	t.Cleanup(func() { p.Close() })
	return h
}

// client connects to the proxy and speaks raw 9P.
func (h *hostile) client() net.Conn {
	c, err := net.Dial("unix", h.paddr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func send(t testing.TB, w io.Writer, f *plan9.Fcall) {
	t.Helper()
	if err := plan9.WriteFcall(w, f); err != nil {
		t.Fatalf("send %v: %v", f, err)
	}
}

func recv(t testing.TB, r io.Reader) *plan9.Fcall {
	t.Helper()
	f, err := plan9.ReadFcall(r)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return f
}

// answerVersion reads a Tversion and answers it with msize.
func answerVersion(nc net.Conn, msize uint32) (*plan9.Fcall, error) {
	tx, err := plan9.ReadFcall(nc)
	if err != nil {
		return nil, err
	}
	if tx.Type != plan9.Tversion {
		return tx, errors.New("not a Tversion")
	}
	return tx, plan9.WriteFcall(nc, &plan9.Fcall{Type: plan9.Rversion, Tag: tx.Tag, Msize: msize, Version: "9P2000"})
}

// TestMsizeClamped: a host answering Tversion with an msize of 4 GiB (3
// connections took the keeper to 4.2 GB) gets the proxy's own maximum, as
// does a client asking for 4 GiB; a message claiming more than that ends
// the server connection without a buffer of its size.
func TestMsizeClamped(t *testing.T) {
	asked := make(chan uint32, 8)
	closed := make(chan struct{}, 8)
	h := newHostile(t, func(nc net.Conn) {
		tx, err := answerVersion(nc, 1<<32-1)
		if err != nil {
			return
		}
		asked <- tx.Msize
		// Then a reply header claiming a gigabyte, and its first bytes.
		hdr := make([]byte, 7+4096)
		binary.LittleEndian.PutUint32(hdr, 1<<30)
		hdr[4] = plan9.Rread
		nc.Write(hdr)
		io.Copy(io.Discard, nc)
		closed <- struct{}{}
	}, &resume.Proxy{HandshakeTimeout: time.Second})

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := h.client()
	send(t, c, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 1<<32 - 1, Version: "9P2000"})
	rx := recv(t, c)
	if rx.Type != plan9.Rversion || rx.Msize != resume.DefaultMaxMsize {
		t.Errorf("client got %v, want Rversion with msize %d", rx, resume.DefaultMaxMsize)
	}
	select {
	case m := <-asked:
		if m != resume.DefaultMaxMsize {
			t.Errorf("server was asked for msize %d, want %d", m, resume.DefaultMaxMsize)
		}
	case <-time.After(timeout):
		t.Fatal("no Tversion reached the server")
	}
	select {
	case <-closed:
	case <-time.After(timeout):
		t.Fatal("a reply larger than msize did not end the server connection")
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("the proxy allocated %d MiB", grew>>20)
	}
	// The proxy logs once it has closed the connection, after the server
	// has seen it close.
	await.Until(t, timeout, "the log saying why the connection ended",
		func() bool { return strings.Contains(h.log.String(), "exceeds msize") }, h.log.String)
}

// TestUnexpectedReplies: a host sending replies to tags nobody used (one
// log line each made 972 MiB of keeper.log in 25 s) loses its connection
// after a few, and the log says so once per connection, with the count.
func TestUnexpectedReplies(t *testing.T) {
	var sent atomic.Int64
	h := newHostile(t, func(nc net.Conn) {
		if _, err := answerVersion(nc, 8192+plan9.IOHDRSZ); err != nil {
			return
		}
		bw := bufio.NewWriter(nc)
		for tag := uint16(1000); ; tag++ {
			if err := plan9.WriteFcall(bw, &plan9.Fcall{Type: plan9.Rclunk, Tag: tag}); err != nil {
				return
			}
			if bw.Flush() != nil {
				return
			}
			if sent.Add(1) > 1e6 {
				return
			}
		}
	}, &resume.Proxy{})
	c := h.client()
	send(t, c, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192 + plan9.IOHDRSZ, Version: "9P2000"})
	recv(t, c)
	// The flood runs for 2 s: how many connections it gets, and how much
	// it writes and logs over them, is the test.
	await.For(t.Context(), 2*time.Second)
	dials := int(h.dials.Load())
	n := sent.Load()
	log := h.log.String()
	lines := strings.Count(log, "\n")
	if dials > 10 || n > int64(dials)*10000 {
		t.Errorf("%d replies to nothing over %d connections in 2 s", n, dials)
	}
	if lines > dials+1 {
		t.Errorf("%d log lines for %d connections:\n%.2000s", lines, dials, log)
	}
	if !strings.Contains(log, "17 replies to no request") {
		t.Errorf("log does not give the count:\n%.2000s", log)
	}
	t.Logf("%d replies to nothing, %d connections, %d log lines", n, dials, lines)
}

// TestBackoffAfterTversion: a host that fails right after Tversion was
// redialled 10,354 times in 15 s; the proxy backs off instead.
func TestBackoffAfterTversion(t *testing.T) {
	h := newHostile(t, func(nc net.Conn) {
		answerVersion(nc, 8192+plan9.IOHDRSZ)
	}, &resume.Proxy{})
	c := h.client()
	send(t, c, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192 + plan9.IOHDRSZ, Version: "9P2000"})
	recv(t, c)
	send(t, c, &plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 1, Afid: plan9.NOFID, Uname: "glenda"})
	// The number of dials in 3 s is the test: the rate the backoff allows.
	await.For(t.Context(), 3*time.Second)
	if n := h.dials.Load(); n >= 10 || n < 2 {
		t.Errorf("%d dials in 3 s to a server failing after Tversion, want a few (2-9)", n)
	} else {
		t.Logf("%d dials in 3 s", n)
	}
}

// TestHandshakeTimeout: a host that takes the client's Tversion and never
// answers has its connection dropped after HandshakeTimeout, and the
// state says why; the client's Tversion waits for the next connection.
func TestHandshakeTimeout(t *testing.T) {
	var states sync.Map
	h := newHostile(t, func(nc net.Conn) {
		io.Copy(io.Discard, nc)
	}, &resume.Proxy{HandshakeTimeout: 200 * time.Millisecond, OnState: func(s string) { states.Store(s, true) }})
	c := h.client()
	send(t, c, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192 + plan9.IOHDRSZ, Version: "9P2000"})
	await.Until(t, timeout, "a server that never answers Tversion losing its connection (a second dial)",
		func() bool { return h.dials.Load() >= 2 })
	if _, ok := states.Load("reconnecting: resume: no answer to Tversion within 200ms"); !ok {
		var all []string
		states.Range(func(k, _ any) bool { all = append(all, k.(string)); return true })
		t.Errorf("states %q", all)
	}
}
