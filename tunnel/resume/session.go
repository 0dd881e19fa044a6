package resume

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns/ninep"
)

// writeBufSize is the write buffer of every connection. Larger messages
// (big reads and writes) bypass it.
const writeBufSize = 64 << 10

// A session relays one client connection to a server connection of its own,
// and outlives server connections: it holds what is needed to rebuild the
// client's view on a new one.
//
// Two goroutines work on it: clientLoop reads requests and forwards them;
// serverLoop dials, replays, and reads replies. Lock order: mu, then cwmu
// or a link's wmu. Nothing takes mu while holding cwmu or wmu.
type session struct {
	p      *Proxy
	log    *slog.Logger
	ctx    context.Context // ends when the session does
	cancel context.CancelFunc

	cc   net.Conn
	cr   *frameReader // read by clientLoop only
	cwmu sync.Mutex
	cw   *bufio.Writer

	msize atomic.Uint32 // negotiated by the client's Tversion; 0 before

	mu      sync.Mutex
	link    *link    // where requests go; nil while (re)connecting
	dialed  net.Conn // the server connection being set up or in use: shut closes it
	ended   bool
	gen     uint64 // generation of the newest link; 0 means none yet
	seq     uint64
	pending map[uint16]*req // by tag: every request not yet answered
	fids    map[uint32]*fid
	free    []*req
}

// A link is one server connection.
type link struct {
	nc  net.Conn
	gen uint64
	fr  *frameReader // read by serverLoop only
	wmu sync.Mutex
	bw  *bufio.Writer

	limit  uint32      // the largest reply replay reads: the msize, or preVersionMax before one
	useful atomic.Bool // it answered a request past the handshake
	late   atomic.Bool // a timer closed it: the server did not answer in time
	hsMu   sync.Mutex
	hs     *time.Timer // the handshake's timer, while a Tversion awaits its answer
}

// expect closes the connection unless disarm is called within d: a
// server that takes a Tversion and answers nothing must not hold the
// client. Closing, not a deadline: an SSH channel has no deadlines.
func (l *link) expect(d time.Duration) {
	l.hsMu.Lock()
	defer l.hsMu.Unlock()
	if l.hs == nil {
		l.hs = time.AfterFunc(d, func() {
			l.late.Store(true)
			l.nc.Close()
		})
	}
}

func (l *link) disarm() {
	l.hsMu.Lock()
	defer l.hsMu.Unlock()
	if l.hs != nil {
		l.hs.Stop()
		l.hs = nil
	}
}

// write queues f for the server. A failure closes the connection, so that
// serverLoop notices and reconnects; the request is then in pending and is
// dealt with there.
func (l *link) write(f []byte) {
	l.wmu.Lock()
	_, err := l.bw.Write(f)
	l.wmu.Unlock()
	if err != nil {
		l.nc.Close()
	}
}

func (l *link) flush() {
	l.wmu.Lock()
	var err error
	if l.bw.Buffered() > 0 {
		err = l.bw.Flush()
	}
	l.wmu.Unlock()
	if err != nil {
		l.nc.Close()
	}
}

// A req is a request awaiting its reply.
type req struct {
	seq    uint64 // arrival order, the order requests are resent in
	gen    uint64 // generation of the link it was sent on; 0: to be sent
	tag    uint16
	typ    uint8
	mode   uint8
	fid    uint32
	newfid uint32
	oldtag uint16
	msize  uint32 // Tversion, as forwarded
	uname  string
	aname  string
	name   string
	names  []string
	frame  []byte // the request as the client sent it, while it may have to be (re)sent
}

// A fid is what the proxy knows of a fid the client holds: enough to make
// it again on a new server connection.
type fid struct {
	seq     uint64 // creation order, the order of replay
	gen     uint64 // generation of the link the server holds it on
	uname   string
	aname   string
	path    []string // walked from the attach root; never modified, only replaced
	open    bool
	mode    uint8
	written bool // its state lives in the server: it cannot be restored
	auth    bool
	lost    bool // not restored: every request on it fails with ErrLost
}

