package sftpns

import (
	"9fans.net/go/plan9"
	"github.com/pkg/sftp"
)

// Filecmd answers the commands. The namespace's files are declared by
// olliesrv, so nothing here creates, removes or renames one; a setstat is
// accepted as a no-op only where it is what a shell or sshfs sends before
// writing (truncate to 0, set times) to a file that takes writes.
func (ss *session) Filecmd(r *sftp.Request) error {
	switch r.Method {
	case "Setstat":
		return ss.setstat(r)
	case "Rename", "PosixRename":
		return refuse("rename", r.Filepath, "the namespace's names are olliesrv's", sftp.ErrSSHFxOpUnsupported)
	case "Remove", "Rmdir":
		return refuse("remove", r.Filepath, "the namespace's files are declared by olliesrv, not removed by clients", sftp.ErrSSHFxOpUnsupported)
	case "Mkdir":
		return refuse("mkdir", r.Filepath, "the namespace's directories are declared by olliesrv, not made by clients", sftp.ErrSSHFxOpUnsupported)
	case "Link", "Symlink":
		return refuse("link", r.Filepath, "the namespace has no links", sftp.ErrSSHFxOpUnsupported)
	}
	return refuse(lower(r.Method), r.Filepath, "not supported by the namespace", sftp.ErrSSHFxOpUnsupported)
}

func (ss *session) setstat(r *sftp.Request) error {
	if ss.srv.ReadOnly {
		return refuse("setstat", r.Filepath, "this session is read-only", sftp.ErrSSHFxPermissionDenied)
	}
	flags := r.AttrFlags()
	if flags.Permissions || flags.UidGid {
		return refuse("setstat", r.Filepath, "modes and owners are declared by olliesrv", sftp.ErrSSHFxPermissionDenied)
	}
	if flags.Size && r.Attributes().Size != 0 {
		return refuse("truncate", r.Filepath, "a namespace file has no length to set; writes are requests", sftp.ErrSSHFxPermissionDenied)
	}
	d, err := ss.conn.Stat(background, r.Filepath)
	if err != nil {
		return errNotExist(err)
	}
	if d.Qid.Type&plan9.QTDIR != 0 || d.Mode&0222 == 0 {
		return refuse("setstat", r.Filepath, "the file takes no writes", sftp.ErrSSHFxPermissionDenied)
	}
	return nil
}
