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
	deadline := time.Now().Add(timeout)
	for {
		fids := ns.KindFids(srv, ns.Owner) + ns.KindFids(srv, ns.Sandboxed) + ns.KindFids(srv, ns.Remote)
		n := runtime.NumGoroutine()
		if srv.Conns() == 0 && fids == 0 && n <= goroutines {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("after every connection ended: %d connections, %d fids, %d goroutines (%d before):\n%s",
				srv.Conns(), fids, n, goroutines, buf)
		}
		time.Sleep(200 * time.Microsecond)
	}
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

// FuzzPrincipals runs programs of 9P operations in which who attaches
// changes from one attach to the next and from one connection to the
// next: the input picks each connection's peer kind and, for each
// Tattach, the user name and a capability that proves it, proves someone
// else, or is missing. An oracle written from the trust rules in
// docs/architecture.md says who each attach must be, and the program
// fails if the server disagrees (whoami), lets a principal walk, open or
// wstat what the mode denies it, lets none change anything, runs the
// secret's or a plan's handler for a principal the mode denies, or
// leaves a goroutine or fid behind once its connections end.
//
// make fuzz runs it briefly with
//
//	go test ./ns -run '^$' -fuzz '^FuzzPrincipals$' -fuzztime 12000x -fuzzminimizetime 200x
func FuzzPrincipals(f *testing.F) {
	// The first connection's peer kind, then ops: each a byte, then its
	// arguments (see principalProgram.run).
	f.Add([]byte{
		byte(ns.Sandboxed),
		opAttach, 0, 1, capOwn, // alice, proved
		opWalk, 0, 1, 11, // secret
		opOpen, 1, plan9.OREAD,
		opRead, 1,
		opAttach, 2, 2, capOwn, // bob, proved
		opWalk, 2, 3, 11,
		opOpen, 3, plan9.OREAD,
		opAttach, 4, 1, capOther, // alice with bob's key: none
		opWalk, 4, 5, 10, // notes
		opOpen, 5, plan9.OWRITE,
		opWrite, 5, 0,
	})
	f.Add([]byte{
		byte(ns.Remote),
		opAttach, 0, 0, capOwn, // glenda over TCP: none
		opWalk, 0, 1, 10,
		opOpen, 1, plan9.ORDWR,
		opWstat, 1,
		opWalk, 0, 2, 5, // ctl: 0222, but none never writes
		opOpen, 2, plan9.OWRITE,
		opWrite, 2, 0,
		opConnect, byte(ns.Owner),
		opAttach, 0, 5, capNone, // "none" from the owner: admin
		opWalk, 0, 1, 16, // session/alpha/plan
		opOpen, 1, plan9.ORDWR,
		opWrite, 1, 1,
		opRead, 1,
	})
	f.Add([]byte{
		byte(ns.Sandboxed),
		opAttach, 0, 4, capOwn, // admin, "proved": none
		opAttach, 1, 6, capOwn, // staff, proved: no member of staff
		opWalk, 1, 2, 11,
		opOpen, 2, plan9.OREAD,
		opAttach, 3, 2, capOwn, // bob owns beta
		opWalk, 3, 4, 17,
		opOpen, 4, plan9.ORDWR,
		opWrite, 4, 2,
		opWalk, 0, 5, 17,
		opOpen, 5, plan9.OWRITE,
		opClunk, 4,
		opWalk, 3, 6, 12, // drop: bob is not in staff
		opOpen, 6, plan9.OWRITE,
	})
	f.Fuzz(func(t *testing.T, prog []byte) {
		before := runtime.NumGoroutine()
		w := newWorld(t)
		srv, lb := newFuzzServer(w)
		p := &principalProgram{t: t, w: w, srv: srv, prog: prog}
		p.run()
		checkDrained(t, srv, lb, before)
		w.mu.Lock()
		readers := slices.Clone(w.readers)
		w.mu.Unlock()
		for _, r := range readers {
			file, user, _ := strings.Cut(r, " ")
			o, who := fuzzNodes[file], oracle{user: user, admin: user == ns.Admin}
			if !who.may(o.owner, o.group, o.mode, plan9.AREAD) {
				t.Fatalf("%s's handler ran for %s, whom its mode %#o (%s:%s) denies", file, user, o.mode, o.owner, o.group)
			}
		}
	})
}

// The ops of a principal program.
const (
	opConnect = iota // kind: end the connection, start one of this peer kind
	opAttach         // fid, user, capability
	opWalk           // fid, newfid, path
	opOpen           // fid, mode
	opRead           // fid
	opWrite          // fid, payload
	opWstat          // fid: truncate, the one wstat allowed
	opClunk          // fid
	numOps
)

