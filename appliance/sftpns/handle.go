package sftpns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"9fans.net/go/plan9"
	"github.com/pkg/sftp"

	"ollie/ns/client"
)

// Fileread opens a handle for reading.
func (ss *session) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	return ss.open(r, plan9.OREAD)
}

// Filewrite opens a handle for writing only.
func (ss *session) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	return ss.open(r, plan9.OWRITE)
}

// OpenFile opens a handle for writing requests and reading their replies.
func (ss *session) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	return ss.open(r, plan9.ORDWR)
}

// open opens the file at r.Filepath in mode. A handle that reads does so
// on a 9P connection of its own: a read bounded by StreamWait ends by
// interrupting its connection, which must then hold no other handle's
// calls. A write-only handle never waits on a read, and shares the
// session's.
func (ss *session) open(r *sftp.Request, mode uint8) (*handle, error) {
	if mode != plan9.OREAD && ss.srv.ReadOnly {
		return nil, refuse("open", r.Filepath, "this session is read-only", sftp.ErrSSHFxPermissionDenied)
	}
	if err := ss.reserve(r.Filepath); err != nil {
		return nil, err
	}
	h := &handle{ss: ss, conn: ss.conn, mode: mode}
	if mode != plan9.OWRITE {
		conn, err := ss.srv.Dial()
		if err != nil {
			ss.release()
			return nil, fmt.Errorf("sftpns: open %s: %w", r.Filepath, err)
		}
		h.conn, h.ownConn = conn, true
	}
	f, err := h.conn.Open(background, r.Filepath, mode)
	if err == nil && f.IsDir() {
		f.Close()
		err = refuse("open", r.Filepath, "is a directory", sftp.ErrSSHFxFailure)
	}
	if err != nil {
		if h.ownConn {
			h.conn.Close()
		}
		ss.release()
		return nil, errNotExist(err)
	}
	h.f = f
	h.decided = make(chan struct{})
	return h, nil
}

// A handle is an open SFTP file handle: one fid, on a 9P connection of
// its own if it reads.
type handle struct {
	ss      *session
	conn    *client.Conn
	ownConn bool // conn is the handle's, not the session's
	f       *client.File
	mode    uint8

	mu      sync.Mutex
	req     []byte // writes since the last request was sent, by offset from wbase
	wbase   int64
	writing bool   // req holds writes not yet sent
	reply   []byte // the reply read so far, by offset from rbase (ORDWR)
	rbase   int64
	reading bool          // rbase is set: a read has come since the last request
	decided chan struct{} // closed once rbase is set
	ended   bool          // the reply has been read to its end
	failed  bool          // the session ended with the handle open: send nothing
	closed  bool
}

// WriteAt adds p at off to the request being assembled, which starts at
// the least offset written since the last request was sent.
func (h *handle) WriteAt(p []byte, off int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The span the request would cover, checked before anything grows:
	// offsets are the client's.
	limit := int64(h.ss.srv.maxRequest())
	tooLong := fmt.Errorf("sftpns: write %s: a request is at most %d bytes, from the least offset written to the greatest", h.f.Name(), limit)
	if off < 0 || int64(len(p)) > limit || off > math.MaxInt64-limit {
		return 0, tooLong
	}
	if !h.writing {
		h.req, h.wbase, h.writing = h.req[:0], off, true
	}
	lo, hi := min(h.wbase, off), max(h.wbase+int64(len(h.req)), off+int64(len(p)))
	if hi-lo > limit {
		return 0, tooLong
	}
	if off < h.wbase {
		// An earlier part, written after a later one (clients
		// pipeline their writes).
		h.req = append(make([]byte, h.wbase-off), h.req...)
		h.wbase = off
	}
	rel := off - h.wbase
	if end := int(rel) + len(p); end > len(h.req) {
		h.req = append(h.req, make([]byte, end-len(h.req))...)
	}
	copy(h.req[rel:], p)
	return len(p), nil
}

// send sends the assembled request, if any, as one namespace request.
func (h *handle) send() error {
	if !h.writing {
		return nil
	}
	h.writing = false
	h.reply, h.reading, h.ended = h.reply[:0], false, false
	h.decided = make(chan struct{})
	return h.f.Write(background, h.req)
}

