package shell

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

// remoteSocket is the local socket "ollie-remote up" keeps for host (ollie
// -H). A keeper holds hosts of one ssh configuration, so keepers of two
// may each hold a host of that name, which may be two machines: then the
// one whose socket answers, or, when both do, an error naming them as
// HOST~TAG (which reaches that keeper's, as in the fleet namespace) and
// with OLLIE_REMOTE_DIR. The fleet namespace is the same whichever keeper
// serves it: the first that answers. When none holds it, the default
// keeper's socket, which is missing.
func remoteSocket(host string) (string, error) {
	sock, all, ok := paths.FindRemoteSocket(host)
	if ok {
		return sock, nil
	}
	var live []string
	for _, p := range all {
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			c.Close()
			live = append(live, p)
		}
	}
	switch {
	case len(live) == 0:
		return all[0], nil // dialling it says that nothing answers
	case len(live) == 1, host == paths.FleetHost:
		return live[0], nil
	}
	tags := paths.KeeperTags(paths.KeeperDirs())
	var b strings.Builder
	fmt.Fprintf(&b, "ollie-remote up holds a host named %s with %d ssh configurations; choose one:", termsafe.Line(host), len(live))
	for _, p := range live {
		dir := filepath.Dir(p)
		what := "an ssh configuration not recorded"
		if s, err := paths.KeeperSSH(dir); err == nil {
			what = s.String()
		}
		fmt.Fprintf(&b, "\n  ollie -H %s ...   (up with %s; or OLLIE_REMOTE_DIR=%s ollie -H %s ...)",
			termsafe.Line(paths.QualifiedHost(host, tags[dir])), what, dir, termsafe.Line(host))
	}
	return "", errors.New(b.String())
}
