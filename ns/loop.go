package ns

// The request loop: ns reads, checks and answers 9P itself, on the
// plan9 package's message codec, rather than through srv9p. srv9p runs
// every request in a goroutine of its own and gives every Tread a fresh
// buffer of the count asked for (msize, about 256 KiB, for a 13-byte
// file), and the garbage made the daemon collect every ~16 small
// operations: the tail of a small operation was three times the earlier
// ollie server's (issue 18, docs/benchmarks.md). Here a request that
// cannot block is answered on the connection's goroutine, a Tread is
// answered with the bytes the file has (a slice of its snapshot or of the
// stream, written as header plus data), and only a request whose handler
// may block gets a goroutine and a context of its own, which a Tflush
// cancels. The checks and error texts are srv9p's, so that clients and
// transcripts see the same protocol.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"9fans.net/go/plan9"
)

// srv9p's answers, word for word.
var (
	errUnknownFid     = errors.New("unknown fid")
	errDuplicateFid   = errors.New("duplicate fid")
	errDuplicateTag   = errors.New("duplicate tag")
	errDuplicateOpen  = errors.New("duplicate open")
	errUnknownMessage = errors.New("unknown message")
	errCloneOpenFid   = errors.New("clone of open fid")
	errWalkNonDir     = errors.New("walk in non-directory")
	errNotFound       = errors.New("file not found")
	errIsDir          = errors.New("is a directory")
	errCreateNonDir   = errors.New("create in non-directory")
	errNoCreate       = errors.New("create prohibited")
	errNoRemove       = errors.New("remove prohibited")
	errBadCount       = errors.New("bad count")
	errBadOffset      = errors.New("bad offset")
	errNotOpenRead    = errors.New("not open for read")
	errNotOpenWrite   = errors.New("not open for write")
	errWstatType      = errors.New("wstat cannot change type")
	errWstatDev       = errors.New("wstat cannot change dev")
	errWstatQid       = errors.New("wstat cannot change qid")
	errWstatMuid      = errors.New("wstat cannot change muid")
	errWstatDMDIR     = errors.New("wstat cannot change DMDIR bit")
	errFlushed        = errors.New("flushed")
	errNoAuth         = errors.New(filepath.Base(os.Args[0]) + ": authentication not required")
)

// A fid is one fid of a connection: the protocol's part (open mode, qid,
// references) and ns's (st). The connection's table holds one reference
// and each request using the fid another; the last to let go clunks it,
// so a Tclunk never pulls state from under a request still running.
type fid struct {
	ref       atomic.Int32
	omode     atomic.Int32 // -1 until opened
	iounit    atomic.Uint32
	st        atomic.Pointer[fidState] // set by attach and by a whole walk
	dirOffset atomic.Int64             // where the next directory read must start (0 also)
	dirIndex  atomic.Int64             // the entry the next directory read starts at

	qmu sync.Mutex
	qid plan9.Qid
}

func (f *fid) Qid() plan9.Qid {
	f.qmu.Lock()
	defer f.qmu.Unlock()
	return f.qid
}

func (f *fid) setQid(q plan9.Qid) {
	f.qmu.Lock()
	f.qid = q
	f.qmu.Unlock()
}

// newFid enters fid num in the table and returns it with a reference for
// the caller.
func (c *conn) newFid(num uint32) (*fid, error) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if c.fidTab == nil {
		return nil, errUnknownFid // the connection has ended
	}
	if _, ok := c.fidTab[num]; ok {
		return nil, errDuplicateFid
	}
	f := &fid{}
	f.omode.Store(-1)
	f.ref.Store(2)
	c.fidTab[num] = f
	return f, nil
}

// lookupFid returns fid num with a reference for the caller, or nil.
func (c *conn) lookupFid(num uint32) *fid {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	f := c.fidTab[num]
	if f != nil {
		f.ref.Add(1)
	}
	return f
}

// deleteFid takes fid num out of the table; the table's reference passes
// to the caller.
func (c *conn) deleteFid(num uint32) *fid {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	f := c.fidTab[num]
	delete(c.fidTab, num)
	return f
}

// putFid lets go of a reference; the last clunks the fid.
func (c *conn) putFid(f *fid) {
	if f != nil && f.ref.Add(-1) == 0 {
		c.clunk(f)
	}
}

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

