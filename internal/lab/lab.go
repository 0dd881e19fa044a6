// Package lab tells a test which tier it runs in. make test (what CI runs,
// as root) sets OLLIE_LAB=1: that is the lab tier, where a test that needs
// root, sshd or sudo fails when the part is missing, so that nothing is
// skipped unnoticed. Plain go test is the other tier: there such a test
// skips, saying what it needs, so that the suite passes as an unprivileged
// user on any machine.
package lab

import (
	"os"
	"testing"
)

// Env is the variable that marks the lab tier.
const Env = "OLLIE_LAB"

// On reports whether this is the lab tier.
func On() bool { return os.Getenv(Env) != "" }

// Need ends t unless ok: a failure in the lab tier, a skip elsewhere. what
// says what the test needs and how to get it.
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if On() {
		t.Fatalf("lab tier: %s", what)
	}
	t.Skipf("%s (the lab tier runs it: make test, as root)", what)
}

// Root ends t, as Need does, unless the test runs as root; why says what
// root is needed for.
func Root(t testing.TB, why string) {
	t.Helper()
	Need(t, os.Geteuid() == 0, why+" needs root")
}
