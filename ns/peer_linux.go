package ns

import (
	"fmt"
	"net"
	"os"

	"ollie/internal/peer"
)

// checkPeer admits a Unix-socket peer only if it runs as the server's own
// OS user or as root: the socket is the trust boundary of the namespace.
// Such a peer is the Owner unless it runs with no_new_privs, the mark
// every Landlock-sandboxed process carries and cannot shed.
func checkPeer(nc net.Conn) (Peer, error) {
	p := Peer{Kind: Remote, UID: -1}
	cred, err := peer.Cred(nc)
	if err != nil {
		return p, fmt.Errorf("ns: peer check: %w", err)
	}
	p.PID, p.UID = int(cred.Pid), int(cred.Uid)
	if err := admitUID(p.UID, p.PID); err != nil {
		return p, err
	}
	nnp, err := peer.NoNewPrivs(p.PID)
	if err != nil {
		return p, fmt.Errorf("ns: peer check: pid %d: %w", cred.Pid, err)
	}
	p.Kind = Owner
	if nnp {
		p.Kind = Sandboxed
	}
	return p, nil
}

func admitUID(uid, pid int) error {
	if me := os.Getuid(); uid != me && uid != 0 {
		return fmt.Errorf("ns: refused peer pid %d: uid %d is neither the server's uid %d nor root", pid, uid, me)
	}
	return nil
}