func (c *conn) version(t, r *plan9.Fcall) {
	r.Version = "unknown"
	if strings.HasPrefix(t.Version, "9P") {
		r.Version = "9P2000"
	}
	// The guard has already lowered msize to what the client asked for.
	r.Msize = min(t.Msize, c.guard.msizeNow())
}

func (c *conn) tauth(t *plan9.Fcall) error {
	f, err := c.newFid(t.Afid)
	if err != nil {
		return err
	}
	c.putFid(f)
	c.putFid(c.deleteFid(t.Afid))
	return errNoAuth
}

func (c *conn) tattach(ctx context.Context, t *plan9.Fcall) (plan9.Qid, error) {
	if t.Afid != plan9.NOFID {
		return plan9.Qid{}, errUnknownFid // the guard answers these first
	}
	f, err := c.newFid(t.Fid)
	if err != nil {
		return plan9.Qid{}, err
	}
	defer c.putFid(f)
	f.setQid(plan9.Qid{Type: plan9.QTDIR})
	qid, err := c.attach(ctx, f, t.Uname, t.Aname)
	if err != nil {
		c.putFid(c.deleteFid(t.Fid))
		return plan9.Qid{}, err
	}
	f.setQid(qid)
	return qid, nil
}

func (c *conn) twalk(ctx context.Context, t *plan9.Fcall) ([]plan9.Qid, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return nil, errUnknownFid
	}
	defer c.putFid(f)
	if f.omode.Load() != -1 {
		return nil, errCloneOpenFid
	}
	if len(t.Wname) > 0 && f.Qid().Type&plan9.QTDIR == 0 {
		return nil, errWalkNonDir
	}
	newf := f
	if t.Newfid != t.Fid {
		var err error
		if newf, err = c.newFid(t.Newfid); err != nil {
			return nil, err
		}
	} else {
		newf.ref.Add(1)
	}
	defer c.putFid(newf)
	qids, err := c.walk(ctx, f, newf, t.Wname)
	if err != nil || len(qids) < len(t.Wname) {
		if t.Newfid != t.Fid {
			c.putFid(c.deleteFid(t.Newfid))
		}
		if len(qids) == 0 {
			if err == nil && len(t.Wname) > 0 {
				err = errNotFound
			}
			return nil, err
		}
		return qids, nil // no error on partial walks
	}
	qid := f.Qid()
	if len(qids) > 0 {
		qid = qids[len(qids)-1]
	}
	newf.setQid(qid)
	return qids, nil
}

func (c *conn) topen(ctx context.Context, t *plan9.Fcall) (plan9.Qid, uint32, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return plan9.Qid{}, 0, errUnknownFid
	}
	defer c.putFid(f)
	if f.omode.Load() != -1 {
		return plan9.Qid{}, 0, errDuplicateOpen
	}
	qid := f.Qid()
	if qid.Type&plan9.QTDIR != 0 && t.Mode&^plan9.ORCLOSE != plan9.OREAD {
		return plan9.Qid{}, 0, errIsDir
	}
	if err := c.open(ctx, f, t.Mode); err != nil {
		return plan9.Qid{}, 0, err
	}
	f.omode.Store(int32(t.Mode))
	return f.Qid(), f.iounit.Load(), nil
}

func (c *conn) tcreate(t *plan9.Fcall) error {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	defer c.putFid(f)
	switch {
	case f.omode.Load() != -1:
		return errDuplicateOpen
	case f.Qid().Type&plan9.QTDIR == 0:
		return errCreateNonDir
	}
	return errNoCreate
}

func (c *conn) tread(ctx context.Context, t *plan9.Fcall) ([]byte, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return nil, errUnknownFid
	}
	defer c.putFid(f)
	if int32(t.Count) < 0 {
		return nil, errBadCount
	}
	isDir := f.Qid().Type&plan9.QTDIR != 0
	if int64(t.Offset) < 0 || (isDir && t.Offset != 0 && int64(t.Offset) != f.dirOffset.Load()) {
		return nil, errBadOffset
	}
	count := min(t.Count, c.guard.msizeNow()-plan9.IOHDRSZ)
	if o := f.omode.Load() & 3; o != plan9.OREAD && o != plan9.ORDWR && o != plan9.OEXEC {
		return nil, errNotOpenRead
	}
	data, err := c.read(ctx, f, int(count), int64(t.Offset))
	if err != nil {
		return nil, err
	}
	if isDir {
		f.dirOffset.Store(int64(t.Offset) + int64(len(data)))
	}
	return data, nil
}

