package client

import (
	"context"
	"io"
	"io/fs"
	"sync"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"
)

// A File is a file of the namespace held open on one fid, for a caller
// that cannot do its work in one call: an SFTP handle, say, whose request
// written to an rdwr file is answered on the same fid, or whose reads of a
// stream come one by one, by offset, as it grows.
//
// Its methods may be called concurrently; they run one at a time. Ending
// the context of a call interrupts every call in flight on the File's
// Conn (see Conn.Interrupt), so a caller that bounds its reads by a
// context gives the File a Conn of its own.
type File struct {
	c    *Conn
	name string
	mu   sync.Mutex
	fid  *p9.Fid
}

// Open opens the file at name in mode (plan9.OREAD, OWRITE or ORDWR) and
// holds its fid until Close.
func (c *Conn) Open(ctx context.Context, name string, mode uint8) (*File, error) {
	name = Clean(name)
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	stop := c.watch(ctx)
	defer stop()
	fid, err := c.fsys.Open(name, mode)
	if err != nil {
		return nil, c.pathError("open", name, err)
	}
	return &File{c: c, name: name, fid: fid}, nil
}

// Name is the cleaned path the File was opened at.
func (f *File) Name() string { return f.name }

// IsDir reports whether the File is a directory.
func (f *File) IsDir() bool { return f.fid.Qid().Type&plan9.QTDIR != 0 }

// ReadAt makes one read of at most len(p) bytes at offset off, as the file
// serves it: a snapshot by offset, a stream by offset (blocking at its end
// until more comes), a request file's reply in order, ignoring off. It
// returns 0, io.EOF where the file answers 0 bytes.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
	}
	stop := f.c.watch(ctx)
	defer stop()
	if _, err := f.fid.Seek(off, io.SeekStart); err != nil {
		return 0, f.c.pathError("read", f.name, err)
	}
	n, err := f.fid.Read(p)
	if err == io.EOF || (err == nil && n == 0) {
		return 0, io.EOF
	}
	return n, f.c.pathError("read", f.name, err)
}

// Write sends data to the file as one request, as Conn.Write does.
func (f *File) Write(ctx context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return &fs.PathError{Op: "write", Path: f.name, Err: err}
	}
	stop := f.c.watch(ctx)
	defer stop()
	return f.c.writeReq(f.name, f.fid, data)
}

// Stat returns the metadata of the open file: for a snapshot the length of
// the snapshot taken at open, for a stream how much has been written to it
// so far.
func (f *File) Stat(ctx context.Context) (*plan9.Dir, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: f.name, Err: err}
	}
	stop := f.c.watch(ctx)
	defer stop()
	d, err := f.fid.Stat()
	return d, f.c.pathError("stat", f.name, err)
}

// Close clunks the fid.
func (f *File) Close() error {
	return f.c.pathError("close", f.name, f.fid.Close())
}
