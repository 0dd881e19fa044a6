package mux

import (
	"context"
	"net"
	"strings"

	"9fans.net/go/plan9"
)

// enter returns a cursor at the root of the mount at path, for f's user,
// dialling the mount first if this client connection has no live
// connection to it.
func (s *session) enter(ctx context.Context, f *fid, path []string, dial func(context.Context) (net.Conn, error)) (cursor, plan9.Qid, error) {
	be, err := s.mount(ctx, path, dial)
	if err != nil {
		return cursor{}, plan9.Qid{}, err
	}
	// A mount's attach name would be the desktop's capability, which
	// means nothing to the server mounted there.
	bfid, q, err := be.root(ctx, f.uname, "")
	if err != nil {
		return cursor{}, plan9.Qid{}, err
	}
	return cursor{be: be, bfid: bfid, path: path, mroot: true}, q, nil
}

// mount returns the live connection to the mount at path, dialling it if
// there is none. Walks that reach it meanwhile wait for the same dial.
// The dial is bounded by HandshakeTimeout, not by ctx: a flushed walk
// stops waiting, and the next one finds the connection made.
func (s *session) mount(ctx context.Context, path []string, dial func(context.Context) (net.Conn, error)) (*backend, error) {
	key := strings.Join(path, "/")
	s.mu.Lock()
	sl := s.mounts[key]
	if sl == nil {
		sl = &slot{}
		s.mounts[key] = sl
	}
	if sl.be != nil && sl.be.alive() {
		s.mu.Unlock()
		return sl.be, nil
	}
	ch := sl.dialing
	if ch == nil {
		ch = make(chan struct{})
		sl.dialing = ch
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			be, err := s.dialMount(path, dial)
			s.mu.Lock()
			if s.ctx.Err() != nil && be != nil {
				// The session ended while dialling: nothing will
				// close it later.
				be.close()
			}
			sl.be, sl.err, sl.dialing = be, err, nil
			s.mu.Unlock()
			close(ch)
		}()
	}
	s.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, errInterrupted
	}
	s.mu.Lock()
	be, err := sl.be, sl.err
	s.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case !be.alive():
		return nil, be.lost()
	}
	return be, nil
}

func (s *session) dialMount(path []string, dial func(context.Context) (net.Conn, error)) (*backend, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.m.timeout())
	defer cancel()
	nc, err := dial(ctx)
	if err != nil {
		return nil, &MountError{Path: path, Err: err}
	}
	be := newBackend(nc, path, s.log, s.m.timeout())
	if err := be.handshake(ctx, s.msize); err != nil {
		be.close()
		return nil, err
	}
	return be, nil
}
