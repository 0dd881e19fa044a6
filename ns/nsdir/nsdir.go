// Package nsdir says where the namespace is posted: plan9port's namespace
// directory and the socket in it named "ollie".
//
// It is apart from ns so that a client finds the socket without linking the
// server: the ollie command, ns/client and the daemon all ask here.
//
// It trusts the environment ($NAMESPACE, $DISPLAY, $USER), as plan9port
// does, but not the directory those name: /tmp is shared, and another
// local user can make /tmp/ns.$USER.$DISPLAY before this user does, with
// a socket of its own in it. So the directory must be this user's own
// (the effective uid), a real directory rather than a symbolic link (an
// lstat, never followed), and closed to group and others, as plan9port
// requires of /tmp/ns.* (it asks for exactly 0700); ollie asks the same
// of $NAMESPACE.
//
// Check is the clients' test, made before they dial the socket (they then
// check the socket's peer too: ns/client). Prepare is the daemon's: it
// makes the directory 0700, refuses another user's directory or a link,
// refuses a directory of the user's own that others can write in (they
// may have left a socket or a lock there), and makes one that others can
// only read or search 0700. Either refusal is a *DirError naming the
// directory, its owner and mode, and what to do.
package nsdir

import (
	"fmt"
	"os"
	"os/user"
	"regexp"
	"strings"
)

// Service is the name the namespace is posted under in the namespace
// directory, so that Plan 9 tools find it as "ollie".
const Service = "ollie"

var dotZero = regexp.MustCompile(`\A(.*:\d+)\.0\z`)

// NamespaceDir returns the directory plan9port's namespace command names:
// $NAMESPACE, else /tmp/ns.$USER.$DISPLAY with DISPLAY defaulting to :0.
func NamespaceDir() string {
	if ns := os.Getenv("NAMESPACE"); ns != "" {
		return ns
	}
	disp := os.Getenv("DISPLAY")
	if disp == "" {
		disp = ":0"
	}
	if m := dotZero.FindStringSubmatch(disp); m != nil {
		disp = m[1]
	}
	disp = strings.ReplaceAll(disp, "/", "_")
	return fmt.Sprintf("/tmp/ns.%s.%s", userName(), disp)
}

// SocketPath returns the path of the namespace's Unix socket.
func SocketPath() string { return NamespaceDir() + "/" + Service }

func userName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprint(os.Getuid())
}
