package ns

import (
	"fmt"
	"net"
	"os"

	"ollie/internal/peer"
)

// checkPeer admits a Unix-socket peer only if it runs as the server's own
// OS user or as root: the socket is the trust boundary of the namespace.
// It reports the peer trusted unless it runs with no_new_privs, the mark
// every Landlock-sandboxed process carries and cannot shed.
func checkPeer(nc net.Conn) (bool, error) {
	cred, err := peer.Cred(nc)
	if err != nil {
		return false, fmt.Errorf("ns: peer check: %w", err)
	}
	if err := admitUID(int(cred.Uid), int(cred.Pid)); err != nil {
		return false, err
	}
	nnp, err := peer.NoNewPrivs(int(cred.Pid))
	if err != nil {
		return false, fmt.Errorf("ns: peer check: pid %d: %w", cred.Pid, err)
	}
	return !nnp, nil
}

func admitUID(uid, pid int) error {
	if me := os.Getuid(); uid != me && uid != 0 {
		return fmt.Errorf("ns: refused peer pid %d: uid %d is neither the server's uid %d nor root", pid, uid, me)
	}
	return nil
}
