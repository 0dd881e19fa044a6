package client

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
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
// The 9fans client also frees a fid's number when it sends the Tclunk, not
// when the Rclunk comes, so another goroutine may walk to a new fid of the
// same number while the server still holds the old one, and get "duplicate
// fid". wire keeps the numbers apart: a new fid whose number has a Tclunk
// or Tremove in flight goes to the server under a substitute number, taken
// from the top of the fid space, and every later message naming it is
// rewritten to match.
//
// On the read side, wire hands the client only replies it knows: the
// replies to injected flushes are swallowed (the 9fans muxer would block
// forever on a tag it did not allocate), and the reply to a flushed
// request is held until its Rflush arrives, so that the client cannot
// reuse the tag while the server may still act on the flush. A reply to
// a tag with no request awaiting one, or of a type that does not answer
// it, is a *ProtocolError that ends the connection before its body is
// read: the 9fans muxer would block on it forever, and replies queued
// behind it would grow without bound (issue 29: a hostile host's daemon
// grew the keeper to 2.7 GB in 12 s). So at most one reply per request
// in flight is ever buffered.
//
// One goroutine (readLoop) reads every reply, for the client and for
// wire's own calls (see call) alike, and queues the client's: the 9fans
// client reads only while one of its own requests waits, and a call must
// not wait for that, nor the client for a call blocked at a stream's end.
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
	version  bool              // a Tversion (tagged NOTAG) awaits its reply
	out      map[uint16]uint8  // the client's requests awaiting a reply: tag → type
	flushes  map[uint16]uint16 // injected Tflush tags awaiting a reply → the tag flushed
	flushed  map[uint16]bool   // tags of requests with a Tflush in flight
	held     map[uint16][]byte // replies to flushed requests, held until their Rflush
	sticky   int               // while > 0, each interruptible request is flushed as it is sent
	next     uint16            // where the search for a free flush tag starts
	fids     map[uint32]uint32 // the client's fid → the server's, where they differ
	aliases  map[uint32]bool   // server fids standing in for a client's
	closing  map[uint32]bool   // server fids with a Tclunk or Tremove awaiting its reply
	clunks   map[uint16]uint32 // tag of such a Tclunk or Tremove → its server fid
	nextFid  uint32            // where the search for a substitute fid starts
	calls    map[uint16]*call  // wire's own requests awaiting a reply (see call)
	root     uint32            // the server's number of the client's attach fid
	attached bool              // root is set
	err      error             // why the connection failed, once it has
	readDone bool              // every request has been answered since: nothing more will be read
	ready    [][]byte          // replies released for the client, in order
	cond     *sync.Cond        // on mu: ready has grown, or readDone is set

	rd   *bufio.Reader // readLoop's
	rbuf []byte        // where readLoop reads the replies to calls, reused

	rmu   sync.Mutex // the client reads from one goroutine at a time, not always the same
	frame []byte     // the rest of the reply being handed to the client
}

// errLost answers, on the client's behalf, the requests outstanding when
// the connection fails.
const errLost = p9.Error("ns/client: connection lost")

func newWire(rwc io.ReadWriteCloser) *wire {
	w := &wire{
		rwc:     rwc,
		rd:      bufio.NewReaderSize(rwc, 64<<10),
		msize:   8192 + plan9.IOHDRSZ,
		out:     map[uint16]uint8{},
		flushes: map[uint16]uint16{},
		flushed: map[uint16]bool{},
		held:    map[uint16][]byte{},
		next:    plan9.NOTAG - 1,
		fids:    map[uint32]uint32{},
		aliases: map[uint32]bool{},
		closing: map[uint32]bool{},
		clunks:  map[uint16]uint32{},
		nextFid: plan9.NOFID - 1,
		calls:   map[uint16]*call{},
	}
	w.cond = sync.NewCond(&w.mu)
	go w.readLoop()
	return w
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
		w.version = true
	}
	if tag != plan9.NOTAG {
		_, call := w.calls[tag]
		if _, flush := w.flushes[tag]; flush || call {
			w.mu.Unlock()
			return 0, plan9.ProtocolError(fmt.Sprintf("ns/client: tag %d is in use by the wire", tag))
		}
		w.out[tag] = typ
		p = w.mapFids(p, tag)
		if typ == plan9.Tattach {
			w.root, w.attached = binary.LittleEndian.Uint32(p[fidAt:]), true
		}
		if w.sticky > 0 && interruptible(typ) {
			flush = w.flushLocked(tag)
		}
	}
	w.mu.Unlock()
	n := len(p)
	w.send(p)
	if flush != nil {
		w.send(flush)
	}
	return n, nil
}

// Where each request names fids: the fid it acts on, and a new one.
const (
	fidAt    = 7  // every request naming a fid: Tattach, Twalk, Topen...
	newfidAt = 11 // Twalk's newfid
	afidAt   = 11 // Tattach's afid
)