func newSession(p *Proxy, c net.Conn) *session {
	s := &session{
		p:       p,
		log:     p.log(),
		cc:      c,
		cr:      newFrameReader(c),
		cw:      bufio.NewWriterSize(c, writeBufSize),
		pending: map[uint16]*req{},
		fids:    map[uint32]*fid{},
	}
	s.ctx, s.cancel = context.WithCancel(p.life.Context())
	return s
}

func (s *session) run() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serverLoop()
	}()
	err := s.clientLoop()
	s.log.Debug("resume: client connection ended", "err", err)
	s.shut()
	<-done
}

// shut ends the session: both connections close, and both loops return.
func (s *session) shut() {
	s.cancel()
	s.cc.Close()
	s.mu.Lock()
	s.ended = true
	if s.dialed != nil {
		s.dialed.Close()
	}
	s.mu.Unlock()
}

// clientLoop reads the client's requests until the client goes away or
// sends something malformed.
func (s *session) clientLoop() error {
	var dirty *link
	for {
		if dirty != nil && !s.cr.ready() {
			dirty.flush()
			dirty = nil
		}
		limit := s.msize.Load()
		if limit == 0 {
			limit = preVersionMax
		}
		f, err := s.cr.next(limit)
		if err != nil {
			return err
		}
		m, err := parseT(f)
		if err != nil {
			return err
		}
		if m.typ == plan9.Tversion && m.msize > s.p.maxMsize() {
			// The server's answer may not exceed what it is asked for,
			// so no message on either side will be larger than this.
			m.msize = s.p.maxMsize()
			binary.LittleEndian.PutUint32(f[7:11], m.msize)
		}
		if l := s.request(&m, f); l != nil {
			dirty = l
		}
	}
}

// request takes one request from the client: it answers it here, or
// records it and forwards it (returning the link written to, to flush), or
// records it to be sent once connected again.
func (s *session) request(m *tmsg, f []byte) *link {
	s.mu.Lock()
	if _, busy := s.pending[m.tag]; busy {
		s.answerLocked(rerror(m.tag, "resume: duplicate tag"))
		s.mu.Unlock()
		return nil
	}
	if m.typ == plan9.Tflush {
		return s.flushLocked(m, f)
	}
	fd := s.fids[m.fid]
	if ninep.UsesFid(m.typ) && fd != nil && fd.lost {
		s.answerLocked(s.lostReplyLocked(m.typ, m.tag, m.fid))
		s.mu.Unlock()
		return nil
	}
	l := s.link
	if m.typ == plan9.Tclunk && l == nil {
		// Nothing to clunk in a server that is gone, and a client
		// closing files on Ctrl-C should not wait for it to return.
		delete(s.fids, m.fid)
		s.answerLocked(empty(plan9.Rclunk, m.tag))
		s.mu.Unlock()
		return nil
	}
	if m.typ == plan9.Twrite && fd != nil {
		// The server's state for the fid may now differ from anything a
		// replay can rebuild, whatever the reply says.
		fd.written = true
	}
	r := s.newReq(m)
	s.pending[m.tag] = r
	switch {
	case l == nil:
		r.frame = append(r.frame, f...)
	case resendable(m.typ):
		r.frame = append(r.frame, f...)
		r.gen = l.gen
	default:
		r.gen = l.gen
	}
	s.mu.Unlock()
	// r may be answered, even recycled, from here on: only f is used.
	if l != nil {
		if m.typ == plan9.Tversion {
			l.expect(s.p.handshakeTimeout())
		}
		l.write(f)
	}
	return l
}

// flushLocked handles a Tflush. When nothing in the server can answer it,
// the proxy does: the flushed request, if still waiting, gets "interrupted"
// first, as the client expects before its tag may be reused. It unlocks mu.
func (s *session) flushLocked(m *tmsg, f []byte) *link {
	old := s.pending[m.oldtag]
	l := s.link
	if old == nil || l == nil || old.gen != l.gen {
		if old != nil {
			s.answerLocked(rerror(old.tag, string(errInterrupted)))
			s.retireLocked(old)
		}
		s.answerLocked(empty(plan9.Rflush, m.tag))
		s.mu.Unlock()
		return nil
	}
	r := s.newReq(m)
	r.gen = l.gen
	s.pending[m.tag] = r
	s.mu.Unlock()
	l.write(f)
	return l
}

