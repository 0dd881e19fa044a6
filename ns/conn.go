package ns

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"9fans.net/go/plan9"

	"ollie/ns/stream"
)

// conn is one 9P conversation.
type conn struct {
	srv    *Server
	peer   Peer
	rwc    io.ReadWriteCloser
	guard  *guard
	ctx    context.Context // ends when the connection or server does
	cancel context.CancelCauseFunc
	fids   atomic.Int64 // fids attached or walked to, and places reserved for them

	mu       sync.Mutex
	logged   limit          // limits whose refusal has been logged
	closing  bool           // set by drain: no handler starts after it
	inflight sync.WaitGroup // handlers running
	ended    chan struct{}  // closed when the loop stops reading requests

	trace    io.Writer // Server.Trace without the data of writes, or nil
	fmu      sync.Mutex
	fidTab   map[uint32]*fid     // nil once the connection has ended
	rmu      sync.Mutex          // guards reqs
	reqs     map[uint16]*request // requests running in goroutines, by tag
	wmu      sync.Mutex          // serialises replies with the tags leaving reqs
	stopped  atomic.Bool         // the loop has ended: replies are dropped
	loopDone chan struct{}       // closed when the loop has ended
}

// fidState is what a fid refers to, kept in fid.st.
type fidState struct {
	who  principal
	path []elem

	// Set by open.
	lock   chan struct{} // serialises blocking reads and writes on the fid
	data   []byte        // snapshot, wait result or rdwr response
	have   bool          // data holds a wait result or an rdwr response
	pos    int           // sequential read position in data (rdwr, subscription)
	stream *stream.Stream
	src    Source
	once   bool // a subscription opened for reading only ends after one item
	done   bool
	dir    []plan9.Dir

	// Requests on one fid may run concurrently, and a Tread gets
	// through on a fid never opened (its mode, -1, passes as OEXEC, as
	// srv9p let it, which served ns before its own loop). So
	// open claims the fid with opening while it fills in the fields above,
	// and sets opened once they are ready; nothing else reads them before.
	opening atomic.Bool
	opened  atomic.Bool
	mu      sync.Mutex
	onClunk []func()
}

func (st *fidState) tail() elem { return st.path[len(st.path)-1] }

func (st *fidState) call() *Call {
	return &Call{User: st.who.user, Admin: st.who.admin, path: st.path, fid: st}
}

// acquire takes the fid's lock unless ctx ends first.
func (st *fidState) acquire(ctx context.Context) error {
	select {
	case st.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return errInterrupted
	}
}

func (st *fidState) release() { <-st.lock }

// interruption is the answer to a request cut short by ctx's end: a
// shutdown says so, anything else (a flush, a closed connection) is a
// plain interruption.
func interruption(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), ErrServerClosed) {
		return errShuttingDown
	}
	return errInterrupted
}

// begin starts a request's handler under ctx (the request's own, or the
// connection's for a request answered on the loop's goroutine), and
// turns a handler panic into an error. It refuses once the connection is
// draining: a request in a goroutine of its own may start after its
// connection has ended.
func (c *conn) begin(ctx context.Context) (context.Context, func(*error), error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, nil, interruption(c.ctx)
	}
	c.inflight.Add(1)
	c.mu.Unlock()
	return ctx, func(errp *error) {
		if r := recover(); r != nil {
			c.srv.Log.Error("ns: handler panic", "panic", r, "stack", string(debug.Stack()))
			*errp = errors.New("ns: internal error")
		}
		if *errp != nil && ctx.Err() != nil {
			*errp = interruption(ctx)
		}
		if *errp != nil {
			*errp = fitError(*errp, c.guard.msizeNow())
		}
		c.inflight.Done()
	}, nil
}

// refused logs the first refusal by each limit on the connection, with
// what the transport knows of the peer: one line per connection, not one
// per message, however often the client runs into the limit.
func (c *conn) refused(what limit, err error) {
	c.mu.Lock()
	first := c.logged&what == 0
	c.logged |= what
	c.mu.Unlock()
	if first {
		c.srv.Log.Warn("ns: refused", "err", err, "peer", c.peer.Kind.String(), "pid", c.peer.PID, "uid", c.peer.UID)
	}
}

