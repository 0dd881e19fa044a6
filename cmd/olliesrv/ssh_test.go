package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ollie/ns/sshd"
)

// TestSSHFingerprint: the host key is made once, 0600, in the state
// directory, and ssh-fingerprint prints what ssh-keygen -lf prints of it.
func TestSSHFingerprint(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	var out1, out2, errOut bytes.Buffer
	if code := olliesrvMain([]string{"ssh-fingerprint"}, &out1, &errOut); code != 0 {
		t.Fatalf("ssh-fingerprint: exit %d: %s", code, errOut.String())
	}
	if code := olliesrvMain([]string{"ssh-fingerprint"}, &out2, &errOut); code != 0 || out1.String() != out2.String() {
		t.Fatalf("ssh-fingerprint again: exit %d, %q then %q: the key changed", code, out1.String(), out2.String())
	}
	if !regexp.MustCompile(`^256 SHA256:[A-Za-z0-9+/]{43} olliesrv@\S* \(ED25519\)\n$`).MatchString(out1.String()) {
		t.Errorf("ssh-fingerprint printed %q", out1.String())
	}
	key := filepath.Join(os.Getenv("XDG_STATE_HOME"), "ollie", sshd.HostKeyFile)
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0600 {
		t.Fatalf("host key %s: %v %v, want 0600", key, st, err)
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("no ssh-keygen to compare with")
	}
	kg, err := exec.Command("ssh-keygen", "-lf", key).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -lf: %v", err)
	}
	if want := strings.Fields(string(kg))[1]; strings.Fields(out1.String())[1] != want {
		t.Errorf("ssh-fingerprint says %q, ssh-keygen -lf says %q", out1.String(), kg)
	}
}