// lostReplyLocked answers a request on a lost fid. A clunk succeeds (the
// fid is gone either way) and so forgets the fid; so does a remove, which
// clunks even when it fails.
func (s *session) lostReplyLocked(typ uint8, tag uint16, fidnum uint32) []byte {
	switch typ {
	case plan9.Tclunk:
		delete(s.fids, fidnum)
		return empty(plan9.Rclunk, tag)
	case plan9.Tremove:
		delete(s.fids, fidnum)
	}
	return rerror(tag, string(ErrLost))
}

// answerLocked writes replies the proxy makes itself. Holding mu orders
// them after any server reply already taken out of pending: an Rflush
// after the reply to the request it flushed.
func (s *session) answerLocked(frames ...[]byte) {
	s.cwmu.Lock()
	defer s.cwmu.Unlock()
	for _, f := range frames {
		if _, err := s.cw.Write(f); err != nil {
			s.cc.Close()
			return
		}
	}
	if err := s.cw.Flush(); err != nil {
		s.cc.Close()
	}
}

func (s *session) newReq(m *tmsg) *req {
	var r *req
	if n := len(s.free); n > 0 {
		r, s.free = s.free[n-1], s.free[:n-1]
	} else {
		r = new(req)
	}
	s.seq++
	*r = req{
		seq: s.seq, tag: m.tag, typ: m.typ, mode: m.mode, fid: m.fid, newfid: m.newfid,
		oldtag: m.oldtag, msize: m.msize, uname: m.uname, aname: m.aname, name: m.name, names: m.names,
		frame: r.frame[:0],
	}
	return r
}

// retireLocked forgets an answered request and keeps its struct for reuse.
func (s *session) retireLocked(r *req) {
	delete(s.pending, r.tag)
	if len(s.free) >= 256 {
		return
	}
	frame := r.frame[:0]
	if cap(frame) > 256 {
		frame = nil // a queued Twrite: don't keep its size around
	}
	*r = req{frame: frame}
	s.free = append(s.free, r)
}

// sortedPendingLocked returns the requests awaiting replies in arrival
// order.
func (s *session) sortedPendingLocked() []*req {
	rs := make([]*req, 0, len(s.pending))
	for _, r := range s.pending {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *req) int { return cmp.Compare(a.seq, b.seq) })
	return rs
}

// serverLoop keeps a server connection for the session: dial, replay,
// relay replies until the connection fails, then again, until the session
// ends.
func (s *session) serverLoop() {
	var b backoff
	for {
		nc, err := s.dial(&b)
		if err != nil {
			return
		}
		l, err := s.resume(nc)
		if err != nil {
			nc.Close()
			if errors.Is(err, errFatal) {
				s.log.Warn("resume: cannot resume the client's session; closing it", "err", err)
				s.shut()
				return
			}
			if s.ctx.Err() != nil {
				return
			}
			s.log.Info("resume: replay on a new connection failed", "err", err, "retry_in", b.peek())
			s.p.state("reconnecting: " + err.Error())
			if !s.sleep(b.next()) {
				return
			}
			continue
		}
		err = s.relay(l)
		l.disarm()
		s.drop(l)
		if s.ctx.Err() != nil {
			return
		}
		s.p.state("reconnecting: " + err.Error())
		if l.useful.Load() {
			b.reset()
			s.log.Info("resume: connection to the server lost; reconnecting", "err", err)
			continue
		}
		// Nothing answered past the handshake: a server that fails at
		// once must not be dialled again at once.
		s.log.Info("resume: connection to the server failed before it answered a request", "err", err, "retry_in", b.peek())
		if !s.sleep(b.next()) {
			return
		}
	}
}

