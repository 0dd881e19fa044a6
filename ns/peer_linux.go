package ns

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkPeer admits a Unix-socket peer only if it runs as the server's own
// OS user or as root: the socket is the trust boundary of the namespace.
func checkPeer(nc net.Conn) error {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("ns: peer check: not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("ns: peer check: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("ns: peer check: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("ns: peer check: %w", cerr)
	}
	return admitUID(int(cred.Uid), int(cred.Pid))
}

func admitUID(uid, pid int) error {
	if me := os.Getuid(); uid != me && uid != 0 {
		return fmt.Errorf("ns: refused peer pid %d: uid %d is neither the server's uid %d nor root", pid, uid, me)
	}
	return nil
}
