package ns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// checkPeer admits a Unix-socket peer only if it runs as the server's own
// OS user or as root: the socket is the trust boundary of the namespace.
// It reports the peer trusted unless it runs with no_new_privs, the mark
// every Landlock-sandboxed process carries and cannot shed.
func checkPeer(nc net.Conn) (bool, error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return false, fmt.Errorf("ns: peer check: not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false, fmt.Errorf("ns: peer check: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return false, fmt.Errorf("ns: peer check: %w", err)
	}
	if cerr != nil {
		return false, fmt.Errorf("ns: peer check: %w", cerr)
	}
	if err := admitUID(int(cred.Uid), int(cred.Pid)); err != nil {
		return false, err
	}
	nnp, err := noNewPrivs(int(cred.Pid))
	if err != nil {
		return false, fmt.Errorf("ns: peer check: pid %d: %w", cred.Pid, err)
	}
	return !nnp, nil
}

// noNewPrivs reports whether process pid runs with no_new_privs.
func noNewPrivs(pid int) (bool, error) {
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

func admitUID(uid, pid int) error {
	if me := os.Getuid(); uid != me && uid != 0 {
		return fmt.Errorf("ns: refused peer pid %d: uid %d is neither the server's uid %d nor root", pid, uid, me)
	}
	return nil
}
