package ns_test

// Limits: each one bounds what a client can make the server hold, and
// each refusal is an Rerror that says which limit.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/ns"
)

func TestMsize(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxMsize = 16384
	r := dialRaw(t, "unix", serveUnix(t, srv))

	r.fail(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: ns.MinMsize - 1, Version: "9P2000"},
		fmt.Sprintf("ns: msize %d is too small (minimum %d)", ns.MinMsize-1, ns.MinMsize))
	// The connection survives a refused Tversion.
	rv := r.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 1 << 30, Version: "9P2000"})
	if rv.Msize != 16384 {
		t.Fatalf("Tversion msize 1<<30: Rversion msize %d, want the cap 16384", rv.Msize)
	}
	r.ok(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: "glenda"})
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1, Wname: []string{"big"}})
	ro := r.ok(&plan9.Fcall{Type: plan9.Topen, Tag: 1, Fid: 1, Mode: plan9.OREAD})
	if ro.Iounit != 16384-plan9.IOHDRSZ {
		t.Errorf("iounit %d, want msize-IOHDRSZ = %d", ro.Iounit, 16384-plan9.IOHDRSZ)
	}
	// A read asking for more than fits is cut to what fits.
	if rd := r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 1, Fid: 1, Count: 1 << 20}); len(rd.Data) != 16384-plan9.IOHDRSZ {
		t.Errorf("read of 1 MiB at msize 16384: %d bytes", len(rd.Data))
	}

	// The default cap.
	r2 := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	if rv := r2.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 1 << 30, Version: "9P2000"}); rv.Msize != ns.DefaultMaxMsize {
		t.Errorf("default cap: Rversion msize %d, want %d", rv.Msize, ns.DefaultMaxMsize)
	}
	// The smallest msize allowed works.
	r3 := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r3.start(ns.MinMsize, "glenda")
	r3.open(1, plan9.OREAD, "hello")
	if rd := r3.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 1, Fid: 1, Count: 1000}); string(rd.Data) != "hello, world\n" {
		t.Errorf("read at the smallest msize: %v", rd)
	}
}

// frameHeader is the start of a 9P frame claiming size bytes.
func frameHeader(size uint32, typ uint8, tag uint16) []byte {
	b := binary.LittleEndian.AppendUint32(nil, size)
	b = append(b, typ)
	return binary.LittleEndian.AppendUint16(b, tag)
}

func TestOversizedMessage(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "glenda")
	r.sendBytes(frameHeader(8193, plan9.Twrite, 7))
	f := r.recv()
	if f.Type != plan9.Rerror || f.Tag != 7 || f.Ename != "ns: message of 8193 bytes exceeds msize 8192" {
		t.Fatalf("got %v, want Rerror tag 7 naming the sizes", f)
	}
	r.expectClosed()

	// A frame shorter than its own header ends the connection too.
	r = dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "glenda")
	r.sendBytes([]byte{6, 0, 0, 0, 0, 0})
	r.expectClosed()
}

func TestMaxFids(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxFids = 4
	r := dialRaw(t, "unix", serveUnix(t, srv))
	r.start(8192, "glenda") // fid 0
	for fid := uint32(1); fid < 4; fid++ {
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid})
	}
	r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4, Wname: []string{"hello"}}, "ns: too many fids (limit 4)")
	r.fail(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 4, Afid: plan9.NOFID, Uname: "glenda"}, "ns: too many fids (limit 4)")
	// Walking a fid in place takes no new fid.
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 3, Newfid: 3, Wname: []string{"session"}})
	// Failed walks do not count.
	r.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 3})
	r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4, Wname: []string{"nosuch"}}, "does not exist")
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4, Wname: []string{"session", "nosuch"}})
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 5, Wname: []string{"hello"}})
	r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 6}, "ns: too many fids (limit 4)")

	// The limit is per connection.
	r2 := dialRaw(t, "unix", serveUnix(t, srv))
	r2.start(8192, "glenda")
	r2.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1})
}

