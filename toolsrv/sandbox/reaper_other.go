//go:build !linux

package sandbox

import (
	"os"
	"syscall"
)

// killSignal: elsewhere the helper execs the tool in its own place, so
// killing it kills the tool.
const killSignal = syscall.SIGKILL

// supervise execs the tool in place: only Linux has a subreaper, limits
// and Landlock, and without Landlock only a best-effort policy runs.
func supervise(data []byte, p *Policy, args []string) (int, error) {
	return 0, confine(p, "-", "", args[1], args[1:], os.Environ(), nil, nil)
}

func setLimits(Limits) error { return nil }

func limitsEnforcement(l Limits) (applied, missing []string) {
	return nil, []string{"limits (" + l.String() + ") are applied on Linux only"}
}