// mapFids returns the request p (tagged tag) as the server must see it:
// with each fid the client names replaced by the server's number for it.
// A Tclunk or Tremove frees its fid's number for reuse only once its
// reply arrives. w.mu is held.
func (w *wire) mapFids(p []byte, tag uint16) []byte {
	if len(p) < fidAt+4 {
		return p
	}
	switch p[4] {
	case plan9.Tattach:
		p = w.newFid(p, fidAt)
		if len(p) >= afidAt+4 {
			p = w.oldFid(p, afidAt)
		}
	case plan9.Tauth:
		p = w.newFid(p, fidAt)
	case plan9.Twalk:
		if len(p) < newfidAt+4 {
			return p
		}
		same := binary.LittleEndian.Uint32(p[fidAt:]) == binary.LittleEndian.Uint32(p[newfidAt:])
		p = w.oldFid(p, fidAt)
		if same {
			p = w.oldFid(p, newfidAt)
		} else {
			p = w.newFid(p, newfidAt)
		}
	case plan9.Topen, plan9.Tcreate, plan9.Tread, plan9.Twrite, plan9.Tstat, plan9.Twstat:
		p = w.oldFid(p, fidAt)
	case plan9.Tclunk, plan9.Tremove:
		fid := binary.LittleEndian.Uint32(p[fidAt:])
		p = w.oldFid(p, fidAt)
		srv := binary.LittleEndian.Uint32(p[fidAt:])
		delete(w.fids, fid)
		delete(w.aliases, srv)
		w.closing[srv] = true
		w.clunks[tag] = srv
	}
	return p
}

// oldFid rewrites the fid at p[at:] to the server's number for it.
func (w *wire) oldFid(p []byte, at int) []byte {
	fid := binary.LittleEndian.Uint32(p[at:])
	srv, ok := w.fids[fid]
	if !ok {
		return p
	}
	return setFid(p, at, srv)
}

// newFid gives the new fid at p[at:] a number the server does not hold:
// its own, unless a Tclunk of that number is still in flight.
func (w *wire) newFid(p []byte, at int) []byte {
	fid := binary.LittleEndian.Uint32(p[at:])
	if old, ok := w.fids[fid]; ok {
		// The last fid of this number never reached the server (its walk
		// failed), or the client reuses a number it never clunked.
		delete(w.fids, fid)
		delete(w.aliases, old)
	}
	if !w.closing[fid] || fid == plan9.NOFID {
		return p
	}
	srv := w.nextFid
	for w.closing[srv] || w.aliases[srv] {
		srv--
	}
	w.nextFid = srv - 1
	w.fids[fid] = srv
	w.aliases[srv] = true
	return setFid(p, at, srv)
}

// setFid returns a copy of p with the fid at p[at:] set to fid.
func setFid(p []byte, at int, fid uint32) []byte {
	q := slices.Clone(p)
	binary.LittleEndian.PutUint32(q[at:], fid)
	return q
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
	tag, ok := w.freeTagLocked()
	if !ok {
		return nil
	}
	f, err := (&plan9.Fcall{Type: plan9.Tflush, Tag: tag, Oldtag: old}).Bytes()
	if err != nil {
		return nil
	}
	w.flushes[tag] = old
	w.flushed[old] = true
	return f
}

// freeTagLocked returns a tag for a request of wire's own, from the top
// of the tag space (the 9fans client counts up from the bottom), or false
// if none is free. w.mu is held.
func (w *wire) freeTagLocked() (uint16, bool) {
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
			return 0, false
		}
	}
	w.next = tag - 1
	if w.next == 0 {
		w.next = plan9.NOTAG - 1
	}
	return tag, true
}

// Read hands the client the bytes of the replies meant for it.
func (w *wire) Read(p []byte) (int, error) {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	if len(w.frame) == 0 {
		w.mu.Lock()
		for len(w.ready) == 0 && !w.readDone {
			w.cond.Wait()
		}
		if len(w.ready) == 0 {
			err := w.err
			w.mu.Unlock()
			return 0, err
		}
		w.frame, w.ready = w.ready[0], w.ready[1:]
		w.mu.Unlock()
	}
	n := copy(p, w.frame)
	w.frame = w.frame[n:]
	return n, nil
}

// readLoop reads replies until the connection fails, then answers every
// request still outstanding, until none is.
func (w *wire) readLoop() {
	for {
		f, err := w.readFrame()
		if err != nil {
			w.fail(err)
			// Nothing more is read: a server breaking the protocol is
			// disconnected rather than left to fill the socket.
			w.rwc.Close()
			break
		}
		if f != nil {
			w.deliver(w.admit(f))
		}
	}
	for {
		rs, err := w.orphans()
		if err != nil {
			break
		}
		w.deliver(rs)
	}
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
}

// deliver passes on replies released by admit or orphans: a call's to its
// waiter, the rest to the client.
func (w *wire) deliver(frames [][]byte) {
	for _, f := range frames {
		tag := binary.LittleEndian.Uint16(f[5:7])
		w.mu.Lock()
		c := w.calls[tag]
		delete(w.calls, tag)
		if c == nil {
			w.ready = append(w.ready, f)
			w.cond.Broadcast()
		}
		w.mu.Unlock()
		if c != nil {
			c.ch <- c.decode(f)
		}
	}
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
	clear(w.clunks)
	clear(w.closing)
	clear(w.flushes)
	clear(w.flushed)
	if len(rs) == 0 {
		w.readDone = true
		return nil, w.err
	}
	return rs, nil
}

