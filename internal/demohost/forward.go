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

	"ollie/internal/sshsrv"
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
		nc.Reject(ssh.ConnectionFailed, "demohost: bad direct-streamlocal request: "+err.Error())
		return
	}
	if !h.track() {
		nc.Reject(ssh.ResourceShortage, "the host is shutting down")
		return
	}
	defer h.sessions.Done()
	c, err := net.DialTimeout("unix", h.socketPath(path), 10*time.Second)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	sshsrv.Accept(nc, c)
}
