package client

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"
)

// Reading a file to its end (Follow, FollowFrom) does not go through the
// 9fans client: it reads one reply at a time, allocates a fresh msize
// buffer for each and hands it over through channels, so a 64 MiB stream
// came at a fifth of a raw socket copy's speed (issue 18). wire sends the
// walk, open, reads, stats and clunk itself, on a fid and tags of its
// own, and copies each Rread's data straight into the caller's buffer;
// past a full read it keeps readAhead Treads in flight up to the length a
// Tstat reports. Interruption and a lost connection answer these requests
// as they do the client's.

// A call is a request wire sends on its own behalf rather than the 9fans
// client's. Its reply goes to ch; an Rread's data is copied into dst.
type call struct {
	dst []byte
	ch  chan result // buffered: delivering never blocks
}

// result is a call's reply.
type result struct {
	n   int          // Rread: the bytes copied into dst
	f   *plan9.Fcall // any other reply
	err error        // Rerror's text as a p9.Error, or why there is no reply
}

// decode turns the reply frame f, read into a buffer about to be reused,
// into c's result: an Rread's data goes straight to dst.
func (c *call) decode(f []byte) result {
	if f[4] == plan9.Rread && len(f) >= 11 {
		n := int(binary.LittleEndian.Uint32(f[7:11]))
		if 11+n != len(f) {
			return result{err: plan9.ProtocolError("ns/client: malformed Rread")}
		}
		return result{n: copy(c.dst, f[11:])}
	}
	fc, err := plan9.UnmarshalFcall(f)
	if err != nil {
		return result{err: err}
	}
	if fc.Type == plan9.Rerror {
		return result{err: p9.Error(fc.Ename)}
	}
	return result{f: fc}
}

// start sends f, tagged by wire, as a call whose Rread data goes to dst.
func (w *wire) start(f *plan9.Fcall, dst []byte) (*call, error) {
	c := &call{dst: dst, ch: make(chan result, 1)}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	if w.err != nil {
		// Not w.err itself: a connection the server closed failed with
		// io.EOF, which a reader would take for the end of the file
		// (a chat following its agent said the agent had stopped for
		// good when olliesrv restarted). pathError reports w.err.
		w.mu.Unlock()
		return nil, errLost
	}
	tag, ok := w.freeTagLocked()
	if !ok {
		w.mu.Unlock()
		return nil, plan9.ProtocolError("ns/client: out of tags")
	}
	f.Tag = tag
	b, err := f.Bytes()
	if err != nil {
		w.mu.Unlock()
		return nil, err
	}
	w.out[tag] = f.Type
	w.calls[tag] = c
	if f.Type == plan9.Tclunk {
		w.closing[f.Fid] = true
		w.clunks[tag] = f.Fid
		delete(w.aliases, f.Fid)
	}
	var flush []byte
	if w.sticky > 0 && interruptible(f.Type) {
		flush = w.flushLocked(tag)
	}
	w.mu.Unlock()
	w.send(b)
	if flush != nil {
		w.send(flush)
	}
	return c, nil
}

// wait returns c's reply.
func (w *wire) wait(c *call) result { return <-c.ch }

// rpc sends f as a call and waits for its reply.
func (w *wire) rpc(f *plan9.Fcall, dst []byte) result {
	c, err := w.start(f, dst)
	if err != nil {
		return result{err: err}
	}
	return w.wait(c)
}

// ownFid returns a fid number for wire's own use, from the top of the fid
// space as substitutes are.
func (w *wire) ownFid() uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	fid := w.nextFid
	for w.closing[fid] || w.aliases[fid] {
		fid--
	}
	w.nextFid = fid - 1
	w.aliases[fid] = true
	return fid
}

// A wfid is a file wire opened for reading.
type wfid struct {
	w   *wire
	fid uint32
	qid plan9.Qid // as the walk reported it, as the 9fans client keeps it
}

// errNotAttached answers an open before the client attached.
var errNotAttached = errors.New("ns/client: not attached")

// open walks from the attach fid to the file at the clean absolute path
// name and opens it for reading.
func (w *wire) open(name string) (*wfid, error) {
	w.mu.Lock()
	root, attached := w.root, w.attached
	w.mu.Unlock()
	if !attached {
		return nil, errNotAttached
	}
	var elems []string
	for _, e := range strings.Split(name, "/") {
		if e != "" && e != "." {
			elems = append(elems, e)
		}
	}
	f := &wfid{w: w, fid: w.ownFid()}
	root0 := len(elems) == 0
	from := root
	for first := true; first || len(elems) > 0; first = false {
		n := min(len(elems), plan9.MAXWELEM)
		r := w.rpc(&plan9.Fcall{Type: plan9.Twalk, Fid: from, Newfid: f.fid, Wname: elems[:n]}, nil)
		if r.err == nil && len(r.f.Wqid) != n {
			r.err = p9.Error("file '" + name + "' not found")
		}
		if r.err != nil {
			if from == f.fid {
				f.clunk()
			} else {
				w.mu.Lock()
				delete(w.aliases, f.fid)
				w.mu.Unlock()
			}
			return nil, r.err
		}
		if n > 0 {
			f.qid = r.f.Wqid[n-1]
		}
		elems, from = elems[n:], f.fid
	}
	r := w.rpc(&plan9.Fcall{Type: plan9.Topen, Fid: f.fid, Mode: plan9.OREAD}, nil)
	if r.err != nil {
		f.clunk()
		return nil, r.err
	}
	if root0 {
		f.qid = r.f.Qid // no walk said what the root is
	}
	return f, nil
}