// readFrame reads one reply: a call's into rbuf, which the call's result
// copies before the next, the client's into a buffer of its own. The data
// of a call's Rread goes straight to the call, and readFrame returns nil.
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
	var tag [3]byte
	if _, err := io.ReadFull(w.rd, tag[:]); err != nil {
		return nil, err
	}
	if err := w.expected(tag[0], binary.LittleEndian.Uint16(tag[1:])); err != nil {
		return nil, err
	}
	if tag[0] == plan9.Rread && size >= 11 {
		if c := w.takeRead(binary.LittleEndian.Uint16(tag[1:])); c != nil {
			return nil, w.readInto(c, size)
		}
	}
	w.mu.Lock()
	_, call := w.calls[binary.LittleEndian.Uint16(tag[1:])]
	w.mu.Unlock()
	var f []byte
	if call {
		// A frame kept past the next read (held for a flush) is copied
		// by admit.
		if cap(w.rbuf) < int(size) {
			w.rbuf = make([]byte, msize)
		}
		f = w.rbuf[:size]
	} else {
		f = make([]byte, size)
	}
	copy(f, hdr[:])
	copy(f[4:], tag[:])
	if _, err := io.ReadFull(w.rd, f[7:]); err != nil {
		return nil, err
	}
	return f, nil
}

// A ProtocolError is a reply that answers no request awaiting one: its
// tag was not sent, or was answered already, or its type does not answer
// the request's. The connection ends at the first.
type ProtocolError struct {
	Type uint8  // the reply's type
	Tag  uint16 // its tag
	Sent uint8  // the type of the request awaiting a reply under Tag, 0 if none
}

func (e *ProtocolError) Error() string {
	if e.Sent == 0 {
		return fmt.Sprintf("ns/client: the server broke the 9P protocol: a reply (type %d) to tag %d, which awaits none", e.Type, e.Tag)
	}
	return fmt.Sprintf("ns/client: the server broke the 9P protocol: a reply of type %d to a request of type %d (tag %d)", e.Type, e.Sent, e.Tag)
}

// IsProtocolError reports whether err is, or wraps, a server's break of
// the 9P protocol: a reply to no request (*ProtocolError), or a reply
// malformed or longer than msize.
func IsProtocolError(err error) bool {
	var pe *ProtocolError
	var p9e plan9.ProtocolError
	return errors.As(err, &pe) || errors.As(err, &p9e)
}

// expected checks, before anything more of it is read, that a reply of
// type typ tagged tag answers a request awaiting one: Rerror or the
// request's type plus one.
func (w *wire) expected(typ uint8, tag uint16) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sent uint8
	switch _, flush := w.flushes[tag]; {
	case tag == plan9.NOTAG:
		if w.version {
			sent = plan9.Tversion
		}
	case flush:
		sent = plan9.Tflush
	default:
		sent = w.out[tag]
	}
	if sent != 0 && (typ == sent+1 || typ == plan9.Rerror) {
		return nil
	}
	return &ProtocolError{Type: typ, Tag: tag, Sent: sent}
}

// takeRead returns the call tagged tag, answered from here on, if its
// reply can go to it as it comes off the wire: no flush of it is in
// flight (a flushed request's reply is held until its Rflush; see admit).
// Once it is out of w.out no flush is sent for it.
func (w *wire) takeRead(tag uint16) *call {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.calls[tag]
	if c == nil || w.flushed[tag] {
		return nil
	}
	delete(w.calls, tag)
	delete(w.out, tag)
	return c
}

// readInto reads the rest of an Rread of size bytes into c's buffer and
// answers c, also when the connection fails on the way (having recorded
// why first, which the caller's error reports).
func (w *wire) readInto(c *call, size uint32) error {
	var count [4]byte
	_, err := io.ReadFull(w.rd, count[:])
	n := binary.LittleEndian.Uint32(count[:])
	if err == nil && (11+n != size || int(n) > len(c.dst)) {
		err = plan9.ProtocolError(fmt.Sprintf("ns/client: Rread of %d bytes in %d (asked for %d)", n, size, len(c.dst)))
	}
	if err == nil {
		_, err = io.ReadFull(w.rd, c.dst[:n])
	}
	if err != nil {
		w.fail(err)
		c.ch <- result{err: errLost}
		return err
	}
	c.ch <- result{n: int(n)}
	return nil
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
	if tag == plan9.NOTAG {
		w.version = false
		if typ == plan9.Rversion && len(f) >= 11 {
			w.msize = min(w.msize, binary.LittleEndian.Uint32(f[7:11]))
		}
		return [][]byte{f}
	}
	if srv, ok := w.clunks[tag]; ok {
		// Answered, even with an error, the fid is gone.
		delete(w.clunks, tag)
		delete(w.closing, srv)
	}
	delete(w.out, tag)
	if w.flushed[tag] {
		w.held[tag] = slices.Clone(f)
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