// The capabilities an attach may present as its aname.
const (
	capOwn   = iota // key(user): proves user
	capOther        // another user's key
	capNone         // no aname
	capJunk         // not a key at all
	numCaps
)

var (
	fuzzUsers    = []string{"glenda", "alice", "bob", "", ns.Admin, ns.None, "staff", "ollie"}
	fuzzPayloads = []string{"x", "fail", "*", strings.Repeat("y", 300)}

	// fuzzPaths are walked from a fid; each names a file of the test
	// tree, whose mode the oracle knows from fuzzNodes.
	fuzzPaths = []string{
		"", "hello", "counter", "big", "whoami", "ctl", "calc", "log",
		"trim", "wait", "notes", "secret", "drop", "private",
		"private/note", "session", "session/alpha/plan",
		"session/beta/plan", "session/id-1/name", "session/beta",
		"event", "..", "nosuch",
	}
)

// fuzzNode is what the oracle knows of a file: owner, group and mode.
type fuzzNode struct {
	owner, group string
	mode         plan9.Perm
}

// fuzzNodes restates the test tree's modes (fixture_test.go); the tree's
// owner is glenda, its group ollie.
var fuzzNodes = map[string]fuzzNode{
	"":                   {"glenda", "ollie", plan9.DMDIR | 0555},
	"hello":              {"glenda", "ollie", 0444},
	"counter":            {"glenda", "ollie", 0444},
	"big":                {"glenda", "ollie", 0444},
	"whoami":             {"glenda", "ollie", 0444},
	"ctl":                {"glenda", "ollie", 0222},
	"calc":               {"glenda", "ollie", 0666},
	"log":                {"glenda", "ollie", 0444},
	"trim":               {"glenda", "ollie", 0444},
	"wait":               {"glenda", "ollie", 0444},
	"event":              {"glenda", "ollie", 0666},
	"notes":              {"glenda", "ollie", 0644},
	"secret":             {"glenda", "staff", 0440},
	"drop":               {"glenda", "staff", 0020},
	"private":            {"glenda", "ollie", plan9.DMDIR | 0700},
	"private/note":       {"glenda", "ollie", 0444},
	"session":            {"glenda", "ollie", plan9.DMDIR | 0555},
	"session/alpha":      {"alice", "ollie", plan9.DMDIR | 0555},
	"session/beta":       {"bob", "staff", plan9.DMDIR | 0555},
	"session/alpha/plan": {"alice", "ollie", 0600},
	"session/beta/plan":  {"bob", "staff", 0600},
	"session/alpha/name": {"alice", "ollie", 0444},
	"session/beta/name":  {"bob", "staff", 0444},
	"plan/id-1":          {"alice", "ollie", 0600},
	"plan/id-2":          {"bob", "staff", 0600},
}

// canonical names a path of the tree the way fuzzNodes does: session ids
// become names, ".." and "" are resolved.
func canonical(path []string) string {
	var out []string
	for _, e := range path {
		switch e {
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case "id-1":
			out = append(out, "alpha")
		case "id-2":
			out = append(out, "beta")
		default:
			out = append(out, e)
		}
	}
	return strings.Join(out, "/")
}

// oracle is who an attach must be, by the trust rules: the owner's
// peers are the admin whatever they claim; a sandboxed peer is the user
// its capability proves, except admin and none, which nothing proves;
// everyone else is none.
type oracle struct {
	user  string
	admin bool
}

func oracleFor(kind ns.PeerKind, uname, aname string) oracle {
	switch kind {
	case ns.Owner:
		return oracle{user: ns.Admin, admin: true}
	case ns.Sandboxed:
		if uname != "" && uname != ns.Admin && uname != ns.None && aname == key(uname) {
			return oracle{user: uname}
		}
	}
	return oracle{user: ns.None}
}

// may is Plan 9's access check: other, then owner, then group bits;
// group members are only those inGroup names (alice in staff), never a
// user named like the group; none never writes.
func (o oracle) may(owner, group string, mode plan9.Perm, want int) bool {
	if o.admin {
		return true
	}
	if o.user == ns.None && want&plan9.AWRITE != 0 {
		return false
	}
	m := int(mode & 0777)
	return want&m == want ||
		o.user == owner && want&(m>>6) == want ||
		inGroup(o.user, group) && want&(m>>3) == want
}

type fuzzFid struct {
	who    oracle
	path   []string
	open   bool
	reads  bool // opened for reading
	writes bool
}

