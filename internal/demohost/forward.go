package demohost

// Unix socket forwarding, both ways, as OpenSSH does it (PROTOCOL, section
// 2.4): direct-streamlocal@openssh.com channels reach a socket on the host
// (ollie-remote's tunnel to olliesrv), streamlocal-forward@openssh.com
// listens on a socket on the host and opens a
// forwarded-streamlocal@openssh.com channel back for each connection (the
// broker's way in). gliderlabs/ssh v0.3.8 has neither.

import (
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
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
	splice(ch, c.(*net.UnixConn))
}

// splice copies both ways, passing each side's EOF on, until both ends
// are done; then it closes both.
func splice(ch ssh.Channel, c *net.UnixConn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(c, ch)
		c.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		io.Copy(ch, c)
		ch.CloseWrite()
	}()
	wg.Wait()
	ch.Close()
	c.Close()
}

// forwards are the sockets a host listens on for its clients, by
// connection and path.
type forwards struct {
	mu sync.Mutex
	ls map[*ssh.ServerConn]map[string]net.Listener
}

func (f *forwards) add(conn *ssh.ServerConn, path string, ln net.Listener) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ls == nil {
		f.ls = map[*ssh.ServerConn]map[string]net.Listener{}
	}
	if f.ls[conn] == nil {
		f.ls[conn] = map[string]net.Listener{}
	}
	if _, dup := f.ls[conn][path]; dup {
		return false
	}
	f.ls[conn][path] = ln
	return true
}

// remove stops one forward, or every forward of conn when path is "".
func (f *forwards) remove(conn *ssh.ServerConn, path string) bool {
	f.mu.Lock()
	var ls []net.Listener
	for p, ln := range f.ls[conn] {
		if path == "" || p == path {
			ls = append(ls, ln)
			delete(f.ls[conn], p)
		}
	}
	if len(f.ls[conn]) == 0 {
		delete(f.ls, conn)
	}
	f.mu.Unlock()
	for _, ln := range ls {
		ln.Close() // a UnixListener it created removes the socket file
	}
	return len(ls) > 0
}

func (f *forwards) closeAll() {
	f.mu.Lock()
	var conns []*ssh.ServerConn
	for c := range f.ls {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		f.remove(c, "")
	}
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
	if !h.fwd.add(conn, msg.SocketPath, ln) {
		ln.Close()
		return false, nil
	}
	go func() {
		<-ctx.Done()
		h.fwd.remove(conn, "")
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
	ch, reqs, err := conn.OpenChannel("forwarded-streamlocal@openssh.com", ssh.Marshal(&struct {
		SocketPath string
		Reserved0  string
	}{SocketPath: path}))
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	splice(ch, c)
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
	return h.fwd.remove(conn, msg.SocketPath), nil
}