func TestMaxRequests(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxRequests = 3
	r := dialRaw(t, "unix", serveUnix(t, srv))
	r.start(8192, "glenda")
	r.open(1, plan9.OREAD, "log")
	for tag := uint16(10); tag < 13; tag++ {
		r.send(&plan9.Fcall{Type: plan9.Tread, Tag: tag, Fid: 1, Count: 100})
	}
	r.fail(&plan9.Fcall{Type: plan9.Tread, Tag: 13, Fid: 1, Count: 100}, "ns: too many outstanding requests (limit 3)")
	r.fail(&plan9.Fcall{Type: plan9.Tstat, Tag: 14, Fid: 0}, "ns: too many outstanding requests (limit 3)")

	// A flush still gets through, and frees a place.
	r.send(&plan9.Fcall{Type: plan9.Tflush, Tag: 20, Oldtag: 10})
	if f := r.recv(); f.Type != plan9.Rerror || f.Tag != 10 {
		t.Fatalf("got %v, want Rerror for the flushed tag 10", f)
	}
	if f := r.recv(); f.Type != plan9.Rflush || f.Tag != 20 {
		t.Fatalf("got %v, want Rflush tag 20", f)
	}
	r.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 14, Fid: 0})

	w.log.Write([]byte("x"))
	for range 2 {
		if f := r.recv(); f.Type != plan9.Rread || string(f.Data) != "x" {
			t.Fatalf("got %v, want Rread of x", f)
		}
	}
	if n := ns.Pending(srv); n != 0 {
		t.Errorf("%d requests pending after all were answered", n)
	}
}

func TestSubscriberQueue(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.bus.QueueLen = 4
	w.bus.QueueBytes = 64
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	fid, err := fs.Open("event", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	if _, err := fid.Write([]byte("*")); err != nil {
		t.Fatal(err)
	}

	// Nobody reads: the publisher does not wait for the subscriber.
	published := make(chan struct{})
	go func() {
		defer close(published)
		w.bus.Publish("a", "1")
		w.bus.Publish("big", strings.Repeat("x", 100)) // more than QueueBytes
		w.bus.Publish("b", "2")
		for i := range 10 {
			w.bus.Publish("c", fmt.Sprint(i))
		}
	}()
	select {
	case <-published:
	case <-time.After(timeout):
		t.Fatal("Publish blocked on a slow subscriber")
	}
	buf := make([]byte, 1000)
	n, err := fid.Read(buf)
	// The loss marker stands where the gap is: after a, and after the
	// queue filled.
	want := "a 1\nevent.lost 1\nb 2\nc 0\nevent.lost 9\n"
	if err != nil || string(buf[:n]) != want {
		t.Fatalf("read: %q, %v; want %q", buf[:n], err, want)
	}
	w.bus.Publish("d", "after")
	n, err = fid.Read(buf)
	if err != nil || string(buf[:n]) != "d after\n" {
		t.Fatalf("read after draining: %q, %v", buf[:n], err)
	}
}

// An error naming what the client sent must still fit in a reply: srv9p
// drops a reply longer than msize (the client waits forever) and panics on
// a string of 64 KiB or more (the process dies).
func TestLongErrorFits(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	sock := serveUnix(t, srv)
	for _, tc := range []struct {
		msize uint32
		name  int
	}{
		// The longest names that fit in a Twalk at msize.
		{ns.MinMsize, ns.MinMsize - 32},
		{8192, 8192 - 32},
		// The longest name there is.
		{ns.DefaultMaxMsize, 1<<16 - 1},
	} {
		r := dialRaw(t, "unix", sock)
		r.start(tc.msize, "glenda")
		name := strings.Repeat("n", tc.name)
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1, Wname: []string{"session"}})
		f := r.rpc(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 1, Newfid: 2, Wname: []string{name}})
		if f.Type != plan9.Rerror || !strings.HasPrefix(f.Ename, "session/nnnn") {
			t.Fatalf("msize %d, walk of a %d-byte name: %v", tc.msize, tc.name, f)
		}
		if size := 4 + 1 + 2 + 2 + len(f.Ename); size > int(tc.msize) {
			t.Errorf("msize %d: Rerror of %d bytes", tc.msize, size)
		}
		r.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 2, Fid: 0})
	}
	if n := ns.Pending(srv); n != 0 {
		t.Errorf("%d requests pending after all were answered", n)
	}
}

// logBuf collects what a server logs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the lines logged that contain every one of want.
func (l *logBuf) lines(want ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []string
Line:
	for _, line := range strings.Split(l.b.String(), "\n") {
		for _, w := range want {
			if !strings.Contains(line, w) {
				continue Line
			}
		}
		got = append(got, line)
	}
	return got
}

func captureLog(srv *ns.Server) *logBuf {
	lb := &logBuf{}
	srv.Log = slog.New(slog.NewTextHandler(lb, nil))
	return lb
}

// wantLoggedOnce fails unless exactly one line logged holds all of want.
func wantLoggedOnce(t *testing.T, lb *logBuf, want ...string) {
	t.Helper()
	if got := lb.lines(want...); len(got) != 1 {
		t.Errorf("%d lines logged with %q, want 1; the log:\n%s", len(got), want, strings.Join(lb.lines(), "\n"))
	}
}

