package ns

// The protocol's checks on each request before ns's handlers in conn.go
// run, and the texts of their errors: srv9p's, word for word, so that
// clients and transcripts see the protocol they saw when ns was built on
// it.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"9fans.net/go/plan9"
)

var (
	errUnknownFid     = errors.New("unknown fid")
	errDuplicateFid   = errors.New("duplicate fid")
	errDuplicateTag   = errors.New("duplicate tag")
	errDuplicateOpen  = errors.New("duplicate open")
	errUnknownMessage = errors.New("unknown message")
	errCloneOpenFid   = errors.New("clone of open fid")
	errWalkNonDir     = errors.New("walk in non-directory")
	errNotFound       = errors.New("file not found")
	errIsDir          = errors.New("is a directory")
	errCreateNonDir   = errors.New("create in non-directory")
	errNoCreate       = errors.New("create prohibited")
	errNoRemove       = errors.New("remove prohibited")
	errBadCount       = errors.New("bad count")
	errBadOffset      = errors.New("bad offset")
	errNotOpenRead    = errors.New("not open for read")
	errNotOpenWrite   = errors.New("not open for write")
	errWstatType      = errors.New("wstat cannot change type")
	errWstatDev       = errors.New("wstat cannot change dev")
	errWstatQid       = errors.New("wstat cannot change qid")
	errWstatMuid      = errors.New("wstat cannot change muid")
	errWstatDMDIR     = errors.New("wstat cannot change DMDIR bit")
	errFlushed        = errors.New("flushed")
	errNoAuth         = errors.New(filepath.Base(os.Args[0]) + ": authentication not required")
)

func (c *conn) version(t, r *plan9.Fcall) {
	r.Version = "unknown"
	if strings.HasPrefix(t.Version, "9P") {
		r.Version = "9P2000"
	}
	// The guard has already lowered msize to what the client asked for.
	r.Msize = min(t.Msize, c.guard.msizeNow())
}

func (c *conn) tauth(t *plan9.Fcall) error {
	f, err := c.newFid(t.Afid)
	if err != nil {
		return err
	}
	c.putFid(f)
	c.putFid(c.deleteFid(t.Afid))
	return errNoAuth
}

func (c *conn) tattach(ctx context.Context, t *plan9.Fcall) (plan9.Qid, error) {
	if t.Afid != plan9.NOFID {
		return plan9.Qid{}, errUnknownFid // the guard answers these first
	}
	f, err := c.newFid(t.Fid)
	if err != nil {
		return plan9.Qid{}, err
	}
	defer c.putFid(f)
	f.setQid(plan9.Qid{Type: plan9.QTDIR})
	qid, err := c.attach(ctx, f, t.Uname, t.Aname)
	if err != nil {
		c.putFid(c.deleteFid(t.Fid))
		return plan9.Qid{}, err
	}
	f.setQid(qid)
	return qid, nil
}

func (c *conn) twalk(ctx context.Context, t *plan9.Fcall) ([]plan9.Qid, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return nil, errUnknownFid
	}
	defer c.putFid(f)
	if f.omode.Load() != -1 {
		return nil, errCloneOpenFid
	}
	if len(t.Wname) > 0 && f.Qid().Type&plan9.QTDIR == 0 {
		return nil, errWalkNonDir
	}
	newf := f
	if t.Newfid != t.Fid {
		var err error
		if newf, err = c.newFid(t.Newfid); err != nil {
			return nil, err
		}
	} else {
		newf.ref.Add(1)
	}
	defer c.putFid(newf)
	qids, err := c.walk(ctx, f, newf, t.Wname)
	if err != nil || len(qids) < len(t.Wname) {
		if t.Newfid != t.Fid {
			c.putFid(c.deleteFid(t.Newfid))
		}
		if len(qids) == 0 {
			if err == nil && len(t.Wname) > 0 {
				err = errNotFound
			}
			return nil, err
		}
		return qids, nil // no error on partial walks
	}
	qid := f.Qid()
	if len(qids) > 0 {
		qid = qids[len(qids)-1]
	}
	newf.setQid(qid)
	return qids, nil
}

