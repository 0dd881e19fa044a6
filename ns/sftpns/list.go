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
// be read, the length of a fid open on it: a snapshot's size, or how much
// of a stream has been written. A file not open has length 0 in 9P, which
// would hide a stream's growth from a client (tail -f over sshfs) that
// reads only when the size changes.
func (ss *session) stat(name string) (*plan9.Dir, error) {
	d, err := ss.conn.Stat(background, name)
	if err != nil {
		return nil, errNotExist(err)
	}
	if d.Qid.Type&plan9.QTDIR != 0 || d.Mode&0444 == 0 {
		return d, nil
	}
	f, err := ss.conn.Open(background, name, plan9.OREAD)
	if err != nil {
		// Not readable by this principal, or not at all: 9P's answer
		// stands.
		return d, nil
	}
	defer f.Close()
	if od, err := f.Stat(background); err == nil {
		d.Length = od.Length
	}
	return d, nil
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
