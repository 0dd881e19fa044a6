package client

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"
)

// wire sits between the 9fans client and the connection and adds what that
// client lacks: Tflush, and answers for every request when the connection
// fails. The 9fans client writes exactly one whole message per Write call
// (plan9.WriteFcall) and allocates tags from 1 upward, so wire sees every
// request it sends and can inject flushes of its own under tags taken from
// the top of the tag space.
//
// On the read side, wire hands the client only replies it knows: the
// replies to injected flushes are swallowed (the 9fans muxer would block
// forever on a tag it did not allocate), and the reply to a flushed
// request is held until its Rflush arrives, so that the client cannot
// reuse the tag while the server may still act on the flush.
//
// The 9fans client has one waiting caller at a time read for all of them.
// When that read fails only that caller returns, and when a write fails
// the caller's tag stays behind and may be handed the job of reading: in
// both cases the other callers would wait forever. So wire never fails a
// write it has accepted: a failed write closes the connection, and once
// reading fails wire answers every request still outstanding with errLost
// before it returns the error.
type wire struct {
	rwc io.ReadWriteCloser

	wmu sync.Mutex // serialises whole frames onto rwc

	mu       sync.Mutex
	msize    uint32            // asked for in Tversion, then as negotiated: no reply is longer
	out      map[uint16]uint8  // the client's requests awaiting a reply: tag → type
	flushes  map[uint16]uint16 // injected Tflush tags awaiting a reply → the tag flushed
	flushed  map[uint16]bool   // tags of requests with a Tflush in flight
	held     map[uint16][]byte // replies to flushed requests, held until their Rflush
	sticky   int               // while > 0, each interruptible request is flushed as it is sent
	next     uint16            // where the search for a free flush tag starts
	err      error             // why the connection failed, once it has
	readDone bool              // Read has returned err: nothing more will be read

	rmu   sync.Mutex // the read side: the client reads from one goroutine at a time, not always the same
	rd    *bufio.Reader
	frame []byte   // the rest of the reply being handed to the client
	ready [][]byte // replies released for the client, in order
}

// errLost answers, on the client's behalf, the requests outstanding when
// the connection fails.
const errLost = p9.Error("ns/client: connection lost")

func newWire(rwc io.ReadWriteCloser) *wire {
	return &wire{
		rwc:     rwc,
		rd:      bufio.NewReaderSize(rwc, 64<<10),
		msize:   8192 + plan9.IOHDRSZ,
		out:     map[uint16]uint8{},
		flushes: map[uint16]uint16{},
		flushed: map[uint16]bool{},
		held:    map[uint16][]byte{},
		next:    plan9.NOTAG - 1,
	}
}

// interruptible reports whether a request of type typ may block in a
// handler, and so is worth flushing.
func interruptible(typ uint8) bool {
	switch typ {
	case plan9.Twalk, plan9.Topen, plan9.Tread, plan9.Twrite, plan9.Tstat:
		return true
	}
	return false
}

// Write sends one request from the client.
func (w *wire) Write(p []byte) (int, error) {
	if len(p) < 7 || binary.LittleEndian.Uint32(p) != uint32(len(p)) {
		// Tracking depends on seeing whole messages; fail loudly rather
		// than lose track of tags.
		return 0, plan9.ProtocolError("ns/client: write of a partial 9P message")
	}
	typ, tag := p[4], binary.LittleEndian.Uint16(p[5:7])
	w.wmu.Lock()
	defer w.wmu.Unlock()
	var flush []byte
	w.mu.Lock()
	if w.readDone {
		// Nothing will read the reply, and no caller waits for another:
		// failing is safe now.
		err := w.err
		w.mu.Unlock()
		return 0, err
	}
	if typ == plan9.Tversion && len(p) >= 11 {
		w.msize = binary.LittleEndian.Uint32(p[7:11])
	}
	if tag != plan9.NOTAG {
		if _, ours := w.flushes[tag]; ours {
			w.mu.Unlock()
			return 0, plan9.ProtocolError(fmt.Sprintf("ns/client: tag %d is in use by a flush", tag))
		}
		w.out[tag] = typ
		if w.sticky > 0 && interruptible(typ) {
			flush = w.flushLocked(tag)
		}
	}
	w.mu.Unlock()
	w.send(p)
	if flush != nil {
		w.send(flush)
	}
	return len(p), nil
}

// send writes one frame. A failure ends the connection, so that reading
// fails too and answers the requests outstanding.
func (w *wire) send(f []byte) {
	if _, err := w.rwc.Write(f); err != nil {
		w.fail(err)
		w.rwc.Close()
	}
}

