package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"
)

// ErrConnLost is wrapped by the errors of calls whose connection failed
// after it was made: the server went away or broke the protocol.
var ErrConnLost = errors.New("connection to olliesrv lost")

// ErrIsDir is the error of reading a directory as a file; list it with Ls.
var ErrIsDir = errors.New("is a directory")

// readSize is the most one read asks for; it is lowered to
// the negotiated msize less the header.
const readSize = 128 << 10

// Clean returns the absolute, cleaned form of the namespace path p: paths
// are relative to the root, and ".." is resolved here, not by the server.
func Clean(p string) string { return path.Clean("/" + p) }

// pathError wraps err, from a call on name, so that the user sees the path
// and callers can tell the server's answers from a lost connection.
func (c *Conn) pathError(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if !IsServerError(err) {
		if errors.Is(err, errLost) {
			err = c.w.failed()
		}
		err = fmt.Errorf("%w (%s): %w", ErrConnLost, c.addr, err)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// with runs f on the file name opened in mode, interrupting c when ctx
// ends. f wraps its own errors.
func (c *Conn) with(ctx context.Context, op, name string, mode uint8, f func(fid *p9.Fid) error) error {
	if err := ctx.Err(); err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	stop := c.watch(ctx)
	defer stop()
	fid, err := c.fsys.Open(name, mode)
	if err != nil {
		return c.pathError(op, name, err)
	}
	defer fid.Close()
	return f(fid)
}

// Stat returns the metadata of the file at name.
func (c *Conn) Stat(ctx context.Context, name string) (*plan9.Dir, error) {
	name = Clean(name)
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	stop := c.watch(ctx)
	defer stop()
	d, err := c.fsys.Stat(name)
	return d, c.pathError("stat", name, err)
}

// Ls returns the entries of the directory at name, or the file's own
// metadata if name is not a directory.
func (c *Conn) Ls(ctx context.Context, name string) ([]*plan9.Dir, error) {
	return c.LsLimit(ctx, name, 0)
}

// LsLimit is Ls keeping no more than limit entries (none when limit is 0
// or less): a directory another host lists can be as long as it likes. A
// longer one is an error naming it, wrapping ErrTooLong, returned with
// the entries read.
func (c *Conn) LsLimit(ctx context.Context, name string, limit int) ([]*plan9.Dir, error) {
	name = Clean(name)
	d, err := c.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	if d.Qid.Type&plan9.QTDIR == 0 {
		d.Name = name
		return []*plan9.Dir{d}, nil
	}
	var dirs []*plan9.Dir
	err = c.with(ctx, "ls", name, plan9.OREAD, func(fid *p9.Fid) error {
		for {
			d, err := fid.Dirread()
			dirs = append(dirs, d...)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return c.pathError("ls", name, err)
			}
			if limit > 0 && len(dirs) > limit {
				dirs = dirs[:limit]
				return &fs.PathError{Op: "ls", Path: name, Err: fmt.Errorf("%w of %d entries", ErrTooLong, limit)}
			}
		}
	})
	return dirs, err
}

// ReadAll reads the file at name to its end. For a stream that is when the
// stream ends; see Follow.
func (c *Conn) ReadAll(ctx context.Context, name string) ([]byte, error) {
	var b bytes.Buffer
	err := c.Follow(ctx, name, &b)
	return b.Bytes(), err
}

// ErrTooLong is wrapped by ReadLimit's error for a file longer than its
// limit.
var ErrTooLong = errors.New("longer than its limit")

// ReadLimit reads the file at name to its end, as ReadAll does, but keeps
// no more than limit bytes: a file another host writes can be as long as
// it likes. A longer file is an error naming it, wrapping ErrTooLong. Like
// ReadAll, it returns what it read with any error.
func (c *Conn) ReadLimit(ctx context.Context, name string, limit int) ([]byte, error) {
	b := limitedBuffer{limit: limit}
	err := c.Follow(ctx, name, &b)
	if errors.Is(err, errTooMuch) {
		err = &fs.PathError{Op: "read", Path: Clean(name), Err: fmt.Errorf("%w of %d bytes", ErrTooLong, limit)}
	}
	return b.Bytes(), err
}

// errTooMuch is a limitedBuffer's refusal, which ReadLimit names.
var errTooMuch = errors.New("client: too much to buffer")

// limitedBuffer is a bytes.Buffer that refuses a write that would take it
// past limit bytes, keeping what it has.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		return 0, errTooMuch
	}
	return b.Buffer.Write(p)
}

// Follow copies the file at name to w as it arrives, until its end. A read
// at the end of a stream blocks in the server until more comes, so Follow
// returns only when the stream ends, ctx ends or the connection fails.
func (c *Conn) Follow(ctx context.Context, name string, w io.Writer) error {
	_, err := c.FollowFrom(ctx, name, 0, w)
	return err
}

