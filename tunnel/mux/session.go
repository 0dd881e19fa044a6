package mux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns/ninep"
)

// A session serves one client connection. Its reader takes the client's
// requests in order and starts each in a goroutine of its own, so that a
// request blocked in one server (a read at the end of a stream) holds no
// other. Lock order: wmu, then mu; a backend's locks are never held with
// them.
type session struct {
	m   *Mux
	log *slog.Logger
	cc  net.Conn
	br  *bufio.Reader
	ctx context.Context
	end context.CancelFunc

	msize uint32   // negotiated at Tversion, before any request runs
	local *backend // set at Tversion

	wmu sync.Mutex // whole replies onto cc

	mu     sync.Mutex
	fids   map[uint32]*fid
	ops    map[uint16]*op
	nflush int // of ops, the Tflushes
	mounts map[string]*slot
	wg     sync.WaitGroup // requests running
}

// A fid is what a client fid stands for: a fid of one backend, and where
// it is in the mux's namespace. It is replaced, never changed, so that a
// request holding one sees a consistent fid.
type fid struct {
	be    *backend
	bfid  uint32
	path  []string // the names walked from the root, ".." taken out
	mroot bool     // at a mount point: the mount's root
	uname string   // of the attach it descends from
	aname string
	open  bool
	dir   bool // opened, and a directory: its reads are directory entries
	busy  bool // reserved by an attach or walk in flight: not usable yet
}

// An op is a request in flight.
type op struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once its reply is written
	flush  bool
}

// A slot is a mount point as one client connection reaches it: its
// current connection, or the dial in progress.
type slot struct {
	be      *backend
	dialing chan struct{} // non-nil while a dial is in progress; closed when it ends
	err     error         // the last dial's error
}

func newSession(m *Mux, c net.Conn) *session {
	s := &session{
		m:      m,
		log:    m.log(),
		cc:     c,
		br:     bufio.NewReaderSize(c, 64<<10),
		fids:   map[uint32]*fid{},
		ops:    map[uint16]*op{},
		mounts: map[string]*slot{},
	}
	s.ctx, s.end = context.WithCancel(m.life.Context())
	return s
}

// run serves the client until it goes away, and returns why.
func (s *session) run() error {
	err := s.readLoop()
	switch {
	case s.local != nil && !s.local.alive() && s.ctx.Err() == nil:
		err = s.local.lost()
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		err = nil
	}
	if err != nil {
		s.log.Debug("mux: client connection ended", "err", err)
	}
	s.end()
	s.cc.Close()
	s.mu.Lock()
	var bes []*backend
	for _, sl := range s.mounts {
		if sl.be != nil {
			bes = append(bes, sl.be)
		}
	}
	s.mu.Unlock()
	if s.local != nil {
		bes = append(bes, s.local)
	}
	for _, be := range bes {
		be.close()
	}
	s.wg.Wait()
	return err
}

func (s *session) readLoop() error {
	for {
		limit := s.msize
		if limit == 0 {
			limit = preVersionMax
		}
		f, err := readFrame(s.br, limit)
		if err != nil {
			return err
		}
		m, err := decode(f)
		if err != nil {
			return err
		}
		if !isRequest(m.Type) {
			return fmt.Errorf("%w: %s from a client", errMalformed, typeName(m.Type))
		}
		if err := s.dispatch(m); err != nil {
			return err
		}
	}
}

