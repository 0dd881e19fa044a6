package ns_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/ns"
)

// FuzzServe feeds arbitrary bytes to one connection as what the client
// sent, after a valid Tversion and Tattach or without them. Whatever the
// bytes, the server must not panic (srv9p runs each request in a
// goroutine of its own, so a panic there ends the process; one in a
// handler is logged), nor hang: ServeConn returns once the input ends,
// every goroutine and fid of the connection is gone after it, and a fresh
// connection to the same server still works. And it must keep 9P's
// promise to the client (checkReplies): every reply well formed, for a
// request outstanding under its tag, of its type plus one or Rerror; no
// request answered twice; every request answered, but those still
// blocked when the input ended; a flushed request answered before its
// Rflush or not at all. Seeds are in testdata/fuzz/FuzzServe.
//
// The frames go to the server one at a time, each once the ones before
// are answered or blocked (see fuzzConn), so that one input always takes
// the same path through the server: with every request racing the next,
// the fuzzer saw new coverage it could not reproduce and spent its time
// minimising it.
//
// make fuzz runs it briefly with
//
//	go test ./ns -run '^$' -fuzz '^FuzzServe$' -fuzztime 12000x -fuzzminimizetime 200x
func FuzzServe(f *testing.F) {
	prefix := frames(
		&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
		&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: ""},
	)
	f.Fuzz(func(t *testing.T, withPrefix bool, data []byte) {
		before := runtime.NumGoroutine()
		w := newWorld(t)
		srv, lb := newFuzzServer(w)
		in := data
		if withPrefix {
			in = append(bytes.Clone(prefix), data...)
		}
		conn := &fuzzConn{t: t, srv: srv, frames: splitFrames(in), replied: make(chan struct{}, 1)}
		done := make(chan error, 1)
		go func() { done <- srv.ServeConn(conn, ns.Peer{Kind: ns.Owner, UID: -1}) }()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Fatalf("ServeConn did not return within %v of the input's end", timeout)
		}

		r, end := fuzzDial(t, srv, ns.Peer{Kind: ns.Remote, UID: -1})
		r.start(8192, "glenda")
		r.open(1, plan9.OREAD, "hello")
		if f := r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 1, Fid: 1, Count: 100}); string(f.Data) != "hello, world\n" {
			t.Fatalf("a fresh connection read %q", f.Data)
		}
		end()
		checkDrained(t, srv, lb, before)
		checkReplies(t, conn, lb)
	})
}

// newFuzzServer returns a server of w's tree whose log is kept, to look
// for handler panics in.
func newFuzzServer(w *world) (*ns.Server, *logBuf) {
	srv := newServer(w)
	return srv, captureLog(srv)
}

// fuzzDial serves one connection of peer over net.Pipe; end closes it and
// waits for the server to be done with it.
func fuzzDial(t *testing.T, srv *ns.Server, peer ns.Peer) (r *rawConn, end func()) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(a, peer) }()
	r = newRaw(t, b)
	return r, func() {
		b.Close()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Fatalf("ServeConn did not return after the client closed")
		}
	}
}

// checkDrained fails unless, once every connection has ended, the server
// holds nothing for them: no connection, no fid, no goroutine beyond
// those running before the exec, and no handler panicked.
func checkDrained(t *testing.T, srv *ns.Server, lb *logBuf, goroutines int) {
	t.Helper()
	fids := func() int {
		return ns.KindFids(srv, ns.Owner) + ns.KindFids(srv, ns.Sandboxed) + ns.KindFids(srv, ns.Remote)
	}
	await.Until(t, timeout, "the server to let go of every ended connection", func() bool {
		return srv.Conns() == 0 && fids() == 0 && runtime.NumGoroutine() <= goroutines
	}, func() string {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return fmt.Sprintf("%d connections, %d fids, %d goroutines (%d before):\n%s",
			srv.Conns(), fids(), runtime.NumGoroutine(), goroutines, buf)
	})
	if lines := lb.lines("handler panic"); len(lines) > 0 {
		t.Fatalf("a handler panicked:\n%s", strings.Join(lines, "\n"))
	}
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

// splitFrames cuts b where its size fields say messages end. What cannot
// be a whole message (a short or absurd size) goes as one last piece.
func splitFrames(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			return append(out, b)
		}
		size := binary.LittleEndian.Uint32(b)
		if size < 4 || uint64(size) > uint64(len(b)) {
			return append(out, b)
		}
		out = append(out, b[:size])
		b = b[size:]
	}
	return out
}

