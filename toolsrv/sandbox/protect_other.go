//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
)

const nsProbeArg = "nsprobe"

func nsProbeMain() { os.Exit(1) }

// Protection: elsewhere there is no mount namespace, so a call whose
// writable directory holds a protected path is refused.
type Protection struct {
	Mounts  bool
	Reason  string
	OwnProc bool
}

func (p Protection) String() string {
	return "protected paths kept by refusing a writable directory that holds one (" + p.Reason + ")"
}

func HostProtection() Protection { return Protection{Reason: "mount namespaces are Linux's"} }

func protectCall(p *Policy, ns string) error {
	if len(p.Protect) == 0 {
		return nil
	}
	ops, err := plan(p.writable(), p.Protect)
	if err != nil || len(ops) == 0 {
		return err
	}
	return &ProtectError{Dir: ops[len(ops)-1].Path, Protected: p.Protect[0], Reason: "no mount namespace"}
}

func enterDir(p *Policy, dir string) error { return os.Chdir(dir) }

func dropCaps() error { return nil }

// A call's own pid namespace and /proc are Linux's.
var procMounted bool

func mountProc() error { return errors.New("sandbox: a call's own /proc is Linux's") }

func initCall(tool string, argv, env []string) error {
	return errors.New("sandbox: a call's own pid namespace is Linux's")
}

func execError(tool string, err error) error { return fmt.Errorf("sandbox: exec %s: %w", tool, err) }

func Identify(path string) (FileID, error) {
	return FileID{}, errors.New("sandbox: file identity is Linux's")
}