// dispatch takes one request: Tversion and Tflush here, the rest in a
// goroutine each.
func (s *session) dispatch(m *plan9.Fcall) error {
	switch {
	case m.Type == plan9.Tversion:
		return s.version(m)
	case s.msize == 0:
		s.replyNow(m.Tag, errors.New("mux: Tversion first"))
		return nil
	case m.Type == plan9.Tflush:
		s.flush(m)
		return nil
	}
	s.mu.Lock()
	if _, busy := s.ops[m.Tag]; busy || m.Tag == plan9.NOTAG {
		s.mu.Unlock()
		s.replyNow(m.Tag, fmt.Errorf("mux: tag %d is in use", m.Tag))
		return nil
	}
	if n := len(s.ops) - s.nflush; n >= s.m.maxRequests() {
		s.mu.Unlock()
		s.replyNow(m.Tag, fmt.Errorf("mux: too many outstanding requests (limit %d)", s.m.maxRequests()))
		return nil
	}
	var f *fid
	if ninep.UsesFid(m.Type) {
		if f = s.fids[m.Fid]; f == nil || f.busy {
			s.mu.Unlock()
			s.replyNow(m.Tag, fmt.Errorf("mux: unknown fid %d", m.Fid))
			return nil
		}
	}
	newfid, reserve := m.Fid, m.Type == plan9.Tattach
	if m.Type == plan9.Twalk && m.Newfid != m.Fid {
		newfid, reserve = m.Newfid, true
	}
	if reserve {
		if _, used := s.fids[newfid]; used || newfid == plan9.NOFID {
			s.mu.Unlock()
			s.replyNow(m.Tag, fmt.Errorf("mux: fid %d is in use", newfid))
			return nil
		}
		if len(s.fids) >= s.m.maxFids() {
			s.mu.Unlock()
			s.replyNow(m.Tag, fmt.Errorf("mux: too many fids (limit %d)", s.m.maxFids()))
			return nil
		}
		s.fids[newfid] = &fid{busy: true}
	}
	if m.Type == plan9.Tclunk || m.Type == plan9.Tremove {
		// Gone whatever the answer: the client may reuse the number
		// once it has one.
		delete(s.fids, m.Fid)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	o := &op{cancel: cancel, done: make(chan struct{})}
	s.ops[m.Tag] = o
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		rx, err := s.handle(ctx, m, f)
		s.reply(m.Tag, rx, err)
	}()
	return nil
}

// version answers the client's Tversion, the first message: it dials the
// local tree and negotiates the msize with both. A Tversion later in the
// conversation is refused: renegotiating would mean clunking every fid
// on every server, which no client of ns's needs.
func (s *session) version(m *plan9.Fcall) error {
	if s.msize != 0 {
		s.replyNow(m.Tag, errors.New("mux: Tversion again: connect again instead"))
		return nil
	}
	if !strings.HasPrefix(m.Version, "9P2000") {
		s.replyNow(m.Tag, &plan9.Fcall{Type: plan9.Rversion, Msize: min(m.Msize, s.m.maxMsize()), Version: "unknown"})
		return nil
	}
	if m.Msize < minMsize {
		s.replyNow(m.Tag, fmt.Errorf("mux: msize %d is too small", m.Msize))
		return nil
	}
	if s.m.Local == nil {
		err := errors.New("mux: no local tree")
		s.replyNow(m.Tag, err)
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.m.timeout())
	defer cancel()
	nc, err := s.m.Local(ctx)
	if err != nil {
		err = fmt.Errorf("mux: the local tree: %w", err)
		s.replyNow(m.Tag, err)
		return err
	}
	be := newBackend(nc, nil, s.log, s.m.timeout())
	if err := be.handshake(ctx, min(m.Msize, s.m.maxMsize())); err != nil {
		be.close()
		s.replyNow(m.Tag, err)
		return err
	}
	s.local = be
	s.msize = be.msize
	// The local tree is the namespace's root: without it the client's
	// connection ends, at once rather than at its next request.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-be.dead:
			s.cc.Close()
		case <-s.ctx.Done():
		}
	}()
	s.replyNow(m.Tag, &plan9.Fcall{Type: plan9.Rversion, Msize: s.msize, Version: "9P2000"})
	return nil
}

