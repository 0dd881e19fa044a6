package sshsrv

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
)

// A Loopback is an SSH server on a fresh 127.0.0.1 port with a fresh
// ed25519 host key: a host inside the process, as the demo's hosts
// (internal/demohost) and the benchmark's simulated ones
// (internal/simhost) are.
type Loopback struct {
	Srv     *gliderssh.Server
	Port    int
	HostKey ssh.PublicKey
	// Served is closed once Srv has stopped serving.
	Served chan struct{}
}

// ServeLoopback starts a Loopback that lets in what auth allows, answers
// the channels and global requests named (any other request with a
// failure, as sshd answers keepalive@openssh.com) and logs failed
// connections to log.
func ServeLoopback(version string, auth gliderssh.PublicKeyHandler, channels map[string]gliderssh.ChannelHandler,
	requests map[string]gliderssh.RequestHandler, log *slog.Logger) (*Loopback, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Loopback{Port: ln.Addr().(*net.TCPAddr).Port, HostKey: signer.PublicKey(), Served: make(chan struct{})}
	l.Srv = &gliderssh.Server{
		HostSigners:      []gliderssh.Signer{signer},
		Version:          version,
		PublicKeyHandler: auth,
		ChannelHandlers:  channels,
		RequestHandlers:  requests,
		ConnectionFailedCallback: func(c net.Conn, err error) {
			log.Info("ssh: connection failed", "remote", c.RemoteAddr(), "err", err)
		},
	}
	go func() {
		defer close(l.Served)
		l.Srv.Serve(ln)
	}()
	return l, nil
}

// Handlers answers streamlocal-forward@openssh.com and its cancel as sshd
// does without StreamLocalBindUnlink (a file in the way refuses the
// forward): a forward of path listens at where(path), and each
// connection to it is carried back to the client with Reverse while
// track says the server still takes work (then done is called once it is
// carried).
func (f *Forwards) Handlers(where func(path string) string, track func() (done func(), ok bool), log *slog.Logger) map[string]gliderssh.RequestHandler {
	forward := func(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
		path, conn, ok := ForwardRequest(ctx, req)
		if !ok {
			return false, nil
		}
		ln, err := net.Listen("unix", where(path))
		if err != nil {
			log.Info("ssh: streamlocal-forward", "path", path, "err", err)
			return false, nil
		}
		return f.Hold(ctx, conn, path, ln, func(c *net.UnixConn) {
			done, ok := track()
			if !ok {
				c.Close()
				return
			}
			defer done()
			Reverse(conn, path, c)
		}), nil
	}
	cancel := func(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
		path, conn, ok := ForwardRequest(ctx, req)
		if !ok {
			return false, nil
		}
		return f.Remove(conn, path), nil
	}
	return map[string]gliderssh.RequestHandler{
		"streamlocal-forward@openssh.com":        forward,
		"cancel-streamlocal-forward@openssh.com": cancel,
	}
}
