package ns

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"9fans.net/go/plan9"
)

// guard sits between a connection and the request loop and enforces what
// the protocol leaves open: a minimum msize, a clear error for oversized
// messages, a cap on outstanding requests and a deadline for finishing a
// frame. Every request the loop reads comes from guard.next; every reply
// goes out through guard.write, one whole message per call.
type guard struct {
	rd        *bufio.Reader
	conn      io.ReadWriteCloser
	sock      *sockIO // conn's reads and writes if it is a socket, else nil
	maxMsize  uint32
	minMsize  uint32
	maxOut    int
	onRequest func() // called for each request let through (for tests and stats)

	// held counts the bytes of unanswered requests of every connection of
	// this peer kind, against maxHeld; sizes (under mu) holds this
	// connection's part by tag, and mine their sum.
	held    *atomic.Int64
	maxHeld int64
	kind    PeerKind
	sizes   map[uint16]int64
	mine    int64
	refused func(what limit, err error) // told of each refusal, to log it

	// deadline, if the transport has one, bounds the rest of a frame to
	// frameTimeout once its first byte has arrived.
	deadline     readDeadliner
	frameTimeout time.Duration
	armed        bool

	// mu guards the counters the reader consults; wmu serialises writes,
	// and is never held by the reader, so a reply stuck on a slow client
	// does not stop requests (a Tflush, say) from being read.
	mu          sync.Mutex
	idle        chan struct{} // closed when outstanding and writing reach 0, if someone waits
	wmu         sync.Mutex
	msize       uint32 // negotiated (maxMsize until Tversion)
	outstanding int    // requests admitted whose reply has not started
	writing     int    // replies being written
}

// readDeadliner is a transport whose reads can be given a deadline.
type readDeadliner interface {
	SetReadDeadline(time.Time) error
}

// A limit names a limit that refuses requests, so that each is logged
// once per connection.
type limit uint8

const (
	limitRequests limit = 1 << iota
	limitFids
	limitKindFids
	limitFrameTime
	limitHeld
)

// errFrameTimeout ends a connection that began a frame and did not
// finish it in time.
var errFrameTimeout = errors.New("ns: message not finished in time")

func newGuard(conn io.ReadWriteCloser, maxMsize, minMsize uint32, maxOut int) *guard {
	g := &guard{
		conn:     conn,
		sock:     newSockIO(conn),
		maxMsize: maxMsize,
		minMsize: minMsize,
		maxOut:   maxOut,
		msize:    maxMsize,
	}
	var rd io.Reader = conn
	if g.sock != nil {
		rd = g.sock
	}
	g.rd = bufio.NewReaderSize(rd, 64<<10)
	return g
}

// next reads frames until one is admitted, answering refused ones itself.
func (g *guard) next() ([]byte, error) {
	for {
		f, err := g.admit()
		if err != nil {
			if g.armed && errors.Is(err, os.ErrDeadlineExceeded) {
				g.refused(limitFrameTime, fmt.Errorf("%w: a message was not finished within %v", errFrameTimeout, g.frameTimeout))
				return nil, errFrameTimeout
			}
			return nil, err
		}
		g.disarm()
		if f != nil {
			return f, nil
		}
	}
}

// readFull reads len(p) bytes of the current frame. Once a frame has
// begun, a read that must wait for the client runs under the deadline.
func (g *guard) readFull(p []byte) error {
	if g.deadline != nil && !g.armed && g.rd.Buffered() < len(p) {
		g.deadline.SetReadDeadline(time.Now().Add(g.frameTimeout))
		g.armed = true
	}
	_, err := io.ReadFull(g.rd, p)
	return err
}

// disarm lifts the frame deadline: between frames a client may be idle
// as long as it likes (waiting on a blocked read, say).
func (g *guard) disarm() {
	if g.armed {
		g.deadline.SetReadDeadline(time.Time{})
		g.armed = false
	}
}