func (c *conn) topen(ctx context.Context, t *plan9.Fcall) (plan9.Qid, uint32, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return plan9.Qid{}, 0, errUnknownFid
	}
	defer c.putFid(f)
	if f.omode.Load() != -1 {
		return plan9.Qid{}, 0, errDuplicateOpen
	}
	qid := f.Qid()
	if qid.Type&plan9.QTDIR != 0 && t.Mode&^plan9.ORCLOSE != plan9.OREAD {
		return plan9.Qid{}, 0, errIsDir
	}
	if err := c.open(ctx, f, t.Mode); err != nil {
		return plan9.Qid{}, 0, err
	}
	f.omode.Store(int32(t.Mode))
	return f.Qid(), f.iounit.Load(), nil
}

func (c *conn) tcreate(t *plan9.Fcall) error {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	defer c.putFid(f)
	switch {
	case f.omode.Load() != -1:
		return errDuplicateOpen
	case f.Qid().Type&plan9.QTDIR == 0:
		return errCreateNonDir
	}
	return errNoCreate
}

func (c *conn) tread(ctx context.Context, t *plan9.Fcall) ([]byte, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return nil, errUnknownFid
	}
	defer c.putFid(f)
	if int32(t.Count) < 0 {
		return nil, errBadCount
	}
	isDir := f.Qid().Type&plan9.QTDIR != 0
	if int64(t.Offset) < 0 || (isDir && t.Offset != 0 && int64(t.Offset) != f.dirOffset.Load()) {
		return nil, errBadOffset
	}
	count := min(t.Count, c.guard.msizeNow()-plan9.IOHDRSZ)
	if o := f.omode.Load() & 3; o != plan9.OREAD && o != plan9.ORDWR && o != plan9.OEXEC {
		return nil, errNotOpenRead
	}
	data, err := c.read(ctx, f, int(count), int64(t.Offset))
	if err != nil {
		return nil, err
	}
	if isDir {
		f.dirOffset.Store(int64(t.Offset) + int64(len(data)))
	}
	return data, nil
}

func (c *conn) twrite(ctx context.Context, t *plan9.Fcall) (uint32, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return 0, errUnknownFid
	}
	defer c.putFid(f)
	if int64(t.Offset) < 0 {
		return 0, errBadOffset
	}
	if o := f.omode.Load() & 3; o != plan9.OWRITE && o != plan9.ORDWR {
		return 0, errNotOpenWrite
	}
	n, err := c.write(ctx, f, t.Data)
	return uint32(n), err
}

func (c *conn) tclunk(t *plan9.Fcall) error {
	f := c.deleteFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	c.putFid(f)
	return nil
}

func (c *conn) tremove(t *plan9.Fcall) error {
	f := c.deleteFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	c.putFid(f)
	return errNoRemove
}

func (c *conn) tstat(ctx context.Context, t *plan9.Fcall) ([]byte, error) {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return nil, errUnknownFid
	}
	defer c.putFid(f)
	d, err := c.stat(ctx, f)
	if err != nil {
		return nil, err
	}
	return d.Bytes()
}

func (c *conn) twstat(ctx context.Context, t *plan9.Fcall) error {
	f := c.lookupFid(t.Fid)
	if f == nil {
		return errUnknownFid
	}
	defer c.putFid(f)
	d, err := plan9.UnmarshalDir(t.Stat)
	if err != nil {
		return err
	}
	if d.IsNull() {
		return nil // a sync: nothing here is kept on disk
	}
	switch {
	case ^d.Type != 0:
		return errWstatType
	case ^d.Dev != 0:
		return errWstatDev
	case ^d.Qid.Type != 0 || ^d.Qid.Vers != 0 || ^d.Qid.Path != 0:
		return errWstatQid
	case d.Muid != "":
		return errWstatMuid
	case ^d.Mode != 0 && (d.Mode&plan9.DMDIR != 0) != (f.Qid().Type&plan9.QTDIR != 0):
		return errWstatDMDIR
	}
	return c.wstat(ctx, f, d)
}

// readDir returns the directory entries from the fid's read position on
// (the start at offset 0) that fit in count bytes.
func readDir(f *fid, count int, offset int64, dirs []plan9.Dir) ([]byte, error) {
	start := 0
	if offset > 0 {
		start = int(f.dirIndex.Load())
	}
	var out []byte
	for ; start < len(dirs); start++ {
		stat, err := dirs[start].Bytes()
		if err != nil {
			if len(out) == 0 {
				return nil, err
			}
			break
		}
		if len(out)+len(stat) > count {
			break
		}
		out = append(out, stat...)
	}
	f.dirIndex.Store(int64(start))
	return out, nil
}
