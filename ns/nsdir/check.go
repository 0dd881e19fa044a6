package nsdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// What is wrong with a namespace directory, for errors.Is on a *DirError.
var (
	ErrNotYours   = errors.New("nsdir: the namespace directory belongs to another user")
	ErrSymlink    = errors.New("nsdir: the namespace directory is a symbolic link")
	ErrNotDir     = errors.New("nsdir: the namespace directory is not a directory")
	ErrNotPrivate = errors.New("nsdir: the namespace directory is open to other users")
)

// A DirError reports a namespace directory this user cannot trust. Its
// text names the directory, its owner and mode, and what to do; it has no
// program prefix, so that ollie and olliesrv each put theirs.
type DirError struct {
	Dir   string
	UID   int         // its owner (a symbolic link's own owner)
	Owner string      // the owner's name, "" if the uid has none
	Mode  fs.FileMode // from lstat: the type and permission bits
	Err   error       // ErrNotYours, ErrSymlink, ErrNotDir or ErrNotPrivate
}

func (e *DirError) Error() string {
	owner := fmt.Sprintf("uid %d", e.UID)
	if e.Owner != "" {
		owner = fmt.Sprintf("%s (uid %d)", e.Owner, e.UID)
	}
	perm := fmt.Sprintf("%#o", e.Mode.Perm())
	// Only its owner or root can remove another user's entry in /tmp
	// (the sticky bit); a directory of the user's own, the user can.
	remove := fmt.Sprintf("ask uid %d or root to remove it", e.UID)
	if e.Owner != "" {
		remove = "ask " + e.Owner + " or root to remove it"
	}
	if e.UID == os.Geteuid() {
		remove = "remove it"
	}
	switch e.Err {
	case ErrNotYours:
		return fmt.Sprintf("namespace directory %s (mode %s) is owned by %s, not by you (uid %d): another user made it, so it is not your namespace; %s, or set NAMESPACE to a directory of your own",
			e.Dir, perm, owner, os.Geteuid(), remove)
	case ErrSymlink:
		return fmt.Sprintf("namespace directory %s is a symbolic link made by %s: the namespace must be a directory of your own, not a link; %s, or set NAMESPACE to a directory of your own",
			e.Dir, owner, remove)
	case ErrNotDir:
		return fmt.Sprintf("namespace directory %s is not a directory (mode %v, owned by %s); %s, or set NAMESPACE to a directory of your own",
			e.Dir, e.Mode, owner, remove)
	case ErrNotPrivate:
		if e.Mode.Perm()&0022 != 0 {
			return fmt.Sprintf("namespace directory %s is writable by other users (mode %s), who may have left files in it: look, then remove it, or chmod 700 it, or set NAMESPACE to a directory of your own",
				e.Dir, perm)
		}
		return fmt.Sprintf("namespace directory %s is open to other users (mode %s): it must be 0700; chmod 700 it (olliesrv does when it starts)",
			e.Dir, perm)
	}
	return fmt.Sprintf("namespace directory %s: %v", e.Dir, e.Err)
}

func (e *DirError) Unwrap() error { return e.Err }

// Check reports whether dir is this user's own private namespace
// directory: a directory, not a symbolic link (it is not followed), owned
// by the effective uid, and closed to group and others. Otherwise the
// error is a *DirError, or the lstat's own error (fs.ErrNotExist when
// there is no such directory).
//
// plan9port refuses a /tmp/ns.* directory that is not 0700 and the
// user's, and follows a link; ollie refuses a link too, and checks
// $NAMESPACE as well as /tmp/ns.*.
func Check(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	return check(dir, fi, 0077)
}

// check judges dir from its lstat or fstat, refusing any of the
// permission bits in closed.
func check(dir string, fi fs.FileInfo, closed fs.FileMode) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("nsdir: %s: no owner in its stat", dir)
	}
	e := &DirError{Dir: dir, UID: int(st.Uid), Owner: ownerName(int(st.Uid)), Mode: fi.Mode()}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Err = ErrSymlink
	case !fi.IsDir():
		e.Err = ErrNotDir
	case e.UID != os.Geteuid():
		e.Err = ErrNotYours
	case fi.Mode().Perm()&closed != 0:
		e.Err = ErrNotPrivate
	default:
		return nil
	}
	return e
}

// Prepare makes dir the daemon's namespace directory, mode 0700, or
// refuses one it cannot trust, with a *DirError that says what to do.
//
// It does not follow a symbolic link at dir, and refuses another user's
// directory. A directory of the user's own that other users can write in
// is refused too: they may have left a socket or a lock there. One that
// others can only read or search is made 0700, through a descriptor of
// the directory itself, so that the mode changed is the one checked.
func Prepare(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0700); err != nil {
		return fmt.Errorf("nsdir: namespace directory: %w", err)
	}
	if err := os.Mkdir(dir, 0700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("nsdir: namespace directory: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// A link, another user's directory, a file: say which.
		if cerr := Check(dir); cerr != nil {
			return cerr
		}
		return fmt.Errorf("nsdir: namespace directory %s: %w", dir, &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("nsdir: namespace directory: %w", err)
	}
	if err := check(dir, fi, 0022); err != nil {
		return err
	}
	if fi.Mode().Perm()&0077 != 0 {
		if err := f.Chmod(0700); err != nil {
			return fmt.Errorf("nsdir: namespace directory %s: make it private: %w", dir, err)
		}
	}
	return nil
}

// ownerName is uid's login name, or "".
func ownerName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}
