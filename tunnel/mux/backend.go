package mux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"9fans.net/go/plan9"
)

// A MountError reports that a mount cannot be reached: its dial or
// handshake failed, it broke the protocol, or its connection ended.
// Clients see its text, which begins with the mount's path, its elements
// separated by spaces ("host web1: ...").
type MountError struct {
	Path []string
	Err  error
}

func (e *MountError) Error() string { return mountName(e.Path) + ": " + e.Err.Error() }
func (e *MountError) Unwrap() error { return e.Err }

func mountName(path []string) string { return strings.Join(path, " ") }

// A remoteError is an Rerror a server answered: its text goes to the
// client as it came.
type remoteError string

func (e remoteError) Error() string { return string(e) }

// errInterrupted answers a request flushed before its server answered it:
// the text ns answers with, so that ns/client's IsInterrupted sees the
// same through the mux.
var errInterrupted = remoteError("interrupted")

// writeTimeout bounds one write to a server: a server that stops reading
// cannot hold a request, or the mux's write lock, for longer.
const writeTimeout = 30 * time.Second

// A backend is the mux's connection to one server, on behalf of one client
// connection: the local tree, or one mount. Its fids and tags are its own;
// the session maps the client's onto them.
//
// Nothing the server sends is trusted: a reply larger than the msize, one
// that does not parse, answers no request or does not fit its request ends
// the connection, and every request on it fails with the reason.
type backend struct {
	path    []string // the mount point; nil for the local tree
	local   bool
	qmask   uint64 // XORed into a mount's qid paths (see mapQid)
	nc      net.Conn
	br      *bufio.Reader
	log     *slog.Logger
	timeout time.Duration // for a flush's answer

	limit atomic.Uint32 // the largest reply accepted: the msize once negotiated
	msize uint32        // negotiated; set before the backend is shared

	wmu sync.Mutex

	mu      sync.Mutex
	pending map[uint16]*call
	nextTag uint16
	fids    map[uint32]bool
	nextFid uint32
	roots   map[rootKey]*root
	err     error         // why the connection ended
	dead    chan struct{} // closed when it ends
}

// A call is a request awaiting its reply.
type call struct {
	tx *plan9.Fcall
	ch chan *plan9.Fcall // the reply; buffered

	// Under the backend's mu. A flushed request keeps its tag until
	// the flush is answered, even once it has its own reply: the tag may
	// not be reused while the server may still act on the flush.
	flushing bool
	answered bool
	of       *call // of a Tflush: the call it flushes
}

type rootKey struct{ uname, aname string }

// A root is the fid a backend attached for one user: a walk into the
// backend starts from it, and it is never clunked while the backend lives.
type root struct {
	ready chan struct{}
	bfid  uint32
	qid   plan9.Qid
	err   error
}

func newBackend(nc net.Conn, path []string, log *slog.Logger, timeout time.Duration) *backend {
	b := &backend{
		path:    path,
		local:   path == nil,
		nc:      nc,
		br:      bufio.NewReaderSize(nc, 64<<10),
		log:     log,
		timeout: timeout,
		pending: map[uint16]*call{},
		fids:    map[uint32]bool{},
		roots:   map[rootKey]*root{},
		dead:    make(chan struct{}),
	}
	if !b.local {
		h := fnv.New64a()
		h.Write([]byte(strings.Join(path, "/")))
		b.qmask = h.Sum64() | 1 // never 0: a mount's qids always differ from the local tree's
	}
	b.limit.Store(preVersionMax)
	go b.readLoop()
	return b
}

// handshake negotiates msize (at most max) and the protocol, within
// b.timeout.
func (b *backend) handshake(ctx context.Context, max uint32) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	rx, err := b.rpc(ctx, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: max, Version: "9P2000"})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("no answer to Tversion within %v", b.timeout)
			b.fail(err)
			return b.wrap(err)
		}
		return b.wrap(err)
	}
	switch {
	case rx.Version != "9P2000":
		err = fmt.Errorf("speaks %q, not 9P2000", clip(rx.Version, 32))
	case rx.Msize < minMsize:
		err = fmt.Errorf("msize %d is too small", rx.Msize)
	}
	if err != nil {
		b.fail(err)
		return b.wrap(err)
	}
	b.msize = min(rx.Msize, max)
	b.limit.Store(b.msize)
	return nil
}

// wrap names the backend in an error of the mux's own.
func (b *backend) wrap(err error) error {
	var re remoteError
	if errors.As(err, &re) {
		return err
	}
	var me *MountError
	if errors.As(err, &me) {
		return err
	}
	if b.local {
		return fmt.Errorf("mux: the local tree: %w", err)
	}
	return &MountError{Path: b.path, Err: err}
}

// lost is the error of a request on a backend whose connection ended.
func (b *backend) lost() error {
	b.mu.Lock()
	err := b.err
	b.mu.Unlock()
	return b.wrap(fmt.Errorf("connection lost: %w", err))
}

