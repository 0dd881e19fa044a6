package resume

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns/ninep"
)

// errFatal marks a failure to resume that no further reconnect can fix:
// the client's session ends.
var errFatal = errors.New("resume: session cannot be resumed")

// window is how many replay requests are in flight at once: enough to
// hide the round trip, well under ns's per-connection request limit.
const window = 32

// A restore is the replay of one fid.
type restore struct {
	f    *fid // the table entry, to tell it is still the same afterwards
	num  uint32
	root uint32 // a temporary fid attached as f's uname and aname
	path []string
	ok   bool // so far
	made bool // the server holds num: clunk it if the replay fails
	why  string
}

// resume makes nc the session's link: it negotiates the client's msize,
// rebuilds the fids, then sends every request waiting for a reply.
func (s *session) resume(nc net.Conn) (*link, error) {
	l := &link{nc: nc, fr: newFrameReader(nc), bw: bufio.NewWriterSize(nc, writeBufSize), limit: preVersionMax}
	// A server that accepts and then says nothing is a failed
	// connection. A timer closes it: an SSH channel has no deadlines.
	replayTimeout := 3 * s.p.handshakeTimeout()
	var late atomic.Bool
	timer := time.AfterFunc(replayTimeout, func() {
		late.Store(true)
		nc.Close()
	})
	defer timer.Stop()
	lateErr := func(err error) error {
		if late.Load() {
			return fmt.Errorf("resume: replay: no answer within %v", replayTimeout)
		}
		return err
	}
	var plan []*restore
	if msize := s.msize.Load(); msize != 0 {
		rx, err := l.rpcs([]*plan9.Fcall{{Type: plan9.Tversion, Msize: msize, Version: "9P2000"}})
		if err != nil {
			return nil, lateErr(err)
		}
		switch v := rx[0]; {
		case v.Type == plan9.Rerror:
			return nil, fmt.Errorf("%w: Tversion: %s", errFatal, v.Ename)
		case v.Type != plan9.Rversion || v.Version != "9P2000":
			return nil, fmt.Errorf("%w: server answered Tversion with %v", errFatal, v)
		case v.Msize < msize:
			// A read in flight may already be sized for the old msize.
			return nil, fmt.Errorf("%w: server lowered msize from %d to %d", errFatal, msize, v.Msize)
		}
		l.limit = msize
		plan = s.plan()
		if err := l.replay(plan); err != nil {
			return nil, lateErr(err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, errors.New("resume: session ended")
	}
	// The client may have clunked fids while they were being replayed.
	// The server must forget them before a queued request reuses the
	// number; mu, held, keeps the table still meanwhile.
	var orphans []*plan9.Fcall
	for _, rs := range plan {
		if rs.ok && s.fids[rs.num] != rs.f {
			orphans = append(orphans, &plan9.Fcall{Type: plan9.Tclunk, Fid: rs.num})
		}
	}
	if len(orphans) > 0 {
		if _, err := l.rpcs(orphans); err != nil {
			return nil, lateErr(err)
		}
	}
	if !timer.Stop() {
		return nil, lateErr(net.ErrClosed)
	}
	s.gen++
	l.gen = s.gen
	for _, rs := range plan {
		if s.fids[rs.num] != rs.f {
			continue
		}
		if rs.ok {
			rs.f.gen = l.gen
		} else {
			rs.f.lost = true
			s.log.Info("resume: fid cannot be restored", "fid", rs.num, "path", pathString(rs.path), "why", rs.why)
		}
	}
	var out [][]byte
	for _, r := range s.sortedPendingLocked() {
		if fd := s.fids[r.fid]; ninep.UsesFid(r.typ) && fd != nil && fd.lost {
			out = append(out, s.lostReplyLocked(r.typ, r.tag, r.fid))
			s.retireLocked(r)
			continue
		}
		if r.typ == plan9.Tversion {
			l.expect(s.p.handshakeTimeout())
		}
		l.bw.Write(r.frame)
		r.gen = l.gen
		if !resendable(r.typ) {
			r.frame = r.frame[:0]
		}
	}
	if len(out) > 0 {
		s.answerLocked(out...)
	}
	if err := l.bw.Flush(); err != nil {
		// Leave the requests on l: relay fails at once and drop sees them.
		s.log.Debug("resume: write failed", "err", err)
	}
	s.link = l
	s.p.state("connected")
	return l, nil
}

// plan lists the fids to replay, in creation order, and picks a temporary
// root fid for each attach (uname, aname) among them.
func (s *session) plan() []*restore {
	s.mu.Lock()
	defer s.mu.Unlock()
	roots := map[[2]string]uint32{}
	next := uint32(plan9.NOFID - 1)
	var plan []*restore
	for num, fd := range s.fids {
		if fd.lost {
			continue
		}
		if fd.written || fd.auth {
			fd.lost = true
			continue
		}
		key := [2]string{fd.uname, fd.aname}
		root, ok := roots[key]
		if !ok {
			for s.fids[next] != nil {
				next--
			}
			root = next
			next--
			roots[key] = root
		}
		plan = append(plan, &restore{f: fd, num: num, root: root, path: fd.path, ok: true})
	}
	slices.SortFunc(plan, func(a, b *restore) int { return cmp.Compare(a.f.seq, b.f.seq) })
	return plan
}

// replay rebuilds the fids of plan on l in four pipelined rounds: attach
// the roots, walk from them (in steps of at most MAXWELEM names), open,
// and clunk the roots and whatever failed half way. It returns an error
// only when the connection fails; a fid that cannot be rebuilt is marked
// in its restore.
func (l *link) replay(plan []*restore) error {
	type attach struct {
		uname, aname string
		ok           bool
		why          string
	}
	roots := map[uint32]*attach{}
	var order []uint32
	for _, rs := range plan {
		if roots[rs.root] == nil {
			roots[rs.root] = &attach{uname: rs.f.uname, aname: rs.f.aname}
			order = append(order, rs.root)
		}
	}
	var tx []*plan9.Fcall
	for _, num := range order {
		a := roots[num]
		tx = append(tx, &plan9.Fcall{Type: plan9.Tattach, Fid: num, Afid: plan9.NOFID, Uname: a.uname, Aname: a.aname})
	}
	rx, err := l.rpcs(tx)
	if err != nil {
		return err
	}
	for i, num := range order {
		a := roots[num]
		if a.ok = rx[i].Type == plan9.Rattach; !a.ok {
			a.why = "attach: " + replyError(rx[i])
		}
	}
	for _, rs := range plan {
		if a := roots[rs.root]; !a.ok {
			rs.ok, rs.why = false, a.why
		}
	}

	for step := 0; ; step++ {
		var tx []*plan9.Fcall
		var who []*restore
		for _, rs := range plan {
			lo := step * plan9.MAXWELEM
			if !rs.ok || step > 0 && lo >= len(rs.path) {
				continue
			}
			from := rs.num
			if step == 0 {
				from = rs.root
			}
			names := rs.path[lo:min(lo+plan9.MAXWELEM, len(rs.path))]
			tx = append(tx, &plan9.Fcall{Type: plan9.Twalk, Fid: from, Newfid: rs.num, Wname: names})
			who = append(who, rs)
		}
		if len(tx) == 0 {
			break
		}
		rx, err := l.rpcs(tx)
		if err != nil {
			return err
		}
		for i, rs := range who {
			switch {
			case rx[i].Type != plan9.Rwalk:
				rs.ok, rs.why = false, "walk: "+replyError(rx[i])
			case len(rx[i].Wqid) < len(tx[i].Wname):
				rs.ok, rs.why = false, "walk: "+pathString(rs.path)+": file does not exist"
			default:
				rs.made = true
			}
		}
	}

	tx, who := nil, []*restore(nil)
	for _, rs := range plan {
		if rs.ok && rs.f.open {
			// The truncation, if any, happened at the first open.
			tx = append(tx, &plan9.Fcall{Type: plan9.Topen, Fid: rs.num, Mode: rs.f.mode &^ plan9.OTRUNC})
			who = append(who, rs)
		}
	}
	if rx, err = l.rpcs(tx); err != nil {
		return err
	}
	for i, rs := range who {
		if rx[i].Type != plan9.Ropen {
			rs.ok, rs.why = false, "open: "+replyError(rx[i])
		}
	}

	tx = nil
	for _, num := range order {
		if roots[num].ok {
			tx = append(tx, &plan9.Fcall{Type: plan9.Tclunk, Fid: num})
		}
	}
	for _, rs := range plan {
		if !rs.ok && rs.made {
			tx = append(tx, &plan9.Fcall{Type: plan9.Tclunk, Fid: rs.num})
		}
	}
	_, err = l.rpcs(tx)
	return err
}

func replyError(f *plan9.Fcall) string {
	if f.Type == plan9.Rerror {
		return f.Ename
	}
	return fmt.Sprintf("unexpected %v", f)
}

// rpcs sends tx, at most window at a time, and returns the replies in the
// same order. Tags are assigned here; nothing else is in flight on l.
func (l *link) rpcs(tx []*plan9.Fcall) ([]*plan9.Fcall, error) {
	rx := make([]*plan9.Fcall, len(tx))
	inflight := map[uint16]int{}
	sent, got := 0, 0
	for got < len(tx) {
		for sent < len(tx) && sent-got < window {
			f := tx[sent]
			f.Tag = uint16(sent % int(plan9.NOTAG))
			if f.Type == plan9.Tversion {
				f.Tag = plan9.NOTAG
			}
			if err := plan9.WriteFcall(l.bw, f); err != nil {
				return nil, err
			}
			inflight[f.Tag] = sent
			sent++
		}
		if err := l.bw.Flush(); err != nil {
			return nil, err
		}
		// Through the frame reader: plan9.ReadFcall would allocate
		// whatever size a server claims.
		b, err := l.fr.next(l.limit)
		if err != nil {
			return nil, err
		}
		f, err := plan9.UnmarshalFcall(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errMisbehaving, err)
		}
		i, ok := inflight[f.Tag]
		if !ok {
			return nil, fmt.Errorf("resume: replay: reply to unknown tag %d", f.Tag)
		}
		delete(inflight, f.Tag)
		rx[i] = f
		got++
	}
	return rx, nil
}