// flush answers a Tflush once the request it names has its reply, which
// cancelling it hastens: its server is sent a flush in turn.
func (s *session) flush(m *plan9.Fcall) {
	s.wmu.Lock()
	s.mu.Lock()
	if _, busy := s.ops[m.Tag]; busy || m.Tag == plan9.NOTAG || s.nflush >= s.m.maxRequests() {
		s.mu.Unlock()
		s.wmu.Unlock()
		s.replyNow(m.Tag, fmt.Errorf("mux: cannot take a flush with tag %d", m.Tag))
		return
	}
	old := s.ops[m.Oldtag]
	if old == nil {
		// Answered already; holding wmu ordered that reply before this.
		s.mu.Unlock()
		s.writeLocked(m.Tag, &plan9.Fcall{Type: plan9.Rflush})
		s.wmu.Unlock()
		return
	}
	o := &op{cancel: func() {}, done: make(chan struct{}), flush: true}
	s.ops[m.Tag] = o
	s.nflush++
	s.wg.Add(1)
	s.mu.Unlock()
	s.wmu.Unlock()
	old.cancel()
	go func() {
		defer s.wg.Done()
		select {
		case <-old.done:
		case <-s.ctx.Done():
		}
		s.reply(m.Tag, &plan9.Fcall{Type: plan9.Rflush}, nil)
	}()
}

// reply answers the request tagged tag with rx, or with err as an Rerror,
// and retires the tag. The tag is free once the client can have the
// reply, not before.
func (s *session) reply(tag uint16, rx *plan9.Fcall, err error) {
	s.wmu.Lock()
	s.mu.Lock()
	o := s.ops[tag]
	delete(s.ops, tag)
	if o != nil && o.flush {
		s.nflush--
	}
	s.mu.Unlock()
	if err != nil {
		rx = errorReply(err)
	}
	s.writeLocked(tag, rx)
	s.wmu.Unlock()
	if o != nil {
		close(o.done)
		o.cancel()
	}
}

// replyNow answers a request that never became an op: with rx, an
// *plan9.Fcall, or an error.
func (s *session) replyNow(tag uint16, v any) {
	var rx *plan9.Fcall
	switch v := v.(type) {
	case *plan9.Fcall:
		rx = v
	case error:
		rx = errorReply(v)
	}
	s.wmu.Lock()
	s.writeLocked(tag, rx)
	s.wmu.Unlock()
}

func errorReply(err error) *plan9.Fcall {
	return &plan9.Fcall{Type: plan9.Rerror, Ename: err.Error()}
}

// maxError bounds the text of an error the mux answers, whatever the
// msize: the mux's errors wrap what a server said.
const maxError = 8 << 10

// writeLocked writes one reply. A reply too large for the client's msize
// (a mount's Rstat grown by the mount point's name, say) is replaced by an
// error; a client that cannot take it is cut off.
func (s *session) writeLocked(tag uint16, rx *plan9.Fcall) {
	rx.Tag = tag
	if rx.Type == plan9.Rerror {
		// The header and the string's length take 9 bytes.
		n := maxError
		if s.msize != 0 {
			n = min(n, int(s.msize)-9)
		}
		if len(rx.Ename) > n {
			rx.Ename = rx.Ename[:n-3] + "..."
		}
	}
	b, err := encode(rx)
	if err == nil && s.msize != 0 && uint32(len(b)) > s.msize {
		err = fmt.Errorf("mux: a reply of %d bytes exceeds msize %d", len(b), s.msize)
	}
	if err != nil {
		b, _ = encode(&plan9.Fcall{Type: plan9.Rerror, Tag: tag, Ename: err.Error()})
	}
	s.cc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.cc.Write(b); err != nil {
		s.cc.Close()
	}
}

// setFid makes f the client's fid num, if num still stands for want (the
// reservation or fid the request found); it reports whether it did.
func (s *session) setFid(num uint32, want, f *fid) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.fids[num]; !ok || cur != want {
		return false
	}
	s.fids[num] = f
	return true
}

// unreserve drops a reservation for num made at dispatch.
func (s *session) unreserve(num uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fids[num]; f != nil && f.busy {
		delete(s.fids, num)
	}
}

