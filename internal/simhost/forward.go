package simhost

// Unix socket forwarding, both ways, as OpenSSH does it (PROTOCOL, section
// 2.4): a direct-streamlocal@openssh.com channel to the namespace's socket
// is served by the host's namespace in this process, as sshd would carry
// it to olliesrv's socket; streamlocal-forward@openssh.com listens on a
// real socket in the host's home (the keeper's broker socket, which the
// approval gate checks is one) and opens a forwarded-streamlocal channel
// back for each connection.

import (
	"net"
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

func (h *Host) streamLocalForward(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	path, conn, ok := sshsrv.ForwardRequest(ctx, req)
	if !ok {
		return false, nil
	}
	// As sshd without StreamLocalBindUnlink: an existing file is in the way.
	ln, err := net.Listen("unix", h.socketPath(path))
	if err != nil {
		h.log.Info("simhost: streamlocal-forward", "path", path, "err", err)
		return false, nil
	}
	return h.fwd.Hold(ctx, conn, path, ln, func(c *net.UnixConn) { h.forwarded(conn, path, c) }), nil
}

// forwarded carries one connection to a forwarded socket back to the
// client.
func (h *Host) forwarded(conn *ssh.ServerConn, path string, c *net.UnixConn) {
	if !h.track() {
		c.Close()
		return
	}
	defer h.channels.Done()
	sshsrv.Reverse(conn, path, c)
}

func (h *Host) cancelStreamLocalForward(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	path, conn, ok := sshsrv.ForwardRequest(ctx, req)
	if !ok {
		return false, nil
	}
	return h.fwd.Remove(conn, path), nil
}
