package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// RemoteDir is the desktop directory where ollie-remote keeps its control
// socket and one forwarded namespace socket per host:
// $XDG_RUNTIME_DIR/ollie-remote, else /tmp/ollie-remote.UID. It is short
// on purpose: a socket path has at most 107 bytes.
func RemoteDir() string {
	if d := os.Getenv("OLLIE_REMOTE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ollie-remote")
	}
	return fmt.Sprintf("/tmp/ollie-remote.%d", os.Getuid())
}

var plainHost = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@:-]*$`)

// RemoteSocket is the local socket that reaches host's namespace while
// ollie-remote up holds it. A name that is not plain, or that would make
// the path too long, is replaced by a hash of it, so that two hosts never
// share a socket.
func RemoteSocket(host string) string {
	dir := RemoteDir()
	if p := filepath.Join(dir, host+".ns"); plainHost.MatchString(host) && len(p) <= 100 {
		return p
	}
	sum := sha256.Sum256([]byte(host))
	return filepath.Join(dir, "h-"+hex.EncodeToString(sum[:8])+".ns")
}