// Size is how much has been written to the stream at name so far: where a
// reader who wants only what comes next starts (FollowFrom).
func (c *Conn) Size(ctx context.Context, name string) (int64, error) {
	name = Clean(name)
	var n int64
	err := c.with(ctx, "read", name, plan9.OREAD, func(fid *p9.Fid) error {
		d, err := fid.Stat()
		if err != nil {
			return c.pathError("read", name, err)
		}
		n = int64(d.Length)
		return nil
	})
	return n, err
}

// FollowFrom is Follow from offset off of a stream, or from what has been
// written so far when off is negative: what follows then is only what
// comes next. It returns the offset it reached, so that a caller whose
// connection failed can go on from there. Errors writing to w are
// returned as they are.
func (c *Conn) FollowFrom(ctx context.Context, name string, off int64, w io.Writer) (int64, error) {
	name = Clean(name)
	if err := ctx.Err(); err != nil {
		return off, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	stop := c.watch(ctx)
	defer stop()
	f, err := c.w.open(name)
	if err != nil {
		return off, c.pathError("read", name, err)
	}
	defer f.clunk()
	if f.qid.Type&plan9.QTDIR != 0 {
		return off, &fs.PathError{Op: "read", Path: name, Err: ErrIsDir}
	}
	if off < 0 {
		if off, err = f.length(); err != nil {
			return 0, c.pathError("read", name, err)
		}
	}
	off, err = f.follow(off, w, min(readSize, c.w.iounit()))
	var we writeError
	if errors.As(err, &we) {
		return off, we.err
	}
	return off, c.pathError("read", name, err)
}

// Write sends data to the file at name as one request: one Twrite when it
// fits the connection's iounit, else (above about 128 KiB) consecutive
// Twrites that the server sees as separate requests.
func (c *Conn) Write(ctx context.Context, name string, data []byte) error {
	name = Clean(name)
	return c.with(ctx, "write", name, plan9.OWRITE, func(fid *p9.Fid) error {
		return c.writeReq(name, fid, data)
	})
}

// RdWr sends req to the request file at name and returns the reply: it
// opens the file for reading and writing, writes req as Write does and
// reads the reply to its end.
func (c *Conn) RdWr(ctx context.Context, name string, req []byte) ([]byte, error) {
	return c.RdWrLimit(ctx, name, req, 0)
}

// RdWrLimit is RdWr keeping no more than limit bytes of the reply (no
// limit when it is 0 or less): a longer one is an error naming the file,
// wrapping ErrTooLong, returned with what was read.
func (c *Conn) RdWrLimit(ctx context.Context, name string, req []byte, limit int) ([]byte, error) {
	name = Clean(name)
	b := limitedBuffer{limit: limit}
	if limit <= 0 {
		b.limit = math.MaxInt
	}
	err := c.with(ctx, "rdwr", name, plan9.ORDWR, func(fid *p9.Fid) error {
		if err := c.writeReq(name, fid, req); err != nil {
			return err
		}
		return c.copyOut(name, fid, &b)
	})
	if errors.Is(err, errTooMuch) {
		err = &fs.PathError{Op: "rdwr", Path: name, Err: fmt.Errorf("%w of %d bytes", ErrTooLong, limit)}
	}
	return b.Bytes(), err
}

// Subscribe writes filter to the subscription file at name and copies the
// matching items to w as they come, until the subscription ends, ctx ends
// or the connection fails.
func (c *Conn) Subscribe(ctx context.Context, name string, filter []byte, w io.Writer) error {
	return c.SubscribeFrom(ctx, name, filter, nil, w)
}

// SubscribeFrom is Subscribe that calls subscribed, if not nil, once the
// server has the filter: every item published from then on reaches w. A
// caller that also reads the state the items change (lists a directory,
// say) reads it after subscribed, so that nothing between that read and
// the first item is missed. subscribed runs on Subscribe's goroutine,
// before anything is copied to w.
func (c *Conn) SubscribeFrom(ctx context.Context, name string, filter []byte, subscribed func(), w io.Writer) error {
	name = Clean(name)
	return c.with(ctx, "subscribe", name, plan9.ORDWR, func(fid *p9.Fid) error {
		if err := c.writeReq(name, fid, filter); err != nil {
			return err
		}
		if subscribed != nil {
			subscribed()
		}
		return c.copyOut(name, fid, w)
	})
}

// writeReq writes data to fid in as few Twrites as the iounit allows,
// always at least one.
func (c *Conn) writeReq(name string, fid *p9.Fid, data []byte) error {
	iounit := c.w.iounit()
	for first := true; first || len(data) > 0; first = false {
		chunk := data[:min(len(data), iounit)]
		n, err := fid.Write(chunk)
		if err != nil {
			return c.pathError("write", name, err)
		}
		if n < len(chunk) {
			return &fs.PathError{Op: "write", Path: name, Err: io.ErrShortWrite}
		}
		data = data[n:]
	}
	return nil
}

// copyOut copies what fid reads to w until EOF. Errors writing to w are
// returned as they are.
func (c *Conn) copyOut(name string, fid *p9.Fid, w io.Writer) error {
	buf := make([]byte, readSize)
	for {
		n, err := fid.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return c.pathError("read", name, err)
		}
	}
}