// principalProgram interprets a fuzzer's input as ops on connections of
// the server, checking each outcome against the oracle.
type principalProgram struct {
	t    *testing.T
	w    *world
	srv  *ns.Server
	prog []byte

	kind ns.PeerKind
	r    *rawConn
	end  func()
	fids map[uint32]*fuzzFid
	tag  uint16
}

func (p *principalProgram) arg(n int) int {
	if len(p.prog) == 0 {
		return 0
	}
	b := p.prog[0]
	p.prog = p.prog[1:]
	return int(b) % n
}

const maxFuzzOps, maxFuzzConns, fuzzFids = 64, 4, 8

func (p *principalProgram) run() {
	defer func() {
		if p.end != nil {
			p.end()
		}
	}()
	conns := 0
	op := opConnect // the first byte is the first connection's kind
	for ops := 0; len(p.prog) > 0 && ops < maxFuzzOps; ops++ {
		if ops > 0 {
			op = p.arg(numOps)
		}
		switch op {
		case opConnect:
			kind := ns.PeerKind(p.arg(3))
			if conns++; conns > maxFuzzConns {
				return
			}
			if p.end != nil {
				p.end()
			}
			p.kind, p.fids = kind, map[uint32]*fuzzFid{}
			p.r, p.end = fuzzDial(p.t, p.srv, ns.Peer{Kind: kind, PID: 7, UID: 7})
			p.r.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"})
		case opAttach:
			p.attach(uint32(p.arg(fuzzFids)), fuzzUsers[p.arg(len(fuzzUsers))], p.arg(numCaps))
		case opWalk:
			p.walk(uint32(p.arg(fuzzFids)), uint32(p.arg(fuzzFids)), fuzzPaths[p.arg(len(fuzzPaths))])
		case opOpen:
			p.open(uint32(p.arg(fuzzFids)), uint8(p.arg(256)))
		case opRead:
			p.read(uint32(p.arg(fuzzFids)))
		case opWrite:
			p.write(uint32(p.arg(fuzzFids)), fuzzPayloads[p.arg(len(fuzzPayloads))])
		case opWstat:
			p.wstat(uint32(p.arg(fuzzFids)))
		case opClunk:
			fid := uint32(p.arg(fuzzFids))
			p.rpc(&plan9.Fcall{Type: plan9.Tclunk, Fid: fid})
			delete(p.fids, fid)
		}
	}
}

func (p *principalProgram) rpc(f *plan9.Fcall) *plan9.Fcall {
	p.tag = (p.tag + 1) % 1000
	f.Tag = p.tag
	return p.r.rpc(f)
}

// state is everything a write could change in the world.
func (p *principalProgram) state() string {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("counter %d writes %q notes %q plans %q", w.counter, w.writes, w.notes, w.plans)
}

// unchangedByNone runs op and fails if it was done as none and the
// world changed.
func (p *principalProgram) unchangedByNone(who oracle, op func()) {
	if who.user != ns.None {
		op()
		return
	}
	before := p.state()
	op()
	if after := p.state(); after != before {
		p.t.Fatalf("none changed the world:\nbefore %s\nafter  %s", before, after)
	}
}

func (p *principalProgram) attach(fid uint32, user string, capa int) {
	aname := ""
	switch capa {
	case capOwn:
		aname = key(user)
	case capOther:
		aname = key(user + "x")
	case capJunk:
		aname = "key-"
	}
	f := p.rpc(&plan9.Fcall{Type: plan9.Tattach, Fid: fid, Afid: plan9.NOFID, Uname: user, Aname: aname})
	if f.Type != plan9.Rattach {
		return
	}
	want := oracleFor(p.kind, user, aname)
	p.fids[fid] = &fuzzFid{who: want}
	// The server's idea of who this is, as handlers see it.
	const probe = fuzzFids + 1
	if f := p.rpc(&plan9.Fcall{Type: plan9.Twalk, Fid: fid, Newfid: probe, Wname: []string{"whoami"}}); f.Type != plan9.Rwalk {
		p.t.Fatalf("%s attached as %q with aname %q: walk to whoami: %v", p.kind, user, aname, f)
	}
	defer p.rpc(&plan9.Fcall{Type: plan9.Tclunk, Fid: probe})
	if f := p.rpc(&plan9.Fcall{Type: plan9.Topen, Fid: probe, Mode: plan9.OREAD}); f.Type != plan9.Ropen {
		p.t.Fatalf("open whoami: %v", f)
	}
	got := p.rpc(&plan9.Fcall{Type: plan9.Tread, Fid: probe, Count: 100})
	if w := fmt.Sprintf("%s admin=%v\n", want.user, want.admin); string(got.Data) != w {
		p.t.Fatalf("%s peer attached as %q with aname %q is %q, want %q", p.kind, user, aname, got.Data, w)
	}
}

