package ns

// The trust model, decided here and nowhere else: what the transport
// proves about a peer says who its attaches are; the name a client puts in
// its Tattach never raises that.

// A PeerKind is what the transport proves about the client at the other
// end of a connection.
type PeerKind int

const (
	// Remote is a peer nothing vouches for, such as a TCP client, or one
	// the server started to read only (a sandboxed process whose parent
	// is the server: the appliance listener's read-only sessions): it
	// attaches as none, and none only reads.
	Remote PeerKind = iota
	// Sandboxed is the server's own OS user running with no_new_privs, as
	// every Landlock-sandboxed tool does: it acts as the principal its
	// attach proves to be through Server.Identify (an agent's capability),
	// and as none without one.
	Sandboxed
	// Owner is the server's own OS user or root, unsandboxed: the admin,
	// whatever name it attaches with (plan9port's 9p and 9pfuse attach
	// with the login name).
	Owner
)

func (k PeerKind) String() string {
	switch k {
	case Owner:
		return "owner"
	case Sandboxed:
		return "sandboxed"
	}
	return "remote"
}

// A Peer is the client at the other end of a connection, as far as the
// transport can tell.
type Peer struct {
	Kind PeerKind
	PID  int // from SO_PEERCRED on a Unix socket; 0 when unknown
	UID  int // from SO_PEERCRED on a Unix socket; -1 when unknown
}

// Principal names with a meaning of their own: no peer may become one by
// proving it, whatever Identify answers.
const (
	Admin = "admin" // the server's owner: bypasses permission checks
	None  = "none"  // the unauthenticated: reads what is world-readable
)

// principalFor decides who an attach is.
func (s *Server) principalFor(peer Peer, uname, aname string) principal {
	switch peer.Kind {
	case Owner:
		return principal{user: Admin, admin: true}
	case Sandboxed:
		if s.Identify != nil {
			if who := s.Identify(uname, aname); who != "" && who != Admin && who != None {
				return principal{user: who, inGroup: s.InGroup}
			}
		}
	}
	return principal{user: None, readOnly: true}
}
