package appliance

import (
	"sync"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
)

// maxRefusalsLogged bounds the memory of what was logged: past it, new
// refusals are logged again rather than remembered.
const maxRefusalsLogged = 4096

// refusals remember what was logged, so that each refusal is logged once
// per kind, key fingerprint and source address: a client retrying in a
// loop writes one line, not one a second.
type refusals struct {
	mu   sync.Mutex
	seen map[[3]string]bool
}

func (r *refusals) first(kind, fp, from string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [3]string{kind, fp, from}
	if r.seen[k] {
		return false
	}
	if r.seen == nil || len(r.seen) >= maxRefusalsLogged {
		r.seen = map[[3]string]bool{}
	}
	r.seen[k] = true
	return true
}

// refuse logs a refusal of kind, once. fp is the key's fingerprint, or ""
// to take the connection's.
func (s *Server) refuse(ctx gliderssh.Context, kind, fp string) {
	if fp == "" {
		if l := loginOf(ctx); l != nil {
			fp = l.fingerprint
		}
	}
	from := ""
	if a := ctx.RemoteAddr(); a != nil {
		from = a.String()
		if ip := hostIP(a); ip != nil {
			from = ip.String() // a new source port is the same client
		}
	}
	if s.refused.first(kind, fp, from) {
		s.Log.Warn("sshd: refused", "what", kind, "key", fp, "from", from)
	}
}

// otherChannel refuses every channel type not served: direct-tcpip (-L),
// x11, auth-agent@openssh.com, tun@openssh.com.
func (s *Server) otherChannel(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, ctx gliderssh.Context) {
	s.refuse(ctx, "channel "+nc.ChannelType(), "")
	nc.Reject(ssh.Prohibited, "ollie: "+nc.ChannelType()+" is not served here: this listener serves ollie only")
}

// otherRequest refuses every global request not served: tcpip-forward
// (-R) among them. Keepalives are answered with a failure too, without a
// log line: any answer tells the client the server is alive.
func (s *Server) otherRequest(ctx gliderssh.Context, _ *gliderssh.Server, req *ssh.Request) (bool, []byte) {
	switch req.Type {
	case "keepalive@openssh.com", "no-more-sessions@openssh.com", "hostkeys-prove-00@openssh.com":
	default:
		s.refuse(ctx, "request "+req.Type, "")
	}
	return false, nil
}