// serveKind serves one connection of peer over a Unix socket pair and
// returns the client's end. ServeUnix can only make Owner peers of this
// test process; the pair is the same transport with any peer.
func serveKind(t *testing.T, srv *ns.Server, peer ns.Peer) *rawConn {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(conns[0], peer) }()
	r := newRaw(t, conns[1])
	t.Cleanup(func() {
		conns[1].Close()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Errorf("ServeConn did not return after the client closed")
		}
	})
	return r
}

// A tool may hold every connection its kind is allowed; the owner's
// clients and remote ones still connect, each kind having its own cap.
func TestMaxConnsPerKind(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxSandboxedConns = 3
	srv.MaxRemoteConns = 1
	lb := captureLog(srv)
	tool := ns.Peer{Kind: ns.Sandboxed, PID: 4242, UID: 1000}

	var held []*rawConn
	for range 3 {
		r := serveKind(t, srv, tool)
		r.start(8192, "none")
		held = append(held, r)
	}
	for range 3 {
		r := serveKind(t, srv, tool)
		r.fail(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
			"ns: too many sandboxed connections (limit 3)")
		r.expectClosed()
	}
	// The refusals of a retrying peer are logged once, naming it.
	wantLoggedOnce(t, lb, "ns: refused connection", "too many sandboxed connections", "peer=sandboxed", "pid=4242", "uid=1000")

	// The owner, over the real socket, and a remote peer still get in.
	fs := mount(t, "unix", serveUnix(t, srv), "glenda")
	if got := readFile(t, fs, "whoami"); got != "admin admin=true\n" {
		t.Errorf("the owner's client reads whoami %q", got)
	}
	remote := serveKind(t, srv, ns.Peer{Kind: ns.Remote, UID: -1})
	remote.start(8192, "none")
	serveKind(t, srv, ns.Peer{Kind: ns.Remote, UID: -1}).fail(
		&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
		"ns: too many remote connections (limit 1)")

	// A connection that ends frees its place.
	held[0].nc.Close()
	waitFor(t, "the closed connection to end", func() bool { return srv.Conns() == 2+1+1 })
	serveKind(t, srv, tool).start(8192, "none")
}

// The cap on owner connections holds on the Unix listener too, with the
// peer's credentials in the log.
func TestMaxOwnerConnsUnix(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxOwnerConns = 2
	lb := captureLog(srv)
	sock := serveUnix(t, srv)
	mount(t, "unix", sock, "glenda")
	mount(t, "unix", sock, "glenda")
	r := dialRaw(t, "unix", sock)
	r.fail(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
		"ns: too many owner connections (limit 2)")
	r.expectClosed()
	wantLoggedOnce(t, lb, "too many owner connections", "peer=owner",
		fmt.Sprintf("pid=%d", os.Getpid()), fmt.Sprintf("uid=%d", os.Getuid()))
}

// Fids are bounded across all the connections of a kind of peer, not
// only on each: many connections each under its own cap must not add up
// to unbounded memory.
func TestMaxKindFids(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxKindFids = 10
	lb := captureLog(srv)
	tool := ns.Peer{Kind: ns.Sandboxed, PID: 4343, UID: 1000}

	a := serveKind(t, srv, tool)
	a.start(8192, "alice") // fid 0
	for fid := uint32(1); fid < 6; fid++ {
		a.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid})
	}
	b := serveKind(t, srv, ns.Peer{Kind: ns.Sandboxed, PID: 4344, UID: 1000})
	b.start(8192, "bob")
	for fid := uint32(1); fid < 4; fid++ {
		b.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid, Wname: []string{"hello"}})
	}
	const refusal = "ns: too many fids held by sandboxed connections (limit 10)"
	b.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4}, refusal)
	b.fail(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 4, Afid: plan9.NOFID, Uname: "bob"}, refusal)
	a.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 6}, refusal)
	if n := ns.KindFids(srv, ns.Sandboxed); n != 10 {
		t.Errorf("sandboxed peers hold %d fids, want the cap 10", n)
	}
	// Logged once for each connection that ran into it.
	wantLoggedOnce(t, lb, "too many fids held by sandboxed connections", "pid=4343", "uid=1000", "peer=sandboxed")
	wantLoggedOnce(t, lb, "too many fids held by sandboxed connections", "pid=4344", "uid=1000", "peer=sandboxed")
	// The owner's clients have their own budget.
	fs := mountPeer(t, srv, ns.Peer{Kind: ns.Owner, UID: -1}, "glenda", "")
	if got := readFile(t, fs, "hello"); got != "hello, world\n" {
		t.Errorf("the owner read %q", got)
	}

	// A clunk gives a place back; a connection's end gives back all its.
	a.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 5})
	b.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4})
	a.nc.Close()
	waitFor(t, "the closed connection's fids to be clunked", func() bool { return ns.KindFids(srv, ns.Sandboxed) == 5 })
	b.nc.Close()
	waitFor(t, "every fid to be clunked", func() bool { return ns.KindFids(srv, ns.Sandboxed) == 0 })
}

