//go:build !linux

package peer

import (
	"fmt"
	"net"
	"runtime"
)

// UID fails where this package cannot read peer credentials, so that a
// caller deciding trust from it refuses rather than guesses.
func UID(c net.Conn) (int, error) {
	return -1, fmt.Errorf("peer credentials are not supported on %s", runtime.GOOS)
}