// ReadAt reads at off: on a read-write handle from the reply to the last
// request, else from the file by offset.
func (h *handle) ReadAt(p []byte, off int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mode == plan9.ORDWR {
		return h.readReply(p, off)
	}
	return h.readFile(p, off)
}

// readFile makes one read of the file at off, waiting at most StreamWait
// at a stream's end.
func (h *handle) readFile(p []byte, off int64) (int, error) {
	n, err := h.read(p, off)
	if err == nil || err == io.EOF || off == 0 {
		return n, err
	}
	// A stream answers a read past its end with an error; for SFTP that
	// is the end of the file for now.
	if d, serr := h.f.Stat(background); serr == nil && uint64(off) > d.Length {
		return 0, io.EOF
	}
	return n, err
}

// read makes one read, waiting at most StreamWait; a read that waited that
// long with nothing to show is at the end of the file, for now.
func (h *handle) read(p []byte, off int64) (int, error) {
	ctx, cancel := context.WithTimeout(background, h.ss.srv.streamWait())
	defer cancel()
	n, err := h.f.ReadAt(ctx, p, off)
	if err != nil && err != io.EOF && ctx.Err() != nil && (client.IsInterrupted(err) || errors.Is(err, context.DeadlineExceeded)) {
		return 0, io.EOF
	}
	return n, err
}

// readReply serves the reply by offset, from where placeReply put it,
// reading it from the fid as far as p needs.
func (h *handle) readReply(p []byte, off int64) (int, error) {
	if err := h.send(); err != nil {
		return 0, err
	}
	if !h.reading {
		h.placeReply(off)
	}
	rel := off - h.rbase
	if rel < 0 {
		return 0, fmt.Errorf("sftpns: read %s: offset %d is before the reply, which began at %d", h.f.Name(), off, h.rbase)
	}
	want := rel + int64(len(p))
	for !h.ended && int64(len(h.reply)) < want {
		if len(h.reply) >= h.ss.srv.maxRequest() {
			return 0, fmt.Errorf("sftpns: read %s: the reply is longer than %d bytes", h.f.Name(), h.ss.srv.maxRequest())
		}
		buf := make([]byte, min(want-int64(len(h.reply)), 64<<10))
		n, err := h.read(buf, 0)
		h.reply = append(h.reply, buf[:n]...)
		if err == io.EOF {
			h.ended = true
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if rel >= int64(len(h.reply)) {
		// Reset so that a later read asks the fid again: a
		// subscription's next item may come.
		h.ended = false
		return 0, io.EOF
	}
	return copy(p, h.reply[rel:]), nil
}

// decideWait is how long a read of a reply at neither place a reply can
// start waits for the read that says which.
const decideWait = 100 * time.Millisecond

// placeReply decides where the reply to the last request starts, from
// the first read of it: where the request started, for a client that
// seeks back to read, or where it ended, for one that reads on (a shell's
// `exec 3<>FILE`). Clients pipeline reads (sshfs sends four at once), and
// the request server runs them in any order, so a read at neither place
// waits up to decideWait for one that is; if none comes, the reply
// starts where the request ended. h.mu is held, and released while
// waiting.
func (h *handle) placeReply(off int64) {
	start, end := h.wbase, h.wbase+int64(len(h.req))
	if off != start && off != end {
		decided := h.decided
		h.mu.Unlock()
		select {
		case <-decided:
		case <-time.After(decideWait):
		}
		h.mu.Lock()
		if h.reading {
			return
		}
		off = end
	}
	h.rbase, h.reading = off, true
	close(h.decided)
}

// TransferError is the request server's word that the session ended with
// the handle open: an upload cut short is not sent.
func (h *handle) TransferError(err error) {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
}

// Close sends what was written and not yet sent, and lets the fid and its
// connection go. The request's error is the close's.
func (h *handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	var err error
	if !h.failed {
		err = h.send()
	}
	h.f.Close()
	if h.ownConn {
		h.conn.Close()
	}
	h.ss.release()
	return err
}