// The bytes of requests left unanswered (blocked in their handlers) are
// bounded across all the connections of a kind of peer: each connection's
// MaxRequests times msize, times many connections, would be gigabytes.
func TestMaxKindHeld(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	// A Tread is 23 bytes: room for three blocked ones, not four.
	srv.MaxKindHeld = 3*23 + 10
	lb := captureLog(srv)
	a := serveKind(t, srv, ns.Peer{Kind: ns.Sandboxed, PID: 4646, UID: 1000})
	a.start(8192, "alice")
	a.open(1, plan9.OREAD, "log")
	b := serveKind(t, srv, ns.Peer{Kind: ns.Sandboxed, PID: 4647, UID: 1000})
	b.start(8192, "bob")
	b.open(1, plan9.OREAD, "log")
	// Opens and attaches are answered: they hold nothing once answered.
	if n := ns.KindHeld(srv, ns.Sandboxed); n != 0 {
		t.Fatalf("%d bytes held with every request answered", n)
	}
	a.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 100})
	a.send(&plan9.Fcall{Type: plan9.Tread, Tag: 11, Fid: 1, Count: 100})
	b.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 100})
	waitFor(t, "three blocked reads", func() bool { return ns.Pending(srv) == 3 })
	const refusal = "ns: too many bytes of unanswered requests from sandboxed connections (limit 79)"
	b.fail(&plan9.Fcall{Type: plan9.Tread, Tag: 11, Fid: 1, Count: 100}, refusal)
	a.fail(&plan9.Fcall{Type: plan9.Tstat, Tag: 12, Fid: 0}, refusal)
	wantLoggedOnce(t, lb, "too many bytes of unanswered requests", "pid=4647", "peer=sandboxed")
	// The owner's clients have their own budget.
	fs := mountPeer(t, srv, ns.Peer{Kind: ns.Owner, UID: -1}, "glenda", "")
	if got := readFile(t, fs, "hello"); got != "hello, world\n" {
		t.Errorf("the owner read %q", got)
	}
	// A flush always gets through; the flushed read gives its bytes back.
	b.send(&plan9.Fcall{Type: plan9.Tflush, Tag: 20, Oldtag: 10})
	if f := b.recv(); f.Type != plan9.Rerror || f.Tag != 10 {
		t.Fatalf("got %v, want Rerror for the flushed tag 10", f)
	}
	if f := b.recv(); f.Type != plan9.Rflush || f.Tag != 20 {
		t.Fatalf("got %v, want Rflush tag 20", f)
	}
	b.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 12, Fid: 0})
	// Answers give bytes back, and so does a connection's end.
	w.log.Write([]byte("x"))
	for range 2 {
		if f := a.recv(); f.Type != plan9.Rread {
			t.Fatalf("got %v, want Rread", f)
		}
	}
	waitFor(t, "every answered request's bytes to be given back", func() bool { return ns.KindHeld(srv, ns.Sandboxed) == 0 })
	b.send(&plan9.Fcall{Type: plan9.Tread, Tag: 30, Fid: 1, Offset: 1, Count: 100}) // at the end: it blocks
	waitFor(t, "a blocked read", func() bool { return ns.KindHeld(srv, ns.Sandboxed) == 23 })
	b.nc.Close()
	waitFor(t, "a closed connection's bytes to be given back", func() bool { return ns.KindHeld(srv, ns.Sandboxed) == 0 })
}

// Walks in flight together cannot all pass the fid check and overshoot
// the cap between them.
func TestMaxFidsInFlight(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxFids = 4
	srv.MaxRequests = 64
	r := dialRaw(t, "unix", serveUnix(t, srv))
	r.start(8192, "glenda") // fid 0
	const walks = 60
	var b []byte
	for i := range walks {
		b = append(b, frames(&plan9.Fcall{Type: plan9.Twalk, Tag: uint16(100 + i), Fid: 0, Newfid: uint32(1 + i), Wname: []string{"session", "alpha", "name"}})...)
	}
	r.sendBytes(b) // in one write, so that the walks run together
	walked := 0
	for range walks {
		switch f := r.recv(); f.Type {
		case plan9.Rwalk:
			walked++
		case plan9.Rerror:
			if f.Ename != "ns: too many fids (limit 4)" {
				t.Errorf("walk refused with %q", f.Ename)
			}
		default:
			t.Fatalf("got %v", f)
		}
	}
	if walked != 3 {
		t.Errorf("%d of %d walks in flight together succeeded, want 3 (fid 0 and 3 more make the cap 4)", walked, walks)
	}
	if n := ns.KindFids(srv, ns.Owner); n != 4 {
		t.Errorf("%d fids held, want 4", n)
	}
}

