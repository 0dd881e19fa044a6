package ns

// The request loop: ns reads, checks and answers 9P itself, on the
// plan9 package's message codec, rather than through srv9p. srv9p runs
// every request in a goroutine of its own and gives every Tread a fresh
// buffer of the count asked for (msize, 128 KiB from the 9fans client,
// for a 13-byte file), and the garbage made the daemon collect every ~16 small
// operations: the tail of a small operation was three times the earlier
// ollie server's (issue 18, docs/benchmarks.md). Here a request that
// cannot block is answered on the connection's goroutine, a Tread is
// answered with the bytes the file has (a slice of its snapshot or of the
// stream, written as header plus data), and only a request whose handler
// may block gets a goroutine and a context of its own, which a Tflush
// cancels. The checks and error texts are srv9p's (proto.go), so that
// clients and transcripts see the same protocol; the fids are fid.go's.

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"9fans.net/go/plan9"
)

// A request is one whose handler may block: it runs in a goroutine of its
// own, under a context a Tflush cancels, and its tag stays in the table
// until its reply is written.
type request struct {
	t      *plan9.Fcall
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	responded bool
	flushes   []*request // Tflushes to answer after this request
}

// serve reads requests until the connection ends, then lets go of every
// fid; requests still running clunk theirs when they finish.
func (c *conn) serve() {
	c.fidTab = map[uint32]*fid{}
	c.reqs = map[uint16]*request{}
	c.loopDone = make(chan struct{})
	// Not on this goroutine: loop may leave it serving a request that
	// ends only once serve has returned and its caller cancels c.ctx.
	go c.loop()
	<-c.loopDone
}

// loop reads and answers requests. When one may block, the goroutine
// running loop serves it, and a new one reads on: the reply then goes
// out before anything is scheduled, where a goroutine started for the
// request would first have to be woken (on a second thread, as often as
// not), which cost a small operation a quarter of its time.
func (c *conn) loop() {
	for {
		frame, err := c.guard.next()
		if err != nil {
			break
		}
		t, err := plan9.UnmarshalFcall(frame)
		if err != nil {
			break
		}
		if r := c.handle(t); r != nil {
			go c.loop()
			c.serveRequest(r)
			return
		}
	}
	c.stopped.Store(true)
	c.fmu.Lock()
	fids := c.fidTab
	c.fidTab = nil
	c.fmu.Unlock()
	for _, f := range fids {
		c.putFid(f)
	}
	close(c.loopDone)
}

// handle answers t, or returns it as a request to serve apart if its
// handler may block.
func (c *conn) handle(t *plan9.Fcall) *request {
	if c.trace != nil {
		fmt.Fprintf(c.trace, "<-- %v\n", t)
	}
	c.rmu.Lock()
	_, dup := c.reqs[t.Tag]
	c.rmu.Unlock()
	if dup {
		// The tag stays the request's it names; this answer leaves it.
		c.send(nil, &plan9.Fcall{Type: plan9.Rerror, Tag: t.Tag, Ename: errDuplicateTag.Error()})
		return nil
	}
	switch {
	case t.Type == plan9.Tflush:
		c.flush(t)
	case c.mayBlock(t):
		r := &request{t: t}
		r.ctx, r.cancel = context.WithCancelCause(c.ctx)
		c.rmu.Lock()
		c.reqs[t.Tag] = r
		c.rmu.Unlock()
		return r
	default:
		c.send(nil, c.answer(c.ctx, t))
	}
	return nil
}

// serveRequest runs a request that may block.
func (c *conn) serveRequest(r *request) {
	reply := c.answer(r.ctx, r.t)
	r.cancel(nil)
	c.send(r, reply)
}

// flush answers a Tflush: at once if the request it names has been
// answered (or never was one), else after that request's reply, whose
// handler its cancelled context interrupts.
func (c *conn) flush(t *plan9.Fcall) {
	c.rmu.Lock()
	old := c.reqs[t.Oldtag]
	var r *request
	if old != nil {
		// The flush holds its tag until answered, like any request
		// answered later, and may itself be flushed.
		r = &request{t: t}
		c.reqs[t.Tag] = r
	}
	c.rmu.Unlock()
	rflush := &plan9.Fcall{Type: plan9.Rflush, Tag: t.Tag}
	if old == nil {
		c.send(nil, rflush)
		return
	}
	if old.cancel != nil {
		old.cancel(errFlushed)
	}
	old.mu.Lock()
	if !old.responded {
		old.flushes = append(old.flushes, r)
		old.mu.Unlock()
		return
	}
	old.mu.Unlock()
	c.send(r, rflush)
}

// mayBlock reports whether t's handler may block: a read that waits for
// data or a lock, a walk or stat that asks a dynamic directory, an open
// that runs a handler, any write, and a clunk that may close a source or
// runs OnClunk functions. Every request that calls a handler of the tree
// is among them, so each handler gets a context of its own that ends when
// it returns, as the tree's contract says; what is answered on the loop
// runs only this package's code under the connection's context.
func (c *conn) mayBlock(t *plan9.Fcall) bool {
	switch t.Type {
	case plan9.Twrite:
		return true
	case plan9.Twalk, plan9.Topen, plan9.Tread, plan9.Tstat, plan9.Tclunk:
	default:
		return false
	}
	f := c.lookupFid(t.Fid)
	if f == nil {
		return false
	}
	defer c.putFid(f)
	st := f.st.Load()
	if st == nil {
		return false
	}
	switch t.Type {
	case plan9.Twalk:
		return walkMayBlock(st.path, t.Wname)
	case plan9.Topen:
		return openMayBlock(st.tail().node, t.Mode)
	case plan9.Tread:
		return st.readMayBlock(int64(t.Offset))
	case plan9.Tstat:
		return len(st.path) > 1 && st.tail().node.Each != nil
	case plan9.Tclunk:
		if st.tail().node.Subscribe != nil {
			return true // closes its source
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.onClunk) > 0
	}
	return false
}