// reserveFid takes a place for one more fid on the connection and its
// peer kind, or returns the limit in the way. A place is taken before the
// walk or attach that needs it runs, so that requests in flight together
// cannot all pass a check of the count and overshoot it.
func (c *conn) reserveFid() error {
	if !reserve(&c.fids, c.srv.MaxFids) {
		err := &LimitError{What: "fids", Limit: c.srv.MaxFids}
		c.refused(limitFids, err)
		return err
	}
	if !reserve(&c.srv.kindFids[c.peer.Kind], c.srv.MaxKindFids) {
		c.fids.Add(-1)
		err := &LimitError{What: "fids held by " + c.peer.Kind.String() + " connections", Limit: c.srv.MaxKindFids}
		c.refused(limitKindFids, err)
		return err
	}
	return nil
}

// releaseFid gives back a place taken by reserveFid.
func (c *conn) releaseFid() {
	c.fids.Add(-1)
	c.srv.kindFids[c.peer.Kind].Add(-1)
}

// reserve adds one to n unless that would take it past most.
func reserve(n *atomic.Int64, most int) bool {
	for {
		v := n.Load()
		if v >= int64(most) {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// drain stops handlers from starting and waits for those running.
func (c *conn) drain() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.inflight.Wait()
}

// fitError clips err's text so that the Rerror carrying it fits in msize
// and in a 9P string. Errors often name what the client sent (a walked
// name), and a reply longer than msize is dropped, leaving the client
// waiting, and plan9 cannot encode a string of 64 KiB or more.
func fitError(err error, msize uint32) error {
	const rerrorHeader = 4 + 1 + 2 + 2 // size, type, tag, ename length
	limit := min(int(msize)-rerrorHeader, 1<<16-1)
	msg := err.Error()
	if len(msg) <= limit {
		return err
	}
	cut := limit - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return &clippedError{msg: msg[:cut] + "...", err: err}
}

type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

func state(fid *fid) (*fidState, error) {
	st := fid.st.Load()
	if st == nil {
		return nil, errors.New("ns: fid not attached")
	}
	return st, nil
}

func (c *conn) attach(rctx context.Context, fid *fid, user, aname string) (_ plan9.Qid, err error) {
	_, end, err := c.begin(rctx)
	if err != nil {
		return plan9.Qid{}, err
	}
	defer end(&err)
	if err := c.reserveFid(); err != nil {
		return plan9.Qid{}, err
	}
	reserved := true
	defer func() { // before end, so also when a panic unwinds
		if reserved {
			c.releaseFid()
		}
	}()
	if c.srv.CheckAttach != nil {
		if err := c.srv.CheckAttach(user, aname); err != nil {
			return plan9.Qid{}, err
		}
	}
	who := c.srv.principalFor(c.peer, user, aname)
	root := c.srv.Tree.Root
	st := &fidState{who: who, path: []elem{{node: root, owner: root.Owner, group: root.Group}}}
	fid.st.Store(st)
	reserved = false // clunk gives the place back
	return qidOf(st.path), nil
}

func (c *conn) clunk(fid *fid) {
	st := fid.st.Load()
	if st == nil {
		return
	}
	c.releaseFid()
	if st.src != nil {
		st.src.Close()
	}
	st.mu.Lock()
	fns := st.onClunk
	st.onClunk = nil
	st.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// qidOf returns the qid of the file at the end of p. Static files use
// their declaration index; files under dynamic directories hash the keys
// in, so a name and its alias give the same qid.
func qidOf(p []elem) plan9.Qid {
	e := p[len(p)-1]
	q := plan9.Qid{Path: e.node.index}
	if e.node.dir {
		q.Type = plan9.QTDIR
	}
	var h = fnv.New64a()
	dynamic := false
	for _, x := range p {
		if x.node.Each != nil {
			dynamic = true
			fmt.Fprintf(h, "%d\x00%s\x00", x.node.index, x.entry.Key)
		}
	}
	if dynamic {
		fmt.Fprintf(h, "%d", e.node.index)
		q.Path = h.Sum64() | 1<<63
	}
	return q
}

func (c *conn) walk(rctx context.Context, fid, newfid *fid, names []string) (_ []plan9.Qid, err error) {
	ctx, end, err := c.begin(rctx)
	if err != nil {
		return nil, err
	}
	defer end(&err)
	st, err := state(fid)
	if err != nil {
		return nil, err
	}
	reserved := false
	if fid != newfid {
		if err := c.reserveFid(); err != nil {
			return nil, err
		}
		reserved = true
		defer func() { // before end, so also when a panic unwinds
			if reserved {
				c.releaseFid()
			}
		}()
	}
	path := slices.Clone(st.path)
	var qids []plan9.Qid
	for i, name := range names {
		cur := path[len(path)-1]
		if !cur.node.dir {
			break
		}
		if !st.who.mayElem(cur, aExec) {
			if i == 0 {
				return nil, fmt.Errorf("%s: permission denied", displayPath(path))
			}
			break
		}
		next, ok := c.step(ctx, st, path, name)
		if !ok {
			if i == 0 {
				return nil, fmt.Errorf("%s: file does not exist", joinPath(displayPath(path), name))
			}
			break
		}
		path = next
		qids = append(qids, qidOf(path))
	}
	if len(qids) == len(names) {
		newfid.st.Store(&fidState{who: st.who, path: path})
		reserved = false // clunk gives the place back
	}
	return qids, nil
}

// step walks one name from the directory at the end of path.
func (c *conn) step(ctx context.Context, st *fidState, path []elem, name string) ([]elem, bool) {
	cur := path[len(path)-1]
	switch name {
	case "..":
		if len(path) == 1 {
			return path, true
		}
		return path[:len(path)-1], true
	case ".", "":
		return nil, false
	}
	if n := cur.node.staticChild(name); n != nil {
		return append(path, child(cur, n)), true
	}
	if d := cur.node.dynamicChild(); d != nil {
		call := &Call{User: st.who.user, Admin: st.who.admin, path: path}
		if ent, ok := d.Each.Lookup(ctx, call, name); ok {
			return append(path, instance(cur, d, ent)), true
		}
	}
	return nil, false
}

func displayPath(p []elem) string {
	if s := pathString(p); s != "" {
		return s
	}
	return "/"
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return name
	}
	return dir + "/" + name
}

func (c *conn) open(rctx context.Context, fid *fid, mode uint8) (err error) {
	st, err := state(fid)
	if err != nil {
		return err
	}
	if !st.opening.CompareAndSwap(false, true) {
		return errors.New("duplicate open")
	}
	defer func() { // after end, which may turn a panic into err
		if err != nil {
			st.opening.Store(false)
		} else {
			st.opened.Store(true)
		}
	}()
	ctx, end, err := c.begin(rctx)
	if err != nil {
		return err
	}
	defer end(&err)
	e := st.tail()
	n := e.node
	where := displayPath(st.path)
	var want int
	reading, writing := false, false
	switch mode & 3 {
	case plan9.OREAD:
		want, reading = aRead, true
	case plan9.OWRITE:
		want, writing = aWrite, true
	case plan9.ORDWR:
		want, reading, writing = aRead|aWrite, true, true
	case plan9.OEXEC:
		want, reading = aExec, true
	}
	if mode&plan9.OTRUNC != 0 {
		want |= aWrite
	}
	if mode&plan9.ORCLOSE != 0 {
		return fmt.Errorf("%s: remove on close prohibited", where)
	}
	if !st.who.mayElem(e, want) {
		return fmt.Errorf("%s: permission denied", where)
	}
	fid.iounit.Store(c.guard.msizeNow() - plan9.IOHDRSZ)
	st.lock = make(chan struct{}, 1)
	call := st.call()
	if n.dir {
		st.dir, err = c.list(ctx, st)
		return err
	}
	if reading && n.Read == nil && n.Stream == nil && n.Wait == nil && n.Subscribe == nil && n.RdWr == nil {
		return fmt.Errorf("%s: file is write-only", where)
	}
	if writing && n.Write == nil && n.RdWr == nil && n.Subscribe == nil {
		return fmt.Errorf("%s: file is read-only", where)
	}
	if n.RdWr != nil && !writing {
		return fmt.Errorf("%s: request file: open it for writing, write a request, then read the reply", where)
	}
	switch {
	case !reading:
	case n.Read != nil:
		st.data, err = n.Read(ctx, call)
	case n.Stream != nil:
		st.stream, err = n.Stream(ctx, call)
	case n.Subscribe != nil && n.Wait == nil && !writing:
		// Subscribe at open so that nothing between open and read is missed.
		st.src, err = n.Subscribe(ctx, call, nil)
		st.once = true
	}
	return err
}

// list snapshots the entries of the directory at the end of st.path.
func (c *conn) list(ctx context.Context, st *fidState) ([]plan9.Dir, error) {
	cur := st.tail()
	var dirs []plan9.Dir
	for _, n := range cur.node.Children {
		if n.Each != nil {
			continue
		}
		p := append(slices.Clone(st.path), child(cur, n))
		dirs = append(dirs, c.dirOf(p, n.Name))
	}
	if d := cur.node.dynamicChild(); d != nil {
		ents, err := d.Each.List(ctx, st.call())
		if err != nil {
			return nil, err
		}
		for _, ent := range ents {
			p := append(slices.Clone(st.path), instance(cur, d, ent))
			dirs = append(dirs, c.dirOf(p, ent.Name))
		}
	}
	return dirs, nil
}

func (c *conn) dirOf(p []elem, name string) plan9.Dir {
	e := p[len(p)-1]
	t := uint32(c.srv.started.Unix())
	return plan9.Dir{
		Name:  name,
		Qid:   qidOf(p),
		Mode:  e.node.Mode,
		Uid:   e.owner,
		Gid:   e.group,
		Muid:  e.owner,
		Atime: t,
		Mtime: t,
	}
}

// read returns what a Tread of count bytes at offset answers. The bytes
// are the file's own where it has them (a Read snapshot, a stream, a
// reply or item a handler returned), which nothing changes once they are
// handed out, so they go to the connection without a copy.
func (c *conn) read(rctx context.Context, fid *fid, count int, offset int64) (_ []byte, err error) {
	ctx, end, err := c.begin(rctx)
	if err != nil {
		return nil, err
	}
	defer end(&err)
	st, err := state(fid)
	if err != nil {
		return nil, err
	}
	if !st.opened.Load() {
		return nil, fmt.Errorf("%s: not open for read", displayPath(st.path))
	}
	n := st.tail().node
	switch {
	case n.dir:
		return readDir(fid, count, offset, st.dir)
	case st.stream != nil:
		b, err := st.stream.Bytes(ctx, offset, count)
		if err == io.EOF {
			return nil, nil
		}
		return b, err
	case n.Read != nil:
		return byOffset(st.data, offset, count), nil
	}
	if err := st.acquire(ctx); err != nil {
		return nil, err
	}
	defer st.release()
	switch {
	case n.RdWr != nil:
		if !st.have {
			return nil, fmt.Errorf("%s: write a request before reading the reply", displayPath(st.path))
		}
		return st.next(count), nil
	case n.Wait != nil && st.src == nil:
		if !st.have {
			st.data, err = n.Wait(ctx, st.call())
			if err != nil {
				return nil, err
			}
			st.have = true
		}
		return byOffset(st.data, offset, count), nil
	case n.Subscribe != nil:
		if st.src == nil {
			// Read before any filter was written: everything.
			if st.src, err = n.Subscribe(ctx, st.call(), nil); err != nil {
				return nil, err
			}
		}
		if st.pos >= len(st.data) {
			if st.done {
				return nil, nil
			}
			item, err := st.src.Next(ctx)
			if err == io.EOF {
				st.done = true
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			st.data, st.pos, st.done = item, 0, st.once
		}
		return st.next(count), nil
	}
	return nil, fmt.Errorf("%s: file is write-only", displayPath(st.path))
}

// byOffset returns up to count bytes of data from offset on.
func byOffset(data []byte, offset int64, count int) []byte {
	if offset < 0 || offset >= int64(len(data)) {
		return nil
	}
	data = data[offset:]
	return data[:min(len(data), count)]
}

// next returns up to count unread bytes of st.data, sequentially.
func (st *fidState) next(count int) []byte {
	b := st.data[st.pos:]
	b = b[:min(len(b), count)]
	st.pos += len(b)
	return b
}

func (c *conn) write(rctx context.Context, fid *fid, data []byte) (_ int, err error) {
	ctx, end, err := c.begin(rctx)
	if err != nil {
		return 0, err
	}
	defer end(&err)
	st, err := state(fid)
	if err != nil {
		return 0, err
	}
	n := st.tail().node
	if err := st.acquire(ctx); err != nil {
		return 0, err
	}
	defer st.release()
	// Handlers may keep what they are given: the Twrite's data is a
	// slice of its frame, which nothing reuses, but a copy keeps that a
	// property of this function rather than of the loop.
	data = slices.Clone(data)
	switch {
	case n.RdWr != nil:
		resp, err := n.RdWr(ctx, st.call(), data)
		if err != nil {
			st.data, st.have = nil, false
			return 0, err
		}
		st.data, st.pos, st.have = resp, 0, true
	case n.Write != nil:
		if err := n.Write(ctx, st.call(), data); err != nil {
			return 0, err
		}
	case n.Subscribe != nil:
		src, err := n.Subscribe(ctx, st.call(), data)
		if err != nil {
			return 0, err
		}
		if st.src != nil {
			st.src.Close()
		}
		st.src, st.data, st.pos, st.once, st.done = src, nil, 0, false, false
	default:
		return 0, fmt.Errorf("%s: file is read-only", displayPath(st.path))
	}
	return len(data), nil
}

func (c *conn) stat(rctx context.Context, fid *fid) (_ *plan9.Dir, err error) {
	ctx, end, err := c.begin(rctx)
	if err != nil {
		return nil, err
	}
	defer end(&err)
	st, err := state(fid)
	if err != nil {
		return nil, err
	}
	e := st.tail()
	name := e.node.Name
	switch {
	case len(st.path) == 1:
		name = "/"
	case e.node.Each != nil:
		// Report the current name, also for a fid walked by alias or
		// before a rename.
		name = e.entry.Name
		parent := st.path[:len(st.path)-1]
		call := &Call{User: st.who.user, Admin: st.who.admin, path: parent}
		if ent, ok := e.node.Each.Lookup(ctx, call, e.entry.Key); ok {
			name = ent.Name
		}
	}
	d := c.dirOf(st.path, name)
	if e.node.Read != nil && st.opened.Load() {
		d.Length = uint64(len(st.data))
	}
	// An open stream's length is what has been written to it so far: a
	// client that wants only what comes next reads from there.
	if e.node.Stream != nil && st.opened.Load() && st.stream != nil {
		d.Length = uint64(st.stream.Size())
	}
	return &d, nil
}

// wstat accepts only what shells and kernels send when truncating a file
// they are about to write (length 0); everything else is prohibited.
func (c *conn) wstat(rctx context.Context, fid *fid, d *plan9.Dir) (err error) {
	_, end, err := c.begin(rctx)
	if err != nil {
		return err
	}
	defer end(&err)
	st, err := state(fid)
	if err != nil {
		return err
	}
	e := st.tail()
	onlyLength := d.Name == "" && d.Uid == "" && d.Gid == "" && ^d.Mode == 0 && ^d.Mtime == 0 && ^d.Atime == 0
	if onlyLength && d.Length == 0 && !e.node.dir && st.who.mayElem(e, aWrite) {
		return nil
	}
	return fmt.Errorf("%s: wstat prohibited", displayPath(st.path))
}
