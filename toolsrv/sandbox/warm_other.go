//go:build !linux

package sandbox

import (
	"fmt"
	"os"
)

// Pre-started helpers run on Linux only: NewPool returns nil elsewhere.

func warmMain()        { warmUnsupported() }
func warmConfineMain() { warmUnsupported() }

func warmUnsupported() {
	fmt.Fprintln(os.Stderr, "sandbox: pre-started helpers run on Linux only")
	os.Exit(126)
}

func closeAllOnExec() {}

type prepared struct{ policy *Policy }

func applyPrepared(p *Policy, prep *prepared, extra []PathRule, tool string, ownProc bool) error {
	return apply(p, tool, ownProc)
}
