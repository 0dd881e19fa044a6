package simhost

// Unix socket forwarding, both ways, as OpenSSH does it (PROTOCOL, section
// 2.4): a direct-streamlocal@openssh.com channel to the namespace's socket
// is served by the host's namespace in this process, as sshd would carry
// it to olliesrv's socket; streamlocal-forward@openssh.com listens on a
// real socket in the host's home (the keeper's broker socket, which the
// approval gate checks is one) and opens a forwarded-streamlocal channel
// back for each connection.

import (
	"path/filepath"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshsrv"
	"ollie/ns"
)

// socketPath makes a path relative to the home absolute, as sshd does with
// the user's working directory.
func (h *Host) socketPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(h.Home, p)
}

func (h *Host) directStreamLocal(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, _ gliderssh.Context) {
	path, err := sshsrv.DirectPath(nc)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "simhost: bad direct-streamlocal request: "+err.Error())
		return
	}
	if h.socketPath(path) != h.Socket() {
		nc.Reject(ssh.ConnectionFailed, "simhost: "+h.Name+" reaches no socket but its namespace's ("+h.Socket()+")")
		return
	}
	if !h.track() {
		nc.Reject(ssh.ResourceShortage, "the host is shutting down")
		return
	}
	defer h.channels.Done()
	h.mu.Lock()
	d := h.daemon
	h.mu.Unlock()
	if d == nil {
		// What sshd says when nothing listens on the socket.
		nc.Reject(ssh.ConnectionFailed, "connect: no such file or directory")
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	// sshd connects to the socket as the host's user: olliesrv sees its
	// owner, the admin.
	d.srv.ServeConn(ch, ns.Peer{Kind: ns.Owner, UID: h.uid})
}