// admit reads one frame and returns it if it is let through, or nil
// after answering it with a refusal.
func (g *guard) admit() ([]byte, error) {
	// No deadline until the frame's first byte: an idle client is fine.
	if _, err := g.rd.Peek(1); err != nil {
		return nil, err
	}
	var hdr [7]byte
	if err := g.readFull(hdr[:4]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(hdr[:4])
	if size < 7 {
		return nil, plan9.ProtocolError(fmt.Sprintf("message of %d bytes is shorter than a header", size))
	}
	if err := g.readFull(hdr[4:7]); err != nil {
		return nil, err
	}
	typ, tag := hdr[4], binary.LittleEndian.Uint16(hdr[5:7])
	g.mu.Lock()
	msize := g.msize
	g.mu.Unlock()
	if size > msize {
		// The rest of the stream cannot be trusted to resynchronise
		// cheaply: answer, then end the connection.
		g.reply(tag, fmt.Sprintf("ns: message of %d bytes exceeds msize %d", size, msize))
		return nil, plan9.ProtocolError("message too long")
	}
	frame := make([]byte, size)
	copy(frame, hdr[:])
	if err := g.readFull(frame[7:]); err != nil {
		return nil, err
	}
	if typ == plan9.Tversion && size >= 11 {
		want := binary.LittleEndian.Uint32(frame[7:11])
		if want < g.minMsize {
			g.reply(tag, fmt.Sprintf("ns: msize %d is too small (minimum %d)", want, g.minMsize))
			return nil, nil
		}
		// msize only ever goes down (Rversion answers the smaller of
		// the two), so a later Tversion cannot raise it here.
		g.mu.Lock()
		g.msize = min(want, g.msize)
		g.mu.Unlock()
	}
	if typ == plan9.Tattach && size >= 15 && binary.LittleEndian.Uint32(frame[11:15]) != plan9.NOFID {
		// Nothing here authenticates through an auth fid (there is no
		// Tauth), so none is ever valid. (srv9p, which served ns before
		// its own loop, kept a reference to an afid whose names did not
		// match the attach's, so that fid was never clunked: a client
		// could leak its peer kind's fid budget one attach at a time;
		// FuzzServe found it.)
		g.reply(tag, "ns: authentication not required: attach with afid NOFID")
		return nil, nil
	}
	g.mu.Lock()
	most := g.maxOut
	if typ == plan9.Tflush {
		most *= 2 // a client must always be able to flush what it has sent
	}
	if g.outstanding >= most {
		g.mu.Unlock()
		err := &LimitError{What: "outstanding requests", Limit: g.maxOut}
		g.refused(limitRequests, err)
		g.reply(tag, err.Error())
		return nil, nil
	}
	if g.held != nil {
		if g.held.Add(int64(size)) > g.maxHeld && typ != plan9.Tflush {
			g.held.Add(-int64(size))
			g.mu.Unlock()
			err := &LimitError{What: "bytes of unanswered requests from " + g.kind.String() + " connections", Limit: int(g.maxHeld)}
			g.refused(limitHeld, err)
			g.reply(tag, err.Error())
			return nil, nil
		}
		if g.sizes == nil {
			g.sizes = map[uint16]int64{}
		}
		// A tag reused before its answer (a client's mistake) adds up, so
		// that nothing is released twice or never.
		g.sizes[tag] += int64(size)
		g.mine += int64(size)
	}
	g.outstanding++
	g.mu.Unlock()
	if g.onRequest != nil {
		g.onRequest()
	}
	return frame, nil
}

// reply answers a refused request with Rerror.
func (g *guard) reply(tag uint16, msg string) {
	f := &plan9.Fcall{Type: plan9.Rerror, Tag: tag, Ename: msg}
	b, err := f.Bytes()
	if err != nil {
		return
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.conn.Write(b)
}

// answered stops counting the request tagged tag against the limits. The
// request stops counting before its reply goes out: a client may send
// its next request the moment it reads this reply, and must find the
// place free. write calls it under wmu, so that once nothing counts,
// every reply that did is ahead of any later one on the wire. Shutdown
// still waits for the bytes, which count as being written until they
// are. g.mu is held.
func (g *guard) answered(tag uint16) {
	if g.outstanding > 0 {
		g.outstanding--
	}
	g.release(tag)
}

// idleCheck wakes waitAnswered once nothing is outstanding or being
// written; g.mu is held.
func (g *guard) idleCheck() {
	if g.outstanding == 0 && g.writing == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// release gives back what the request with tag held; g.mu is held.
func (g *guard) release(tag uint16) {
	if n, ok := g.sizes[tag]; ok {
		delete(g.sizes, tag)
		g.mine -= n
		g.held.Add(-n)
	}
}

// releaseAll gives back what the connection's unanswered requests held,
// once it has ended.
func (g *guard) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		g.held.Add(-g.mine)
	}
	g.sizes, g.mine = nil, 0
}

func (g *guard) Close() error { return g.conn.Close() }

// pending returns the number of requests admitted whose reply has not
// begun to be written: a client that has read every reply sees 0.
func (g *guard) pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.outstanding
}

