package ns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"ollie/internal/peer"
)

// checkPeer admits a Unix-socket peer only if it runs as the server's own
// OS user or as root: the socket is the trust boundary of the namespace.
// Such a peer is the Owner unless it runs with no_new_privs, the mark
// every Landlock-sandboxed process carries and cannot shed. A sandboxed
// peer whose parent is the server's own process is one the server
// started to read only (the appliance listener's read-only sessions,
// appliance): Remote, so that however many there are they take none of
// the connections agents' tools need. No tool is the daemon's child
// (toolsrv's child starts them, through a helper), and no process
// chooses its parent.
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
		ppid, err := parentPID(p.PID)
		if err != nil {
			return p, fmt.Errorf("ns: peer check: pid %d: %w", cred.Pid, err)
		}
		if ppid == os.Getpid() {
			p.Kind = Remote
		}
	}
	return p, nil
}

// parentPID reads process pid's parent from /proc.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no PPid line in /proc status")
}

func admitUID(uid, pid int) error {
	if me := os.Getuid(); uid != me && uid != 0 {
		return fmt.Errorf("ns: refused peer pid %d: uid %d is neither the server's uid %d nor root", pid, uid, me)
	}
	return nil
}