func (b *backend) alive() bool {
	select {
	case <-b.dead:
		return false
	default:
		return true
	}
}

// fail ends the connection for err; every request waiting on it, and every
// later one, fails.
func (b *backend) fail(err error) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return
	}
	b.err = err
	close(b.dead)
	b.mu.Unlock()
	b.nc.Close()
	if !b.local {
		b.log.Info("mux: mount connection ended", "mount", strings.Join(b.path, "/"), "err", err)
	}
}

func (b *backend) close() { b.fail(errors.New("closed")) }

// readLoop takes the server's replies to their callers until the
// connection ends or the server breaks the protocol.
func (b *backend) readLoop() {
	for {
		f, err := readFrame(b.br, b.limit.Load())
		if err != nil {
			b.fail(err)
			return
		}
		rx, err := decode(f)
		if err != nil {
			b.fail(err)
			return
		}
		b.mu.Lock()
		c := b.pending[rx.Tag]
		if c == nil || c.answered {
			b.mu.Unlock()
			b.fail(fmt.Errorf("%w: %s with tag %d answers no request", errMalformed, typeName(rx.Type), rx.Tag))
			return
		}
		if err := fits(c.tx, rx); err != nil {
			b.mu.Unlock()
			b.fail(err)
			return
		}
		if c.flushing {
			c.answered = true
		} else {
			delete(b.pending, rx.Tag)
		}
		if o := c.of; o != nil && b.pending[o.tx.Tag] == o {
			switch {
			case rx.Type == plan9.Rflush || o.answered:
				// The flushed request is over, answered or not: its
				// tag is free again.
				delete(b.pending, o.tx.Tag)
			default:
				// The flush failed: the request goes on, and its
				// reply frees its tag.
				o.flushing = false
			}
		}
		// Under mu, so that whoever sees the call answered finds the
		// reply; each call gets one, so the buffer never fills.
		c.ch <- rx
		b.mu.Unlock()
	}
}

// fits checks that rx can answer tx.
func fits(tx, rx *plan9.Fcall) error {
	if rx.Type == plan9.Rerror {
		return nil
	}
	if rx.Type != tx.Type+1 {
		return fmt.Errorf("%w: %s answers %s", errMalformed, typeName(rx.Type), typeName(tx.Type))
	}
	switch rx.Type {
	case plan9.Rwalk:
		if len(rx.Wqid) > len(tx.Wname) || len(tx.Wname) > 0 && len(rx.Wqid) == 0 {
			return fmt.Errorf("%w: %d qids answer a walk of %d names", errMalformed, len(rx.Wqid), len(tx.Wname))
		}
	case plan9.Rread:
		if len(rx.Data) > int(tx.Count) {
			return fmt.Errorf("%w: %d bytes answer a read of %d", errMalformed, len(rx.Data), tx.Count)
		}
	case plan9.Rwrite:
		if rx.Count > uint32(len(tx.Data)) {
			return fmt.Errorf("%w: %d bytes written of %d", errMalformed, rx.Count, len(tx.Data))
		}
	case plan9.Rstat:
		if _, err := plan9.UnmarshalDir(rx.Stat); err != nil {
			return fmt.Errorf("%w: Rstat: %v", errMalformed, err)
		}
	}
	return nil
}

// send writes tx under a tag of the backend's and returns the call that
// will receive its reply.
func (b *backend) send(tx *plan9.Fcall) (*call, error) { return b.sendFlush(tx, nil) }

// sendFlush is send, for a Tflush of the call of.
func (b *backend) sendFlush(tx *plan9.Fcall, of *call) (*call, error) {
	c := &call{tx: tx, ch: make(chan *plan9.Fcall, 1), of: of}
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return nil, b.lost()
	}
	if of != nil {
		if b.pending[of.tx.Tag] != of || of.answered {
			// Answered already: nothing to flush.
			b.mu.Unlock()
			return nil, nil
		}
		tx.Oldtag = of.tx.Tag
		of.flushing = true
	}
	if tx.Type == plan9.Tversion {
		tx.Tag = plan9.NOTAG
	} else {
		tag, ok := b.freeTagLocked()
		if !ok {
			b.mu.Unlock()
			return nil, b.wrap(errors.New("too many requests in flight"))
		}
		tx.Tag = tag
	}
	f, err := encode(tx)
	if err != nil {
		b.mu.Unlock()
		return nil, b.wrap(err)
	}
	b.pending[tx.Tag] = c
	b.mu.Unlock()

	b.wmu.Lock()
	b.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = b.nc.Write(f)
	b.wmu.Unlock()
	if err != nil {
		b.fail(err)
	}
	return c, nil
}

func (b *backend) freeTagLocked() (uint16, bool) {
	for range 1 << 16 {
		b.nextTag++
		if b.nextTag == plan9.NOTAG {
			b.nextTag = 0
		}
		if _, busy := b.pending[b.nextTag]; !busy {
			return b.nextTag, true
		}
	}
	return 0, false
}