// Once a message has begun, the rest must come within FrameTimeout;
// between messages, a client may be idle, and a read may block, as long
// as they like.
func TestFrameTimeout(t *testing.T) {
	t.Parallel()
	const frameTimeout = 200 * time.Millisecond
	w := newWorld(t)
	srv := newServer(w)
	srv.FrameTimeout = frameTimeout
	lb := captureLog(srv)
	sock := serveUnix(t, srv)

	stalled := dialRaw(t, "unix", sock)
	stalled.start(8192, "glenda")
	idle := dialRaw(t, "unix", sock)
	idle.start(8192, "glenda")
	reader := dialRaw(t, "unix", sock)
	reader.start(8192, "glenda")
	reader.open(1, plan9.OREAD, "log")
	reader.send(&plan9.Fcall{Type: plan9.Tread, Tag: 7, Fid: 1, Count: 100}) // blocks at the stream's end

	// Half a Tstat, then nothing.
	start := time.Now()
	stalled.sendBytes(frames(&plan9.Fcall{Type: plan9.Tstat, Tag: 1, Fid: 0})[:5])
	stalled.expectClosed()
	if d := time.Since(start); d < frameTimeout {
		t.Errorf("closed after %v, before the frame timeout of %v", d, frameTimeout)
	}
	wantLoggedOnce(t, lb, "ns: refused", "not finished within 200ms", "peer=owner",
		fmt.Sprintf("pid=%d", os.Getpid()), fmt.Sprintf("uid=%d", os.Getuid()))

	// Past the timeout, the idle connection and the blocked read are
	// still there: their last messages came before the stalled one's
	// half, so a timeout that also covered them would have run out
	// before the one that closed it. A message sent in pieces, each in
	// time, is whole.
	idle.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 1, Fid: 0})
	msg := frames(&plan9.Fcall{Type: plan9.Tstat, Tag: 2, Fid: 0})
	// The pauses between the pieces are the point: each piece arrives on
	// its own. (Short ones: under the race detector on a loaded machine a
	// pause overshoots, and the whole message must still come in time.)
	idle.sendBytes(msg[:3])
	await.For(t.Context(), frameTimeout/10)
	idle.sendBytes(msg[3:6])
	await.For(t.Context(), frameTimeout/10)
	idle.sendBytes(msg[6:])
	if f := idle.recv(); f.Type != plan9.Rstat || f.Tag != 2 {
		t.Fatalf("a message sent in pieces within the timeout: got %v", f)
	}
	w.log.Write([]byte("late"))
	if f := reader.recv(); f.Type != plan9.Rread || f.Tag != 7 || string(f.Data) != "late" {
		t.Fatalf("the blocked read got %v, want Rread of late", f)
	}
}

// Refusals are logged once for each connection, with the peer, however
// many messages run into the limit.
func TestRefusalLoggedOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxFids = 2
	srv.MaxRequests = 1
	lb := captureLog(srv)
	r := serveKind(t, srv, ns.Peer{Kind: ns.Sandboxed, PID: 4444, UID: 1001})
	r.start(8192, "alice")
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1})
	for range 5 {
		r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 2}, "ns: too many fids (limit 2)")
	}
	r.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 1})
	r.open(1, plan9.OREAD, "wait")
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 10}) // blocks, holding the one place
	for range 5 {
		r.fail(&plan9.Fcall{Type: plan9.Tstat, Tag: 11, Fid: 0}, "ns: too many outstanding requests (limit 1)")
	}
	wantLoggedOnce(t, lb, "ns: refused", `"ns: too many fids (limit 2)"`, "peer=sandboxed", "pid=4444", "uid=1001")
	wantLoggedOnce(t, lb, "ns: refused", "too many outstanding requests", "peer=sandboxed", "pid=4444", "uid=1001")
	// Another connection's refusals are its own line.
	r2 := serveKind(t, srv, ns.Peer{Kind: ns.Sandboxed, PID: 4545, UID: 1001})
	r2.start(8192, "alice")
	r2.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1})
	r2.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 2}, "ns: too many fids (limit 2)")
	wantLoggedOnce(t, lb, "ns: refused", `"ns: too many fids (limit 2)"`, "pid=4545")
}