func (c *conn) twrite(ctx context.Context, t *plan9.Fcall) (uint32, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return 0, errUnknownFid
	}
	defer c.putFid(f)
	if int64(t.Offset) < 0 {
		return 0, errBadOffset
	}
	if o := f.omode.Load() & 3; o != plan9.OWRITE && o != plan9.ORDWR {
		return 0, errNotOpenWrite
	}
	n, err := c.write(ctx, f, t.Data)
	return uint32(n), err
}

func (c *conn) tclunk(t *plan9.Fcall) error {
	f := c.deleteFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	c.putFid(f)
	return nil
}

func (c *conn) tremove(t *plan9.Fcall) error {
	f := c.deleteFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	c.putFid(f)
	return errNoRemove
}

func (c *conn) tstat(ctx context.Context, t *plan9.Fcall) ([]byte, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return nil, errUnknownFid
	}
	defer c.putFid(f)
	d, err := c.stat(ctx, f)
	if err != nil {
		return nil, err
	}
	return d.Bytes()
}

func (c *conn) twstat(ctx context.Context, t *plan9.Fcall) error {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	defer c.putFid(f)
	d, err := plan9.UnmarshalDir(t.Stat)
	if err != nil {
		return err
	}
	if d.IsNull() {
		return nil // a sync: nothing here is kept on disk
	}
	switch {
	case ^d.Type != 0:
		return errWstatType
	case ^d.Dev != 0:
		return errWstatDev
	case ^d.Qid.Type != 0 || ^d.Qid.Vers != 0 || ^d.Qid.Path != 0:
		return errWstatQid
	case d.Muid != "":
		return errWstatMuid
	case ^d.Mode != 0 && (d.Mode&plan9.DMDIR != 0) != (f.Qid().Type&plan9.QTDIR != 0):
		return errWstatDMDIR
	}
	return c.wstat(ctx, f, d)
}

// readDir returns the directory entries from the fid's read position on
// (the start at offset 0) that fit in count bytes.
func readDir(f *fid, count int, offset int64, dirs []plan9.Dir) ([]byte, error) {
	start := 0
	if offset > 0 {
		start = int(f.dirIndex.Load())
	}
	var out []byte
	for ; start < len(dirs); start++ {
		stat, err := dirs[start].Bytes()
		if err != nil {
			if len(out) == 0 {
				return nil, err
			}
			break
		}
		if len(out)+len(stat) > count {
			break
		}
		out = append(out, stat...)
	}
	f.dirIndex.Store(int64(start))
	return out, nil
}

// write sends one message as header plus data (data may be nil) and
// accounts for its request; the caller holds c.wmu.
func (g *guard) write(tag uint16, hdr, data []byte) (int, error) {
	g.wmu.Lock()
	g.mu.Lock()
	g.answered(tag)
	g.writing++
	g.mu.Unlock()
	var n int
	var err error
	switch g.conn.(type) {
	case *net.UnixConn, *net.TCPConn:
		if data != nil {
			// One writev: the socket takes both parts as one write.
			bufs := net.Buffers{hdr, data}
			var m int64
			m, err = bufs.WriteTo(g.conn)
			n = int(m)
			break
		}
		n, err = g.conn.Write(hdr)
	default:
		// Other transports (an SSH channel, a pipe) may take each Write
		// as a message: one Write per reply.
		if data != nil {
			hdr = append(hdr[:len(hdr):len(hdr)], data...)
		}
		n, err = g.conn.Write(hdr)
	}
	g.wmu.Unlock()
	g.mu.Lock()
	g.writing--
	g.idleCheck()
	g.mu.Unlock()
	return n, err
}

// forget accounts for a request whose reply is not written: the
// connection has ended, or the reply could not be sent.
func (g *guard) forget(tag uint16) {
	g.mu.Lock()
	g.answered(tag)
	g.idleCheck()
	g.mu.Unlock()
}