// interrupt flushes every interruptible request awaiting a reply, and
// adds stick to the count of interrupters that want new requests flushed
// as they are sent.
func (w *wire) interrupt(stick int) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	w.sticky += stick
	var frames [][]byte
	if stick >= 0 && w.err == nil {
		for tag, typ := range w.out {
			if interruptible(typ) && !w.flushed[tag] {
				if f := w.flushLocked(tag); f != nil {
					frames = append(frames, f)
				}
			}
		}
	}
	w.mu.Unlock()
	for _, f := range frames {
		w.send(f)
	}
}

// flushLocked records a flush of the request tagged old and returns the
// Tflush to send, or nil if no tag is free.
func (w *wire) flushLocked(old uint16) []byte {
	tag := w.next
	for {
		_, busy := w.flushes[tag]
		_, used := w.out[tag]
		if !busy && !used {
			break
		}
		tag--
		if tag == 0 {
			tag = plan9.NOTAG - 1
		}
		if tag == w.next {
			return nil
		}
	}
	w.next = tag - 1
	if w.next == 0 {
		w.next = plan9.NOTAG - 1
	}
	f, err := (&plan9.Fcall{Type: plan9.Tflush, Tag: tag, Oldtag: old}).Bytes()
	if err != nil {
		return nil
	}
	w.flushes[tag] = old
	w.flushed[old] = true
	return f
}

// Read hands the client the bytes of the replies meant for it.
func (w *wire) Read(p []byte) (int, error) {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for len(w.frame) == 0 {
		if len(w.ready) > 0 {
			w.frame, w.ready = w.ready[0], w.ready[1:]
			continue
		}
		if w.failed() == nil {
			f, err := w.readFrame()
			if err == nil {
				w.ready = append(w.ready, w.admit(f)...)
				continue
			}
			w.fail(err)
		}
		var err error
		if w.ready, err = w.orphans(); err != nil {
			return 0, err
		}
	}
	n := copy(p, w.frame)
	w.frame = w.frame[n:]
	return n, nil
}

func (w *wire) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// failed returns why the connection failed, or nil.
func (w *wire) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// orphans returns, once the connection has failed, an answer for every
// request still waiting: the replies held for flushes, and errLost for the
// rest. When none is waiting it returns the failure instead, and from
// then on Write refuses requests.
func (w *wire) orphans() ([][]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var rs [][]byte
	for _, r := range w.held {
		rs = append(rs, r)
	}
	for tag := range w.out {
		r, _ := (&plan9.Fcall{Type: plan9.Rerror, Tag: tag, Ename: string(errLost)}).Bytes()
		rs = append(rs, r)
	}
	clear(w.out)
	clear(w.held)
	clear(w.flushes)
	clear(w.flushed)
	if len(rs) == 0 {
		w.readDone = true
		return nil, w.err
	}
	return rs, nil
}

func (w *wire) readFrame() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(w.rd, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	w.mu.Lock()
	msize := w.msize
	w.mu.Unlock()
	if size < 7 || size > msize {
		return nil, plan9.ProtocolError(fmt.Sprintf("ns/client: reply of %d bytes (msize %d)", size, msize))
	}
	f := make([]byte, size)
	copy(f, hdr[:])
	if _, err := io.ReadFull(w.rd, f[4:]); err != nil {
		return nil, err
	}
	return f, nil
}

// admit takes one reply off the wire and returns the replies to release
// to the client now.
func (w *wire) admit(f []byte) [][]byte {
	typ, tag := f[4], binary.LittleEndian.Uint16(f[5:7])
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ours := w.flushes[tag]; ours {
		delete(w.flushes, tag)
		delete(w.flushed, old)
		if r, ok := w.held[old]; ok {
			delete(w.held, old)
			return [][]byte{r}
		}
		if _, pending := w.out[old]; pending && typ == plan9.Rflush {
			// The server dropped the request without answering, as the
			// protocol allows: answer it here so that the caller returns.
			delete(w.out, old)
			r, err := (&plan9.Fcall{Type: plan9.Rerror, Tag: old, Ename: string(ErrInterrupted)}).Bytes()
			if err == nil {
				return [][]byte{r}
			}
		}
		// An Rerror to the flush leaves the request running: its reply
		// goes to the client when it comes.
		return nil
	}
	if typ == plan9.Rversion && len(f) >= 11 {
		w.msize = min(w.msize, binary.LittleEndian.Uint32(f[7:11]))
	}
	delete(w.out, tag)
	if w.flushed[tag] {
		w.held[tag] = f
		return nil
	}
	return [][]byte{f}
}

// iounit returns the most data one Tread or Twrite may carry.
func (w *wire) iounit() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.msize - plan9.IOHDRSZ)
}

func (w *wire) Close() error { return w.rwc.Close() }
