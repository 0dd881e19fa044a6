package appliance

// Unix socket forwarding as OpenSSH does it (PROTOCOL, section 2.4), to
// ollie's own sockets only. gliderlabs/ssh v0.3.8 has neither direction;
// internal/demohost does the same for any path.

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshsrv"

	"ollie/ns/nsdir"
)

// brokerSocket is the name ollie-remote's keeper gives the broker socket
// it forwards into the namespace directory (tunnel/keeper/register.go).
var brokerSocket = regexp.MustCompile(`^broker-[0-9a-f]{1,64}$`)

// modelsSocket is the desktop's models socket forwarded beside it
// (tunnel/keeper/models.go).
const modelsSocket = "models.sock"

// cleanAbs cleans an absolute path; a relative one (which sshd would
// take from the home directory) is left as it is, for the checks to
// refuse.
func cleanAbs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return p
}

// mayReach reports whether a direct-streamlocal may open path: the 9P
// socket alone.
func (s *Server) mayReach(path string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == filepath.Join(s.Namespace, nsdir.Service)
}

// mayListen reports whether a streamlocal-forward may listen on path:
// a broker-* or models.sock in the namespace directory.
func (s *Server) mayListen(path string) bool {
	if !filepath.IsAbs(path) || filepath.Dir(filepath.Clean(path)) != filepath.Clean(s.Namespace) {
		return false
	}
	base := filepath.Base(path)
	return base == modelsSocket || brokerSocket.MatchString(base)
}

// mayForward reports whether the connection's key may forward at all.
func mayForward(ctx gliderssh.Context) bool {
	l := loginOf(ctx)
	return l != nil && !l.grant.noFwd
}

func (s *Server) directStreamLocal(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, ctx gliderssh.Context) {
	path, err := sshsrv.DirectPath(nc)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "ollie: bad direct-streamlocal request")
		return
	}
	// The path checked is the path used: the kernel would resolve a
	// "dir/symlink/.." that Clean takes away.
	path = cleanAbs(path)
	if !mayForward(ctx) {
		s.refuse(ctx, "direct-streamlocal by a key that may not forward", "")
		nc.Reject(ssh.Prohibited, "ollie: this key may not forward sockets")
		return
	}
	if !s.mayReach(path) {
		s.refuse(ctx, "direct-streamlocal to "+path, "")
		nc.Reject(ssh.Prohibited, "ollie: only the namespace socket "+filepath.Join(s.Namespace, nsdir.Service)+" may be reached")
		return
	}
	if !s.track() {
		nc.Reject(ssh.ResourceShortage, "ollie: the listener is shutting down")
		return
	}
	defer s.work.Done()
	c, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "ollie: the namespace does not answer: "+err.Error())
		return
	}
	sshsrv.Accept(nc, c)
}

func (s *Server) streamLocalForward(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	path, conn, ok := sshsrv.ForwardRequest(ctx, req)
	if !ok {
		return false, nil
	}
	path = cleanAbs(path)
	if !mayForward(ctx) {
		s.refuse(ctx, "streamlocal-forward by a key that may not forward", "")
		return false, nil
	}
	if !s.mayListen(path) {
		s.refuse(ctx, "streamlocal-forward of "+path, "")
		return false, nil
	}
	ln, err := net.Listen("unix", path)
	if err != nil && s.staleSocket(path) {
		// A socket no forward of this listener holds is what a dead
		// listener (a restart) left: the client asking for an ollie path
		// now may replace it. OpenSSH's client would remove it over SFTP,
		// which here serves the namespace instead.
		os.Remove(path)
		ln, err = net.Listen("unix", path)
	}
	if err != nil {
		s.Log.Info("sshd: streamlocal-forward", "path", path, "err", err)
		return false, nil
	}
	return s.fwd.Hold(ctx, conn, path, ln, func(c *net.UnixConn) { s.forwarded(conn, path, c) }), nil
}

// staleSocket reports whether path is a socket that no connection of
// this listener forwards now.
func (s *Server) staleSocket(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return false
	}
	return !s.fwd.Holds(path)
}

// forwarded carries one connection to a forwarded socket back to the
// client.
func (s *Server) forwarded(conn *ssh.ServerConn, path string, c *net.UnixConn) {
	if !s.track() {
		c.Close()
		return
	}
	defer s.work.Done()
	sshsrv.Reverse(conn, path, c)
}

func (s *Server) cancelStreamLocalForward(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	path, conn, ok := sshsrv.ForwardRequest(ctx, req)
	if !ok {
		return false, nil
	}
	return s.fwd.Remove(conn, cleanAbs(path)), nil
}