// errMisbehaving ends a server connection that breaks the protocol in a
// way a reconnect may mend.
var errMisbehaving = errors.New("resume: server misbehaves; dropping the connection")

// backoff is the wait before dialling again: minBackoff doubling to
// maxBackoff, each wait drawn from its upper half so that sessions do not
// dial in step.
type backoff struct{ d time.Duration }

func (b *backoff) peek() time.Duration { return max(b.d, minBackoff) }

func (b *backoff) next() time.Duration {
	d := b.peek()
	b.d = min(2*d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.d = 0 }

// sleep waits d unless the session ends first.
func (s *session) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// dial returns a new server connection, retrying with b until the
// session ends.
func (s *session) dial(b *backoff) (net.Conn, error) {
	for {
		nc, err := s.p.Dial(s.ctx)
		if err == nil {
			s.mu.Lock()
			if s.ended {
				s.mu.Unlock()
				nc.Close()
				return nil, context.Canceled
			}
			s.dialed = nc
			s.mu.Unlock()
			return nc, nil
		}
		if s.ctx.Err() != nil {
			return nil, s.ctx.Err()
		}
		s.log.Debug("resume: dial failed", "err", err)
		s.p.state("reconnecting: " + err.Error())
		if !s.sleep(b.next()) {
			return nil, s.ctx.Err()
		}
	}
}

// relay passes the server's replies to the client until the connection
// fails.
func (s *session) relay(l *link) error {
	// Replies are flushed to the client when no other is buffered behind
	// them; whatever is held when the connection fails goes out now.
	defer func() {
		s.cwmu.Lock()
		if s.cw.Flush() != nil {
			s.cc.Close()
		}
		s.cwmu.Unlock()
	}()
	unexpected := 0
	for {
		limit := max(s.msize.Load(), preVersionMax)
		f, err := l.fr.next(limit)
		if err != nil {
			if l.late.Load() {
				return fmt.Errorf("resume: no answer to Tversion within %v", s.p.handshakeTimeout())
			}
			return err
		}
		h, _, _ := ninep.Split(f) // whole: next returns only whole messages
		typ, tag := h.Type, h.Tag
		s.mu.Lock()
		r := s.pending[tag]
		if r == nil || r.gen != l.gen || typ != r.typ+1 && typ != plan9.Rerror {
			s.mu.Unlock()
			// Discarded, and counted rather than logged: a server can
			// send them faster than any log can take them.
			if unexpected++; unexpected > maxUnexpected {
				return fmt.Errorf("%w: %d replies to no request (the last: type %d, tag %d)", errMisbehaving, unexpected, typ, tag)
			}
			continue
		}
		switch r.typ {
		case plan9.Tversion:
			l.disarm()
		case plan9.Tattach, plan9.Tauth:
		default:
			l.useful.Store(true)
		}
		s.completeLocked(r, f, l.gen)
		s.retireLocked(r)
		s.cwmu.Lock()
		s.mu.Unlock()
		_, err = s.cw.Write(f)
		if err == nil && !l.fr.ready() {
			err = s.cw.Flush()
		}
		s.cwmu.Unlock()
		if err != nil {
			s.cc.Close() // the client is gone: clientLoop ends the session
		}
	}
}

// completeLocked updates the fid table from the reply f to r.
func (s *session) completeLocked(r *req, f []byte, gen uint64) {
	typ := f[4]
	switch r.typ {
	case plan9.Tversion:
		if typ == plan9.Rversion && len(f) >= 11 {
			// A server offering more than it was asked for gets what it
			// was asked for: the client sees the msize the proxy holds to.
			msize := min(binary.LittleEndian.Uint32(f[7:11]), r.msize, s.p.maxMsize())
			binary.LittleEndian.PutUint32(f[7:11], msize)
			s.msize.Store(msize)
			// A new version clunks every fid.
			clear(s.fids)
		}
	case plan9.Tauth:
		if typ == plan9.Rauth {
			s.newFidLocked(r.fid, &fid{uname: r.uname, aname: r.aname, auth: true, gen: gen})
		}
	case plan9.Tattach:
		if typ == plan9.Rattach {
			s.newFidLocked(r.fid, &fid{uname: r.uname, aname: r.aname, gen: gen})
		}
	case plan9.Twalk:
		from := s.fids[r.fid]
		if typ != plan9.Rwalk || len(f) < 9 || from == nil ||
			int(binary.LittleEndian.Uint16(f[7:9])) != len(r.names) {
			return // a partial walk moves nothing
		}
		nf := &fid{uname: from.uname, aname: from.aname, path: walkPath(from.path, r.names), gen: gen}
		if r.fid == r.newfid {
			nf.seq = from.seq
			s.fids[r.newfid] = nf
		} else {
			s.newFidLocked(r.newfid, nf)
		}
	case plan9.Topen, plan9.Tcreate:
		fd := s.fids[r.fid]
		if fd == nil || typ == plan9.Rerror {
			return
		}
		if r.typ == plan9.Tcreate {
			fd.path = walkPath(fd.path, []string{r.name})
		}
		fd.open, fd.mode = true, r.mode
	case plan9.Tflush:
		// A server may drop a flushed request without answering it; after
		// Rflush the client may reuse its tag.
		if old := s.pending[r.oldtag]; old != nil && typ == plan9.Rflush {
			s.retireLocked(old)
		}
	case plan9.Tclunk, plan9.Tremove:
		// Both end the fid, whatever the answer.
		delete(s.fids, r.fid)
	}
}

func (s *session) newFidLocked(num uint32, f *fid) {
	s.seq++
	f.seq = s.seq
	s.fids[num] = f
}

// walkPath returns path extended by names, with ".." taken back out as the
// server does, so that a replayed walk is as short as it can be.
func walkPath(path, names []string) []string {
	p := slices.Clip(path)
	for _, n := range names {
		if n == ".." {
			if len(p) > 0 {
				p = slices.Clip(p[:len(p)-1])
			}
			continue
		}
		p = append(p, n)
	}
	return p
}

// drop deals with the requests in flight on l, which has failed. Those
// that can be resent wait for the next link; the others are answered now.
// Fids whose state lived in the server are lost from here on.
func (s *session) drop(l *link) {
	l.nc.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link == l {
		s.link = nil
	}
	var out [][]byte
	for _, r := range s.sortedPendingLocked() {
		if r.gen != l.gen || s.pending[r.tag] != r {
			continue // waiting to be sent, or answered by a flush just now
		}
		switch {
		case r.typ == plan9.Tflush:
			// The client wants it stopped, and it has: no need to resend.
			if old := s.pending[r.oldtag]; old != nil {
				out = append(out, rerror(old.tag, string(errInterrupted)))
				s.retireLocked(old)
			}
			out = append(out, empty(plan9.Rflush, r.tag))
			s.retireLocked(r)
		case r.typ == plan9.Tclunk:
			delete(s.fids, r.fid)
			out = append(out, empty(plan9.Rclunk, r.tag))
			s.retireLocked(r)
		case !resendable(r.typ):
			out = append(out, rerror(r.tag, string(ErrUncertain)))
			switch fd := s.fids[r.fid]; {
			case r.typ == plan9.Tremove:
				delete(s.fids, r.fid)
			case r.typ == plan9.Tcreate && fd != nil:
				fd.lost = true // created and moved, or not: unknown
			}
			s.retireLocked(r)
		default:
			r.gen = 0
		}
	}
	for num, fd := range s.fids {
		if !fd.lost && (fd.written || fd.auth) {
			fd.lost = true
			s.log.Info("resume: fid cannot be restored", "fid", num, "path", pathString(fd.path), "why", "written to or auth")
		}
	}
	if len(out) > 0 {
		s.answerLocked(out...)
	}
}

func pathString(p []string) string {
	b := []byte{'/'}
	for i, n := range p {
		if i > 0 {
			b = append(b, '/')
		}
		b = append(b, n...)
	}
	return string(b)
}