// msizeNow returns the negotiated msize.
func (g *guard) msizeNow() uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.msize
}

// waitAnswered waits until every admitted request has been answered (its
// reply written), the connection has ended, or timeout passes.
func (g *guard) waitAnswered(timeout time.Duration, ended <-chan struct{}) {
	g.mu.Lock()
	if g.outstanding == 0 && g.writing == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	ch := g.idle
	g.mu.Unlock()
	select {
	case <-ch:
	case <-ended:
	case <-time.After(timeout):
	}
}

// write sends one message as header plus data (data may be nil) and
// accounts for its request; the caller holds c.wmu.
func (g *guard) write(tag uint16, hdr, data []byte) (int, error) {
	g.wmu.Lock()
	g.mu.Lock()
	g.answered(tag)
	g.writing++
	msize := g.msize
	g.mu.Unlock()
	var n int
	var err error
	switch {
	case g.sock != nil:
		// One writev: the socket takes both parts as one write.
		n, err = g.sock.writev(hdr, data)
	default:
		// Other transports (an SSH channel, a pipe) may take each Write
		// as a message: one Write per reply.
		if data == nil {
			n, err = g.conn.Write(hdr)
			break
		}
		// Built in a pooled buffer: a fresh one per reply would be an
		// msize allocation for every large Rread. A Write does not
		// keep what it is given, so the buffer is free once it returns.
		bp := getReplyBuf(len(hdr)+len(data), msize)
		b := append(append((*bp)[:0], hdr...), data...)
		n, err = g.conn.Write(b)
		putReplyBuf(bp, b)
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

// replyBufs holds the buffers of replies written in one Write. sync.Pool
// lets go of what has not been used since the last collection or two, so
// an idle server keeps none; while busy it keeps about one per
// connection writing at once.
var replyBufs sync.Pool

// maxPooledReply is the largest buffer kept for reuse: an Rread of
// DefaultMaxMsize. A server allowed larger messages allocates those.
const maxPooledReply = DefaultMaxMsize

// getReplyBuf returns a buffer with room for n bytes, sized for any
// reply on a connection of msize.
func getReplyBuf(n int, msize uint32) *[]byte {
	if bp, _ := replyBufs.Get().(*[]byte); bp != nil && cap(*bp) >= n {
		return bp
	}
	// One too small (from a connection of a smaller msize) is let go,
	// so the pool settles on the largest in use.
	b := make([]byte, 0, max(n, int(min(msize, maxPooledReply))))
	return &b
}

// putReplyBuf gives back bp, now holding b (which append may have grown).
func putReplyBuf(bp *[]byte, b []byte) {
	if cap(b) > maxPooledReply {
		return
	}
	*bp = b[:0]
	replyBufs.Put(bp)
}