// read reads up to len(b) bytes at off: 0 and io.EOF at the end.
func (f *wfid) read(b []byte, off int64) (int, error) {
	r := f.w.rpc(&plan9.Fcall{Type: plan9.Tread, Fid: f.fid, Offset: uint64(off), Count: uint32(len(b))}, b)
	if r.err != nil {
		return 0, r.err
	}
	if r.n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return r.n, nil
}

// length returns the file's length as Tstat reports it.
func (f *wfid) length() (int64, error) {
	r := f.w.rpc(&plan9.Fcall{Type: plan9.Tstat, Fid: f.fid}, nil)
	if r.err != nil {
		return 0, r.err
	}
	d, err := plan9.UnmarshalDir(r.f.Stat)
	if err != nil {
		return 0, err
	}
	return int64(d.Length), nil
}

func (f *wfid) clunk() {
	f.w.rpc(&plan9.Fcall{Type: plan9.Tclunk, Fid: f.fid}, nil)
}

// readAhead is how many Treads follow keeps in flight where the file's
// length says the bytes are there.
const readAhead = 4

// follow copies what f reads from offset off to w until EOF, and returns
// the offset it reached. A read at the end of a stream waits for more, so
// it reads one Tread at a time; but after a read that came back full it
// asks the file's length (Tstat: a stream's is what has been written so
// far, a snapshot's its size) and reads up to that with readAhead Treads
// in flight at increasing offsets, handed to w in order, as none of them
// waits. Offsets keep their meaning: each byte is read at its own. A file
// that reports no length is read one Tread at a time throughout. Errors
// writing to w come back as errWrite.
func (f *wfid) follow(off int64, w io.Writer, size int) (int64, error) {
	buf := make([]byte, size)
	askLength := true
	for {
		n, err := f.read(buf, off)
		if n > 0 {
			off += int64(n)
			if _, werr := w.Write(buf[:n]); werr != nil {
				return off, writeError{werr}
			}
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
		if n < len(buf) || !askLength {
			continue
		}
		end, err := f.length()
		if err != nil {
			return off, err
		}
		if end <= off {
			askLength = false // it says nothing of what is ahead
			continue
		}
		if off, err = f.readRange(off, end, size, w); err != nil {
			return off, err
		}
	}
}

// writeError is an error writing to follow's writer, which Follow returns
// as it is.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }

// readRange copies the bytes from off to end of f to w, in reads of size
// bytes with readAhead in flight, and returns the offset reached. It
// stops early, without an error, at a read that comes back short.
func (f *wfid) readRange(off, end int64, size int, w io.Writer) (int64, error) {
	type chunk struct {
		c   *call
		err error
		buf []byte
	}
	var (
		queue []chunk
		free  [][]byte
		next  = off
		err   error
	)
	for len(queue) > 0 || (next < end && err == nil) {
		for err == nil && next < end && len(queue) < readAhead {
			var b []byte
			if len(free) > 0 {
				b, free = free[len(free)-1], free[:len(free)-1]
			} else {
				b = make([]byte, size)
			}
			count := min(int64(size), end-next)
			c, serr := f.w.start(&plan9.Fcall{Type: plan9.Tread, Fid: f.fid, Offset: uint64(next), Count: uint32(count)}, b[:count])
			queue = append(queue, chunk{c: c, err: serr, buf: b})
			next += count
		}
		ch := queue[0]
		queue = queue[1:]
		r := result{err: ch.err}
		if ch.c != nil {
			r = f.w.wait(ch.c) // also when stopping: drain what is in flight
		}
		free = append(free, ch.buf)
		if err != nil {
			continue
		}
		if r.err != nil {
			err = r.err
			continue
		}
		if r.n > 0 {
			if _, werr := w.Write(ch.buf[:r.n]); werr != nil {
				err = writeError{werr}
				continue
			}
			off += int64(r.n)
		}
		if r.n < len(ch.c.dst) {
			err = errShort // the file is shorter than it said
		}
	}
	if err == errShort {
		err = nil
	}
	return off, err
}

// errShort stops readRange at a short read: the rest is read one at a time.
var errShort = errors.New("short read")
