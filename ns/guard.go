package ns

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"9fans.net/go/plan9"
)

// guard sits between a connection and srv9p and enforces what srv9p does
// not: a minimum msize, a clear error for oversized messages, and a cap on
// outstanding requests. Every frame srv9p reads passes through guard.Read;
// every reply passes through guard.Write, one whole message per call.
type guard struct {
	rd        *bufio.Reader
	conn      io.ReadWriteCloser
	maxMsize  uint32
	minMsize  uint32
	maxOut    int
	onRequest func() // called for each request let through (for tests and stats)

	frame []byte // the current frame, being handed to srv9p

	// mu guards the counters the reader consults; wmu serialises writes,
	// and is never held by the reader, so a reply stuck on a slow client
	// does not stop requests (a Tflush, say) from being read.
	mu          sync.Mutex
	idle        chan struct{} // closed when outstanding reaches 0, if someone waits
	wmu         sync.Mutex
	msize       uint32 // negotiated (maxMsize until Tversion)
	outstanding int
}

func newGuard(conn io.ReadWriteCloser, maxMsize, minMsize uint32, maxOut int) *guard {
	return &guard{
		rd:       bufio.NewReaderSize(conn, 64<<10),
		conn:     conn,
		maxMsize: maxMsize,
		minMsize: minMsize,
		maxOut:   maxOut,
		msize:    maxMsize,
	}
}

// Read hands srv9p the bytes of admitted frames.
func (g *guard) Read(p []byte) (int, error) {
	for len(g.frame) == 0 {
		f, err := g.next()
		if err != nil {
			return 0, err
		}
		g.frame = f
	}
	n := copy(p, g.frame)
	g.frame = g.frame[n:]
	return n, nil
}

// next reads frames until one is admitted, answering refused ones itself.
func (g *guard) next() ([]byte, error) {
	for {
		var hdr [7]byte
		if _, err := io.ReadFull(g.rd, hdr[:4]); err != nil {
			return nil, err
		}
		size := binary.LittleEndian.Uint32(hdr[:4])
		if size < 7 {
			return nil, plan9.ProtocolError(fmt.Sprintf("message of %d bytes is shorter than a header", size))
		}
		if _, err := io.ReadFull(g.rd, hdr[4:7]); err != nil {
			return nil, err
		}
		typ, tag := hdr[4], binary.LittleEndian.Uint16(hdr[5:7])
		g.mu.Lock()
		msize := g.msize
		g.mu.Unlock()
		if size > msize {
			// The rest of the stream cannot be trusted to resynchronise
			// cheaply: answer, then end the connection.
			g.reply(tag, fmt.Sprintf("message of %d bytes exceeds msize %d", size, msize))
			return nil, plan9.ProtocolError("message too long")
		}
		frame := make([]byte, size)
		copy(frame, hdr[:])
		if _, err := io.ReadFull(g.rd, frame[7:]); err != nil {
			return nil, err
		}
		if typ == plan9.Tversion && size >= 11 {
			want := binary.LittleEndian.Uint32(frame[7:11])
			if want < g.minMsize {
				g.reply(tag, fmt.Sprintf("msize %d is too small (minimum %d)", want, g.minMsize))
				continue
			}
			// srv9p only ever lowers msize (its Rversion answers the
			// smaller of the two), so a later Tversion cannot raise it here.
			g.mu.Lock()
			g.msize = min(want, g.msize)
			g.mu.Unlock()
		}
		g.mu.Lock()
		limit := g.maxOut
		if typ == plan9.Tflush {
			limit *= 2 // a client must always be able to flush what it has sent
		}
		if g.outstanding >= limit {
			g.mu.Unlock()
			g.reply(tag, fmt.Sprintf("too many outstanding requests (limit %d)", g.maxOut))
			continue
		}
		g.outstanding++
		g.mu.Unlock()
		if g.onRequest != nil {
			g.onRequest()
		}
		return frame, nil
	}
}

// reply answers a refused request with Rerror.
func (g *guard) reply(tag uint16, msg string) {
	f := &plan9.Fcall{Type: plan9.Rerror, Tag: tag, Ename: "ns: " + msg}
	b, err := f.Bytes()
	if err != nil {
		return
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.conn.Write(b)
}

// Write sends one reply from srv9p.
func (g *guard) Write(p []byte) (int, error) {
	g.wmu.Lock()
	n, err := g.conn.Write(p)
	g.wmu.Unlock()
	g.mu.Lock()
	if g.outstanding > 0 {
		g.outstanding--
	}
	if g.outstanding == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
	return n, err
}

func (g *guard) Close() error { return g.conn.Close() }

// pending returns the number of requests admitted and not yet answered.
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
	if g.outstanding == 0 {
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
