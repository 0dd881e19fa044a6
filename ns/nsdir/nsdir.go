// Package nsdir says where the namespace is posted: plan9port's namespace
// directory and the socket in it named "ollie".
//
// It is apart from ns so that a client finds the socket without linking the
// server: the ollie command, ns/client and the daemon all ask here.
//
// It trusts the environment ($NAMESPACE, $DISPLAY, $USER), as plan9port does.
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
