//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Kernel describes the running kernel's Landlock support.
type Kernel struct {
	ABI    int    // the Landlock ABI version; 0 when there is no Landlock
	Reason string // why there is none, when ABI is 0
}

func (k Kernel) String() string {
	if k.ABI == 0 {
		return "no Landlock: " + k.Reason
	}
	return fmt.Sprintf("Landlock ABI %d", k.ABI)
}

// Status reports that Landlock is not supported: it is Linux-only.
func Status() Kernel {
	return Kernel{Reason: "Landlock is not supported on this operating system (Linux only)"}
}

// apply enforces nothing: without Landlock only a best-effort policy runs.
func apply(p *Policy, tool string, ownProc bool) error { return check(0, p) }

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func growPipe(w *os.File, n int) error {
	if n > 16<<10 {
		return errors.New("policy larger than a pipe holds")
	}
	return nil
}
