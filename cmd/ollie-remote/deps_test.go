package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoTesting: the desktop binary links no testing package. The
// scripted model of ollie-remote demo (agent/fakellm) is shared with the
// tests, and once took a testing.TB; any such import would put testing's
// flags and code into every user's binary.
func TestLinksNoTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-buildvcs=false", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "testing/") {
			t.Errorf("ollie-remote links %s; see go list -deps ./cmd/ollie-remote", p)
		}
	}
}
