package appliance

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ReadOnly drops the calling process to the namespace's read-only rights
// for good: with no_new_privs set, the 9P server sees a sandboxed peer
// (ns/trust.go), and one that proves no agent's capability attaches as
// none, who reads what is world-readable and writes nothing. A read-only
// key's commands call it before they connect; nothing can clear it.
func ReadOnly() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sshd: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	return nil
}