// walkMayBlock reports whether walking names from path asks a dynamic
// directory's Lookup.
func walkMayBlock(path []elem, names []string) bool {
	for _, name := range names {
		cur := path[len(path)-1]
		switch {
		case !cur.node.dir:
			return false
		case name == "..":
			if len(path) > 1 {
				path = path[:len(path)-1]
			}
		case name == "." || name == "":
			return false
		default:
			n := cur.node.staticChild(name)
			if n == nil {
				return cur.node.dynamicChild() != nil
			}
			path = append(path[:len(path):len(path)], child(cur, n))
		}
	}
	return false
}

// openMayBlock reports whether an open of n in mode runs a handler.
func openMayBlock(n *Node, mode uint8) bool {
	if n.dir {
		return n.dynamicChild() != nil
	}
	if mode&3 == plan9.OWRITE {
		return false
	}
	return n.Read != nil || n.Stream != nil || n.Subscribe != nil
}

// readMayBlock reports whether a read at off waits: for a stream's next
// bytes, a fid's lock or a handler.
func (st *fidState) readMayBlock(off int64) bool {
	if !st.opened.Load() {
		return false
	}
	n := st.tail().node
	switch {
	case n.dir, n.Read != nil:
		return false
	case st.stream != nil:
		return st.stream.WouldBlock(off)
	}
	return true
}

// answer carries out t and returns its reply.
func (c *conn) answer(ctx context.Context, t *plan9.Fcall) *plan9.Fcall {
	r := &plan9.Fcall{Type: t.Type + 1, Tag: t.Tag}
	var err error
	switch t.Type {
	default:
		err = errUnknownMessage
	case plan9.Tversion:
		c.version(t, r)
	case plan9.Tauth:
		err = c.tauth(t)
	case plan9.Tattach:
		r.Qid, err = c.tattach(ctx, t)
	case plan9.Twalk:
		r.Wqid, err = c.twalk(ctx, t)
	case plan9.Topen:
		r.Qid, r.Iounit, err = c.topen(ctx, t)
	case plan9.Tcreate:
		err = c.tcreate(t)
	case plan9.Tread:
		r.Data, err = c.tread(ctx, t)
	case plan9.Twrite:
		r.Count, err = c.twrite(ctx, t)
	case plan9.Tclunk:
		err = c.tclunk(t)
	case plan9.Tremove:
		err = c.tremove(t)
	case plan9.Tstat:
		r.Stat, err = c.tstat(ctx, t)
	case plan9.Twstat:
		err = c.twstat(ctx, t)
	}
	if err != nil {
		r.Type, r.Ename, r.Data = plan9.Rerror, err.Error(), nil
	}
	return r
}

// send writes reply, then answers the Tflushes waiting for it. r is the
// request it answers if that runs in a goroutine of its own: its tag
// leaves the table under wmu, so that a Tflush that no longer finds it
// is answered after this reply, as the protocol wants.
func (c *conn) send(r *request, reply *plan9.Fcall) {
	if c.trace != nil {
		fmt.Fprintf(c.trace, "--> %v\n", reply)
	}
	var hdr, data []byte
	if reply.Type == plan9.Rread {
		// Header, then the data from where it lies: no copy into a
		// message buffer. Small data travels in one buffer with it.
		const rreadHeader = 4 + 1 + 2 + 4
		data = reply.Data
		size := rreadHeader + len(data)
		if len(data) <= smallRead {
			hdr, data = make([]byte, rreadHeader, size), nil
		} else {
			hdr = make([]byte, rreadHeader)
		}
		binary.LittleEndian.PutUint32(hdr, uint32(size))
		hdr[4] = plan9.Rread
		binary.LittleEndian.PutUint16(hdr[5:], reply.Tag)
		binary.LittleEndian.PutUint32(hdr[7:], uint32(len(reply.Data)))
		if data == nil {
			hdr = append(hdr, reply.Data...)
		}
	} else {
		var err error
		if hdr, err = reply.Bytes(); err != nil {
			c.srv.Log.Error("ns: cannot encode reply", "reply", reply.String(), "err", err)
			hdr = nil
		}
	}
	c.wmu.Lock()
	if r != nil {
		c.rmu.Lock()
		delete(c.reqs, r.t.Tag)
		c.rmu.Unlock()
	}
	msize := c.guard.msizeNow()
	switch {
	case c.stopped.Load() || hdr == nil:
		c.guard.forget(reply.Tag)
	case len(hdr)+len(data) > int(msize):
		c.srv.Log.Error("ns: reply exceeds msize, dropped", "reply", reply.String(), "msize", msize)
		c.guard.forget(reply.Tag)
	default:
		c.guard.write(reply.Tag, hdr, data)
	}
	c.wmu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	r.responded = true
	flushes := r.flushes
	r.flushes = nil
	r.mu.Unlock()
	for _, f := range flushes {
		c.send(f, &plan9.Fcall{Type: plan9.Rflush, Tag: f.t.Tag})
	}
}

// smallRead is the most data an Rread copies in beside its header rather
// than writing from where it lies.
const smallRead = 4 << 10
