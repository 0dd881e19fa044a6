package mux

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"

	"9fans.net/go/plan9"
)

// A cursor is where a walk has got to: a fid of one backend, and its path.
type cursor struct {
	be    *backend
	bfid  uint32
	own   bool // made by this walk: clunked unless it becomes the new fid
	path  []string
	mroot bool
}

func (c cursor) release() {
	if c.own {
		c.be.clunk(c.bfid)
	}
}

// walk answers a Twalk. The names are taken in runs that stay on one
// backend, each run one walk there; a name that reaches a mount point
// ends the local run and starts from the mount's root, and ".." starts
// again from the root, lexically (see the package documentation).
func (s *session) walk(ctx context.Context, m *plan9.Fcall, f *fid) (*plan9.Fcall, error) {
	s.mu.Lock()
	want := s.fids[m.Newfid] // the reservation, or f itself
	s.mu.Unlock()
	qids, end, err := s.walkFrom(ctx, f, m.Wname)
	if err != nil || len(qids) < len(m.Wname) {
		if m.Newfid != m.Fid {
			s.unreserve(m.Newfid)
		}
		if err != nil {
			return nil, err
		}
		return &plan9.Fcall{Type: plan9.Rwalk, Wqid: qids}, nil
	}
	nf := &fid{be: end.be, bfid: end.bfid, path: end.path, mroot: end.mroot, uname: f.uname, aname: f.aname}
	if !s.setFid(m.Newfid, want, nf) {
		// Clunked meanwhile (a walk of a fid to itself).
		end.release()
	} else if m.Newfid == m.Fid {
		f.be.clunk(f.bfid)
	}
	return &plan9.Fcall{Type: plan9.Rwalk, Wqid: qids}, nil
}

// walkFrom walks names from f. It returns the qids of the names walked
// and, when it walked them all, a cursor that the caller owns. A walk
// that fails in a server after its first name is partial (fewer qids, no
// error), as 9P has it; a mount that cannot be reached is an error
// wherever it comes, so that the client learns why.
func (s *session) walkFrom(ctx context.Context, f *fid, names []string) ([]plan9.Qid, cursor, error) {
	cur := cursor{be: f.be, bfid: f.bfid, path: f.path, mroot: f.mroot}
	var qids []plan9.Qid
	var run []string

	// step walks run from cur; done is false when the server walked
	// only part of it.
	step := func() (done bool, err error) {
		be := cur.be
		nb := be.newFid()
		rx, err := be.rpc(ctx, &plan9.Fcall{Type: plan9.Twalk, Fid: cur.bfid, Newfid: nb, Wname: run})
		if err != nil {
			be.freeFid(nb)
			return false, err
		}
		for _, q := range rx.Wqid {
			if !be.local {
				q = be.mapQid(q)
			}
			qids = append(qids, q)
		}
		if len(rx.Wqid) < len(run) {
			be.freeFid(nb)
			return false, nil
		}
		cur.release()
		cur = cursor{be: be, bfid: nb, own: true, path: appendPath(cur.path, run...), mroot: cur.mroot && len(run) == 0}
		run = nil
		return true, nil
	}
	// stop ends the walk early. A server's own answer after the first
	// name makes a partial walk; anything else is the walk's error.
	stop := func(err error) ([]plan9.Qid, cursor, error) {
		cur.release()
		var re remoteError
		partial := err == nil || errors.As(err, &re) && err != errInterrupted
		switch {
		case partial && len(qids) > 0:
			return qids, cursor{}, nil
		case err == nil:
			err = errors.New("mux: walk failed")
		}
		return nil, cursor{}, err
	}

	for _, name := range names {
		var dial func(context.Context) (net.Conn, error)
		switch {
		case name == "..":
		case cur.be.local && s.m.Mount != nil:
			p := appendPath(cur.path, run...)
			p = append(p, name)
			if d, ok := s.m.Mount(slices.Clone(p)); ok && d != nil {
				dial = d
			}
		}
		if name != ".." && dial == nil {
			if len(run) == plan9.MAXWELEM {
				if done, err := step(); !done {
					return stop(err)
				}
			}
			run = append(run, name)
			continue
		}
		if len(run) > 0 {
			if done, err := step(); !done {
				return stop(err)
			}
		}
		var next cursor
		var q plan9.Qid
		var err error
		if name == ".." {
			next, q, err = s.parent(ctx, f, cur.path)
		} else {
			next, q, err = s.enter(ctx, f, appendPath(cur.path, name), dial)
		}
		if err != nil {
			return stop(err)
		}
		cur.release()
		cur = next
		qids = append(qids, q)
	}
	if len(run) > 0 || !cur.own {
		// What is left, or a fid of the walk's own where it ended on a
		// root it shares (a clone).
		if done, err := step(); !done {
			return stop(err)
		}
	}
	return qids, cur, nil
}

// parent returns a cursor at the parent of path, walked from the local
// root, and its qid.
func (s *session) parent(ctx context.Context, f *fid, path []string) (cursor, plan9.Qid, error) {
	up := path[:max(len(path)-1, 0)]
	bfid, q, err := s.local.root(ctx, f.uname, f.aname)
	if err != nil {
		return cursor{}, plan9.Qid{}, err
	}
	root := &fid{be: s.local, bfid: bfid, uname: f.uname, aname: f.aname}
	if len(up) == 0 {
		return cursor{be: s.local, bfid: bfid}, q, nil
	}
	qids, c, err := s.walkFrom(ctx, root, up)
	if err == nil && len(qids) < len(up) {
		err = remoteError("mux: " + strings.Join(up, "/") + ": no longer exists")
	}
	if err != nil {
		return cursor{}, plan9.Qid{}, err
	}
	return c, qids[len(qids)-1], nil
}