// handle runs one request on f's backend and returns the reply.
func (s *session) handle(ctx context.Context, m *plan9.Fcall, f *fid) (*plan9.Fcall, error) {
	switch m.Type {
	case plan9.Tauth:
		return nil, errors.New("mux: authentication not required")
	case plan9.Tattach:
		return s.attach(ctx, m)
	case plan9.Twalk:
		return s.walk(ctx, m, f)
	}
	be := f.be
	tx := &plan9.Fcall{Type: m.Type, Fid: f.bfid}
	switch m.Type {
	case plan9.Topen:
		tx.Mode = m.Mode
	case plan9.Tcreate:
		tx.Name, tx.Perm, tx.Mode = m.Name, m.Perm, m.Mode
	case plan9.Tread:
		tx.Offset, tx.Count = m.Offset, min(m.Count, s.msize-plan9.IOHDRSZ, be.msize-plan9.IOHDRSZ)
	case plan9.Twrite:
		if len(m.Data) > int(be.msize-plan9.IOHDRSZ) {
			return nil, be.wrap(fmt.Errorf("a write of %d bytes exceeds the server's msize %d", len(m.Data), be.msize))
		}
		tx.Offset, tx.Data = m.Offset, m.Data
	case plan9.Tclunk:
		if !be.alive() {
			be.freeFid(f.bfid)
			return &plan9.Fcall{Type: plan9.Rclunk}, nil
		}
	case plan9.Twstat:
		tx.Stat = m.Stat
	}
	rx, err := be.rpc(ctx, tx)
	switch m.Type {
	case plan9.Tclunk, plan9.Tremove:
		var re remoteError
		if err == nil || errors.As(err, &re) {
			be.freeFid(f.bfid)
		}
		if m.Type == plan9.Tclunk && err != nil && !errors.As(err, &re) {
			// The fid is gone with its connection, or will be: a
			// clunk always succeeds.
			return &plan9.Fcall{Type: plan9.Rclunk}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	switch m.Type {
	case plan9.Topen, plan9.Tcreate:
		nf := *f
		nf.open, nf.dir = true, rx.Qid.Type&plan9.QTDIR != 0
		if m.Type == plan9.Tcreate {
			nf.path, nf.mroot = appendPath(f.path, m.Name), false
		}
		s.setFid(m.Fid, f, &nf)
		if !be.local {
			rx.Qid = be.mapQid(rx.Qid)
		}
		if rx.Iounit != 0 {
			rx.Iounit = min(rx.Iounit, s.msize-plan9.IOHDRSZ, be.msize-plan9.IOHDRSZ)
		}
	case plan9.Tread:
		if f.dir && !be.local {
			if err := mapDirs(rx.Data, be.mapPath); err != nil {
				be.fail(err)
				return nil, be.lost()
			}
		}
	case plan9.Tstat:
		if !be.local {
			mapDirs(rx.Stat, be.mapPath) // checked whole by fits
		}
		if f.mroot {
			d, err := plan9.UnmarshalDir(rx.Stat)
			if err != nil {
				return nil, be.wrap(err)
			}
			d.Name = f.path[len(f.path)-1]
			rx.Stat, _ = d.Bytes()
			if len(rx.Stat) > plan9.STATMAX {
				return nil, errors.New("mux: the mount point's stat is too large")
			}
		}
	}
	return rx, nil
}

// attach attaches the client's fid to the local tree's root, as the
// client's uname and aname.
func (s *session) attach(ctx context.Context, m *plan9.Fcall) (*plan9.Fcall, error) {
	s.mu.Lock()
	res := s.fids[m.Fid]
	s.mu.Unlock()
	if m.Afid != plan9.NOFID {
		s.unreserve(m.Fid)
		return nil, errors.New("mux: authentication not required: attach with afid NOFID")
	}
	be := s.local
	bfid := be.newFid()
	rx, err := be.rpc(ctx, &plan9.Fcall{Type: plan9.Tattach, Fid: bfid, Afid: plan9.NOFID, Uname: m.Uname, Aname: m.Aname})
	if err != nil {
		be.freeFid(bfid)
		s.unreserve(m.Fid)
		return nil, err
	}
	if !s.setFid(m.Fid, res, &fid{be: be, bfid: bfid, uname: m.Uname, aname: m.Aname}) {
		be.clunk(bfid)
	}
	return rx, nil
}

// appendPath returns path with names after it, never sharing path's
// array.
func appendPath(path []string, names ...string) []string {
	p := make([]string, 0, len(path)+len(names))
	return append(append(p, path...), names...)
}
