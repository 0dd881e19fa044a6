package demohost

// Unix socket forwarding, both ways, as OpenSSH does it (PROTOCOL, section
// 2.4): direct-streamlocal@openssh.com channels reach a socket on the host
// (ollie-remote's tunnel to olliesrv), streamlocal-forward@openssh.com
// listens on a socket on the host and opens a
// forwarded-streamlocal@openssh.com channel back for each connection (the
// broker's way in). gliderlabs/ssh v0.3.8 has neither.

import (
	"net"
	"path/filepath"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshfwd"
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
	var msg struct {
		SocketPath string
		Reserved0  string
		Reserved1  uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil {
		nc.Reject(ssh.ConnectionFailed, "demohost: bad direct-streamlocal request: "+err.Error())
		return
	}
	if !h.track() {
		nc.Reject(ssh.ResourceShortage, "the host is shutting down")
		return
	}
	defer h.sessions.Done()
	c, err := net.DialTimeout("unix", h.socketPath(msg.SocketPath), 10*time.Second)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	sshfwd.Splice(ch, c.(*net.UnixConn))
}

func (h *Host) streamLocalForward(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	var msg struct{ SocketPath string }
	if ssh.Unmarshal(req.Payload, &msg) != nil {
		return false, nil
	}
	conn, ok := ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
	if !ok {
		return false, nil
	}
	// As sshd without StreamLocalBindUnlink: an existing file is in the way.
	path := h.socketPath(msg.SocketPath)
	ln, err := net.Listen("unix", path)
	if err != nil {
		h.log.Info("demohost: streamlocal-forward", "path", path, "err", err)
		return false, nil
	}
	if !h.fwd.Add(conn, msg.SocketPath, ln) {
		ln.Close()
		return false, nil
	}
	go func() {
		<-ctx.Done()
		h.fwd.Remove(conn, "")
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.forwarded(conn, msg.SocketPath, c.(*net.UnixConn))
		}
	}()
	return true, nil
}

// forwarded carries one connection to a forwarded socket back to the
// client.
func (h *Host) forwarded(conn *ssh.ServerConn, path string, c *net.UnixConn) {
	if !h.track() {
		c.Close()
		return
	}
	defer h.sessions.Done()
	sshfwd.Reverse(conn, path, c)
}

func (h *Host) cancelStreamLocalForward(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	var msg struct{ SocketPath string }
	if ssh.Unmarshal(req.Payload, &msg) != nil {
		return false, nil
	}
	conn, ok := ctx.Value(gliderssh.ContextKeyConn).(*ssh.ServerConn)
	if !ok {
		return false, nil
	}
	return h.fwd.Remove(conn, msg.SocketPath), nil
}