// rpc sends tx and waits for its reply. When ctx ends first it flushes
// the request and waits for the server to confirm (a reply that came
// meanwhile is returned); a server that does not within b.timeout is cut
// off. An Rerror is returned as a remoteError.
func (b *backend) rpc(ctx context.Context, tx *plan9.Fcall) (*plan9.Fcall, error) {
	c, err := b.send(tx)
	if err != nil {
		return nil, err
	}
	select {
	case rx := <-c.ch:
		return result(rx)
	case <-b.dead:
		return b.late(c)
	case <-ctx.Done():
	}
	if tx.Type == plan9.Tversion {
		// Tversion cannot be flushed.
		return nil, ctx.Err()
	}
	fc, err := b.sendFlush(&plan9.Fcall{Type: plan9.Tflush}, c)
	if err != nil || fc == nil {
		return b.late(c)
	}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	var reply *plan9.Fcall
	for {
		select {
		case rx := <-c.ch:
			reply = rx // the Rflush follows
		case <-fc.ch:
			select {
			case rx := <-c.ch:
				reply = rx
			default:
			}
			if reply != nil {
				return result(reply)
			}
			return nil, errInterrupted
		case <-b.dead:
			if reply != nil {
				return result(reply)
			}
			return b.late(c)
		case <-t.C:
			b.fail(fmt.Errorf("no answer to a flush within %v", b.timeout))
			return nil, b.lost()
		}
	}
}

// late is the answer of a call whose connection ended: its reply, if it
// came just before, else the loss.
func (b *backend) late(c *call) (*plan9.Fcall, error) {
	select {
	case rx := <-c.ch:
		return result(rx)
	default:
		return nil, b.lost()
	}
}

func result(rx *plan9.Fcall) (*plan9.Fcall, error) {
	if rx.Type == plan9.Rerror {
		return nil, remoteError(rx.Ename)
	}
	return rx, nil
}

// newFid reserves a fid number of the backend's.
func (b *backend) newFid() uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		b.nextFid++
		if b.nextFid == plan9.NOFID {
			b.nextFid = 0
		}
		if !b.fids[b.nextFid] {
			b.fids[b.nextFid] = true
			return b.nextFid
		}
	}
}

func (b *backend) freeFid(bfid uint32) {
	b.mu.Lock()
	delete(b.fids, bfid)
	b.mu.Unlock()
}

// clunk lets go of bfid, in the background: the caller does not wait for
// a fid it no longer needs. The number is reused only once the server has
// answered.
func (b *backend) clunk(bfid uint32) {
	if !b.alive() {
		b.freeFid(bfid)
		return
	}
	go func() {
		_, err := b.rpc(context.Background(), &plan9.Fcall{Type: plan9.Tclunk, Fid: bfid})
		var re remoteError
		if err == nil || errors.As(err, &re) {
			b.freeFid(bfid)
		}
	}()
}

// root returns the backend's fid at its root for uname, attaching it the
// first time it is asked for. The attach does not end with ctx (others may
// wait for it) but with b.timeout; a server that does not answer by then
// is cut off.
func (b *backend) root(ctx context.Context, uname, aname string) (uint32, plan9.Qid, error) {
	k := rootKey{uname, aname}
	b.mu.Lock()
	r := b.roots[k]
	if r == nil {
		r = &root{ready: make(chan struct{})}
		b.roots[k] = r
		go b.attach(r, uname, aname)
	}
	b.mu.Unlock()
	select {
	case <-r.ready:
	case <-ctx.Done():
		return 0, plan9.Qid{}, errInterrupted
	}
	// A failed attach is forgotten (see attach): the next walk tries again.
	return r.bfid, r.qid, r.err
}

func (b *backend) attach(r *root, uname, aname string) {
	defer close(r.ready)
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	bfid := b.newFid()
	rx, err := b.rpc(ctx, &plan9.Fcall{Type: plan9.Tattach, Fid: bfid, Afid: plan9.NOFID, Uname: uname, Aname: aname})
	if err != nil {
		b.freeFid(bfid)
		if ctx.Err() != nil && b.alive() {
			b.fail(fmt.Errorf("no answer to Tattach within %v", b.timeout))
			err = b.lost()
		}
		r.err = b.wrap(err)
		b.mu.Lock()
		delete(b.roots, rootKey{uname, aname})
		b.mu.Unlock()
		return
	}
	r.bfid, r.qid = bfid, b.mapQid(rx.Qid)
}

// mapQid makes a mount's qid unique in the mux's namespace: its path is
// XORed with a value drawn from the mount point, so that two hosts
// serving the same tree, or a host and the local tree, do not show the
// same qid for different files (a mounted file system takes qid paths for
// inode numbers, and find and du take equal ones for the same file). XOR
// keeps qids unique within the mount.
func (b *backend) mapQid(q plan9.Qid) plan9.Qid {
	q.Path = b.mapPath(q.Path)
	return q
}

func (b *backend) mapPath(p uint64) uint64 { return p ^ b.qmask }

// clip cuts s to n bytes, for a peer's text in an error.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