// fuzzConn is a connection whose client sends frames and then hangs up.
// Before each frame, and before hanging up, it waits until the server has
// answered every request so far or is blocked on it, the way a client
// waits for replies; so the same input always reaches the same handlers
// in the same order, and blocked reads are still blocked when the next
// request (a flush, a write to the same fid) or the hang-up comes. It
// logs each frame handed over and each reply, in the order they happen,
// for checkReplies.
type fuzzConn struct {
	t      *testing.T
	srv    *ns.Server
	frames [][]byte
	cur    []byte

	replied chan struct{} // a reply was written since the last receive
	parked  int           // requests blocked at the last settle
	sent    int           // frames handed over
	settled int           // frames handed over at the last settle

	mu     sync.Mutex
	events []fuzzEvent
}

// A fuzzEvent is a frame handed to the server or a reply written by it.
type fuzzEvent struct {
	reply bool
	msg   []byte
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	if len(c.cur) == 0 {
		c.settle()
		if len(c.frames) == 0 {
			return 0, io.EOF
		}
		c.cur, c.frames = c.frames[0], c.frames[1:]
		c.sent++
		c.log(fuzzEvent{msg: c.cur})
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// settle waits until every request admitted is answered or parked in a
// handler. It waits on the server rather than polling it: the fuzzer
// counts how often each branch runs, and a poll loop's count would differ
// from one run of an input to the next, making inputs look new that are
// not. Each reply wakes it, so it is done as soon as the replies are in,
// also while a request stays parked from before; only a request that
// parks now costs a wait, after which the goroutines' states tell.
func (c *fuzzConn) settle() {
	c.settled = c.sent
	deadline := time.Now().Add(timeout)
	for {
		n := ns.Pending(c.srv)
		if n == 0 {
			c.parked = 0
			return
		}
		// As many outstanding as were parked: the same ones, unless one
		// has woken to answer (then its reply is due).
		if n <= c.parked && n <= parkedRequests() {
			c.parked = n
			return
		}
		select {
		case <-c.replied:
		case <-time.After(time.Millisecond):
			// No reply: the new request may have parked.
			if p := parkedRequests(); n <= p {
				c.parked = n
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d requests neither answered nor blocked after %v", n, timeout)
		}
	}
}

// Write takes one reply of the server's.
func (c *fuzzConn) Write(p []byte) (int, error) {
	c.log(fuzzEvent{reply: true, msg: bytes.Clone(p)})
	select {
	case c.replied <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (c *fuzzConn) Close() error { return nil }

func (c *fuzzConn) log(e fuzzEvent) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
}

// A fuzzReq is a frame handed to the server, read as a request from its
// header alone: decoding it is the server's business.
type fuzzReq struct {
	typ       uint8
	tag       uint16
	whole     bool     // its size is its length: the server reads it all
	duplicate bool     // sent while another request held its tag
	old       *fuzzReq // a Tflush's: the request it flushes
	answered  bool
	undecoded bool // whole, but not a message 9P can decode
}

func (r *fuzzReq) String() string { return fmt.Sprintf("type %d tag %d", r.typ, r.tag) }

// isT reports whether typ is a T-message's type.
func isT(typ uint8) bool {
	return typ%2 == 0 && typ >= plan9.Tversion && typ <= plan9.Twstat && typ != plan9.Terror
}

// checkReplies replays c's log, once the server is done with the
// connection, against what 9P promises the client.
func checkReplies(t *testing.T, c *fuzzConn, lb *logBuf) {
	t.Helper()
	c.mu.Lock()
	events := slices.Clone(c.events)
	c.mu.Unlock()
	outstanding := map[uint16][]*fuzzReq{}
	drop := func(r *fuzzReq) {
		q := outstanding[r.tag]
		if i := slices.Index(q, r); i >= 0 {
			outstanding[r.tag] = slices.Delete(q, i, i+1)
		}
	}
	var last *fuzzReq // the last frame handed over
	frames := 0
	for i, e := range events {
		if !e.reply {
			frames++
			last = nil
			if len(e.msg) < 7 {
				continue // no tag to answer: the connection ends there
			}
			r := &fuzzReq{typ: e.msg[4], tag: binary.LittleEndian.Uint16(e.msg[5:7]),
				whole: int(binary.LittleEndian.Uint32(e.msg)) == len(e.msg)}
			if _, err := plan9.UnmarshalFcall(e.msg); err != nil {
				r.undecoded = true
			}
			r.duplicate = len(outstanding[r.tag]) > 0
			if r.typ == plan9.Tflush && r.whole && len(e.msg) == 9 {
				if q := outstanding[binary.LittleEndian.Uint16(e.msg[7:9])]; len(q) > 0 {
					r.old = q[0]
				}
			}
			outstanding[r.tag] = append(outstanding[r.tag], r)
			last = r
			continue
		}
		f, err := plan9.UnmarshalFcall(e.msg)
		if err != nil {
			t.Fatalf("event %d: a malformed reply %x: %v", i, e.msg, err)
		}
		if f.Type != plan9.Rerror && (f.Type%2 != 1 || f.Type < plan9.Rversion || f.Type > plan9.Rwstat) {
			t.Fatalf("event %d: the server sent %v, not a reply", i, f)
		}
		q := outstanding[f.Tag]
		if len(q) == 0 {
			t.Fatalf("event %d: reply %v to tag %d, which no request has outstanding (answered, or flushed)", i, f, f.Tag)
		}
		// A duplicate tag is refused at once; the request that held the
		// tag gets its own reply, before or after.
		r := q[0]
		if f.Type == plan9.Rerror {
			if j := slices.IndexFunc(q, func(r *fuzzReq) bool { return r.duplicate }); j >= 0 {
				r = q[j]
			}
		}
		drop(r)
		r.answered = true
		switch {
		case f.Type == plan9.Rerror:
		case !r.whole || !isT(r.typ):
			t.Fatalf("event %d: %v answers a frame (%v) that is no T-message, want Rerror", i, f, r)
		case f.Type != r.typ+1:
			t.Fatalf("event %d: %v answers a request of %v", i, f, r)
		}
		// Once Rflush is sent, the flushed request is answered or never.
		if f.Type == plan9.Rflush && r.old != nil && !r.old.answered {
			drop(r.old)
		}
	}
	// Every request is answered, but those blocked when the input ended,
	// and a last one the server did not settle, or could not decode
	// (srv9p ends the connection on it, whether or not the harness saw it
	// settled first).
	var unanswered []string
	for _, q := range outstanding {
		for _, r := range q {
			if r.whole && !(r == last && (c.settled < frames || r.undecoded)) {
				unanswered = append(unanswered, r.String())
			}
		}
	}
	if len(unanswered) > c.parked {
		slices.Sort(unanswered)
		t.Fatalf("%d requests never answered, %d blocked when the input ended: %s\nwhat passed (%d frames handed over, %d at the last settle):\n%s\nthe server's log:\n%s",
			len(unanswered), c.parked, strings.Join(unanswered, "; "), frames, c.settled, eventList(events), strings.Join(lb.lines(), "\n"))
	}
}

// eventList shows a connection's log one event to a line: what a frame
// or reply says of itself in its header.
func eventList(events []fuzzEvent) string {
	var b strings.Builder
	for _, e := range events {
		dir := "->"
		if e.reply {
			dir = "<-"
		}
		if len(e.msg) < 7 {
			fmt.Fprintf(&b, "%s %d bytes\n", dir, len(e.msg))
			continue
		}
		fmt.Fprintf(&b, "%s type %d tag %d size %d, %d bytes\n", dir, e.msg[4], binary.LittleEndian.Uint16(e.msg[5:7]), binary.LittleEndian.Uint32(e.msg), len(e.msg))
	}
	return b.String()
}

var stackBuf struct {
	sync.Mutex
	b []byte
}

// parkedRequests counts the goroutines serving a 9P request that are
// blocked on a channel: waiting for data, an event or the fid's lock,
// until the request is flushed or its connection ends. The runtime tells
// a parked goroutine from one merely not yet run, which no timeout can.
func parkedRequests() int {
	stackBuf.Lock()
	defer stackBuf.Unlock()
	if stackBuf.b == nil {
		stackBuf.b = make([]byte, 64<<10)
	}
	var all []byte
	for {
		n := runtime.Stack(stackBuf.b, true)
		if n < len(stackBuf.b) {
			all = stackBuf.b[:n]
			break
		}
		stackBuf.b = make([]byte, 2*len(stackBuf.b))
	}
	parked := 0
	for _, g := range bytes.Split(all, []byte("\n\n")) {
		hdr, _, _ := bytes.Cut(g, []byte("\n"))
		_, state, _ := bytes.Cut(hdr, []byte("["))
		state, _, _ = bytes.Cut(state, []byte("]"))
		state, _, _ = bytes.Cut(state, []byte(","))
		switch string(state) {
		case "select", "select (no cases)", "chan receive", "chan send":
			if bytes.Contains(g, []byte("ns.(*conn).serveRequest")) {
				parked++
			}
		}
	}
	return parked
}
