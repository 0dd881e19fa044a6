// Package peer reads who is at the other end of a Unix socket: the
// credentials the kernel vouches for (SO_PEERCRED) and whether that
// process runs with no_new_privs, the mark every Landlock-sandboxed tool
// carries and cannot shed. The namespace socket and the approval gate
// both decide trust from it, and the namespace client decides from it
// whom it dialled (UID).
package peer

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Cred returns the peer's pid, uid and gid.
func Cred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// NoNewPrivs reports whether process pid runs with no_new_privs.
func NoNewPrivs(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, errors.New("no NoNewPrivs line in /proc status")
}

// UID returns the uid the kernel vouches for at the other end of c: the
// effective uid of the process that made its end (for a connection
// dialled to a listener, the one that listened).
func UID(c net.Conn) (int, error) {
	cred, err := Cred(c)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