func (p *principalProgram) walk(fid, newfid uint32, path string) {
	from := p.fids[fid]
	var names []string
	if path != "" {
		names = strings.Split(path, "/")
	}
	f := p.rpc(&plan9.Fcall{Type: plan9.Twalk, Fid: fid, Newfid: newfid, Wname: names})
	if from == nil || f.Type != plan9.Rwalk || len(f.Wqid) < len(names) {
		return
	}
	// Every directory passed through must let the principal search it.
	full := append(append([]string(nil), from.path...), names...)
	for i := range names {
		dir := canonical(full[:len(from.path)+i])
		if n, ok := fuzzNodes[dir]; ok && !from.who.may(n.owner, n.group, n.mode, plan9.AEXEC) {
			p.t.Fatalf("%s walked %q from /%s through /%s, whose mode %#o (%s:%s) denies it search",
				from.who.user, path, strings.Join(from.path, "/"), dir, n.mode, n.owner, n.group)
		}
	}
	p.fids[newfid] = &fuzzFid{who: from.who, path: full}
}

func (p *principalProgram) open(fid uint32, mode uint8) {
	st := p.fids[fid]
	var f *plan9.Fcall
	run := func() { f = p.rpc(&plan9.Fcall{Type: plan9.Topen, Fid: fid, Mode: mode}) }
	if st == nil {
		run()
		return
	}
	p.unchangedByNone(st.who, run)
	if f.Type != plan9.Ropen {
		return
	}
	want := 0
	switch mode & 3 {
	case plan9.OREAD:
		want = plan9.AREAD
	case plan9.OWRITE:
		want = plan9.AWRITE
	case plan9.ORDWR:
		want = plan9.AREAD | plan9.AWRITE
	case plan9.OEXEC:
		want = plan9.AEXEC
	}
	if mode&plan9.OTRUNC != 0 {
		want |= plan9.AWRITE
	}
	name := canonical(st.path)
	if n, ok := fuzzNodes[name]; ok && !st.who.may(n.owner, n.group, n.mode, want) {
		p.t.Fatalf("%s opened /%s with mode %#x, which its mode %#o (%s:%s) denies", st.who.user, name, mode, n.mode, n.owner, n.group)
	}
	st.open = true
	st.reads = want&(plan9.AREAD|plan9.AEXEC) != 0
	st.writes = want&plan9.AWRITE != 0
}

// blocking are the files whose reads wait for something this program
// never does; FuzzServe covers them.
var blocking = map[string]bool{"log": true, "trim": true, "wait": true, "event": true}

func (p *principalProgram) read(fid uint32) {
	st := p.fids[fid]
	if st == nil || !st.open || !st.reads || blocking[canonical(st.path)] {
		return
	}
	p.unchangedByNone(st.who, func() { p.rpc(&plan9.Fcall{Type: plan9.Tread, Fid: fid, Count: 512}) })
}

func (p *principalProgram) write(fid uint32, data string) {
	st := p.fids[fid]
	if st == nil {
		p.rpc(&plan9.Fcall{Type: plan9.Twrite, Fid: fid, Data: []byte(data)})
		return
	}
	var f *plan9.Fcall
	p.unchangedByNone(st.who, func() { f = p.rpc(&plan9.Fcall{Type: plan9.Twrite, Fid: fid, Data: []byte(data)}) })
	if f.Type == plan9.Rwrite && !st.writes {
		p.t.Fatalf("%s wrote /%s on a fid not opened for writing", st.who.user, canonical(st.path))
	}
}

func (p *principalProgram) wstat(fid uint32) {
	st := p.fids[fid]
	d := &plan9.Dir{Type: ^uint16(0), Dev: ^uint32(0), Mode: ^plan9.Perm(0), Atime: ^uint32(0), Mtime: ^uint32(0), Length: 0,
		Qid: plan9.Qid{Path: ^uint64(0), Vers: ^uint32(0), Type: ^uint8(0)}}
	stat, err := d.Bytes()
	if err != nil {
		p.t.Fatal(err)
	}
	f := p.rpc(&plan9.Fcall{Type: plan9.Twstat, Fid: fid, Stat: stat})
	if st == nil || f.Type != plan9.Rwstat {
		return
	}
	name := canonical(st.path)
	if n, ok := fuzzNodes[name]; ok && !st.who.may(n.owner, n.group, n.mode, plan9.AWRITE) {
		p.t.Fatalf("%s truncated /%s, which its mode %#o (%s:%s) denies it", st.who.user, name, n.mode, n.owner, n.group)
	}
}
