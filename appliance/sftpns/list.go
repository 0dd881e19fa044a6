package sftpns

import (
	"io"
	"os"
	"time"

	"9fans.net/go/plan9"
	"github.com/pkg/sftp"
)

// fileInfo is a 9P directory entry as SFTP sees it.
type fileInfo struct{ d *plan9.Dir }

func (fi fileInfo) Name() string       { return fi.d.Name }
func (fi fileInfo) Size() int64        { return int64(fi.d.Length) }
func (fi fileInfo) Mode() os.FileMode  { return mode(uint32(fi.d.Mode), fi.IsDir()) }
func (fi fileInfo) ModTime() time.Time { return time.Unix(int64(fi.d.Mtime), 0) }
func (fi fileInfo) IsDir() bool        { return fi.d.Qid.Type&plan9.QTDIR != 0 }
func (fi fileInfo) Sys() any           { return nil }

// Uid and Gid are the listener's own: 9P owners are names, which the
// SFTP client could not map anyway, and the namespace, not the client,
// decides who may do what.
func (fi fileInfo) Uid() uint32 { return uint32(os.Getuid()) }
func (fi fileInfo) Gid() uint32 { return uint32(os.Getgid()) }

// listerAt serves a listing read whole.
type listerAt []os.FileInfo

func (l listerAt) ListAt(p []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(p, l[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Filelist answers List (a directory's entries, read whole at opendir)
// and Stat. A Readlink is refused: the namespace has no links.
func (ss *session) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch r.Method {
	case "List":
		d, err := ss.conn.Stat(background, r.Filepath)
		if err != nil {
			return nil, errNotExist(err)
		}
		if d.Qid.Type&plan9.QTDIR == 0 {
			return nil, refuse("opendir", r.Filepath, "not a directory", sftp.ErrSSHFxFailure)
		}
		dirs, err := ss.conn.Ls(background, r.Filepath)
		if err != nil {
			return nil, errNotExist(err)
		}
		l := make(listerAt, len(dirs))
		for i, d := range dirs {
			l[i] = fileInfo{d}
		}
		return l, nil
	case "Stat":
		d, err := ss.stat(r.Filepath)
		if err != nil {
			return nil, err
		}
		return listerAt{fileInfo{d}}, nil
	}
	return nil, refuse(lower(r.Method), r.Filepath, "the namespace has no links", sftp.ErrSSHFxOpUnsupported)
}

// stat returns the metadata of the file at name with, for a file that may
// be read, the length of a fid open on it (openLength). A file not open
// has length 0 in 9P, which would hide a stream's growth from a client
// (tail -f over sshfs) that reads only when the size changes.
func (ss *session) stat(name string) (*plan9.Dir, error) {
	d, err := ss.conn.Stat(background, name)
	if err != nil {
		return nil, errNotExist(err)
	}
	if d.Qid.Type&plan9.QTDIR == 0 && d.Mode&0444 != 0 {
		if n, ok := ss.openLength(name); ok {
			d.Length = n
		}
	}
	return d, nil
}

// statWait bounds how long a stat waits for the open that measures a
// file: opening a snapshot runs its handler, which may ask a model server
// (the host's models), and the request server answers a session's
// commands one at a time.
const statWait = 250 * time.Millisecond

// openLength opens the file at name for reading and returns the open
// fid's length: a snapshot's size, or how much of a stream has been
// written. It reports false if the principal may not read the file, or
// the open takes longer than statWait (it then finishes, and lets the fid
// go, on its own), or the last one has not finished yet.
//
// The opens run on a connection of their own, one at a time. Not on the
// session's: the 9fans client reuses a fid's number once its Tclunk is
// written, and srv9p runs requests concurrently, so a walk on the same
// connection can reach the server before the clunk and be refused
// ("duplicate fid"); the session's connection is used by one request at
// a time.
func (ss *session) openLength(name string) (uint64, bool) {
	ss.mmu.Lock()
	if ss.mbusy || ss.ended {
		ss.mmu.Unlock()
		return 0, false
	}
	ss.mbusy = true
	mc := ss.mconn
	ss.mmu.Unlock()

	res := make(chan uint64, 1)
	go func() {
		defer close(res)
		var err error
		if mc == nil {
			mc, err = ss.srv.Dial()
		}
		if err == nil {
			if f, err := mc.Open(background, name, plan9.OREAD); err == nil {
				if d, err := f.Stat(background); err == nil {
					res <- d.Length
				}
				f.Close()
			}
		}
		ss.mmu.Lock()
		defer ss.mmu.Unlock()
		ss.mbusy = false
		if mc != nil && ss.ended {
			mc.Close()
			mc = nil
		}
		ss.mconn = mc
	}()
	timer := time.NewTimer(statWait)
	defer timer.Stop()
	select {
	case n, ok := <-res:
		return n, ok
	case <-timer.C:
		return 0, false
	}
}

// endMeasuring closes the connection of openLength, now or once the open
// it runs is done.
func (ss *session) endMeasuring() {
	ss.mmu.Lock()
	defer ss.mmu.Unlock()
	ss.ended = true
	if !ss.mbusy && ss.mconn != nil {
		ss.mconn.Close()
		ss.mconn = nil
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
