package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"ollie/appliance"
	"ollie/internal/lab"
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
	key := filepath.Join(os.Getenv("XDG_STATE_HOME"), "ollie", appliance.HostKeyFile)
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0600 {
		t.Fatalf("host key %s: %v %v, want 0600", key, st, err)
	}
	_, err := exec.LookPath("ssh-keygen")
	lab.Need(t, err == nil, "ssh-keygen (openssh-client), to compare the fingerprint with")
	kg, err := exec.Command("ssh-keygen", "-lf", key).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -lf: %v", err)
	}
	if want := strings.Fields(string(kg))[1]; strings.Fields(out1.String())[1] != want {
		t.Errorf("ssh-fingerprint says %q, ssh-keygen -lf says %q", out1.String(), kg)
	}
}

// TestConfigFile: olliesrv.yaml is read strictly, each error naming the
// file; a missing file is no error.
func TestConfigFile(t *testing.T) {
	conf := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", conf)
	if c, _, err := loadConfig(); err != nil || c.SSH != "" {
		t.Fatalf("no file: %+v %v", c, err)
	}
	file := filepath.Join(conf, "ollie", ConfigFile)
	os.MkdirAll(filepath.Dir(file), 0700)
	for text, want := range map[string]string{
		"ssh: :2222\n":            "",
		"shh: :2222\n":            `field shh not found`,
		"ssh: [1, 2]\n":           "cannot unmarshal",
		"ssh: :1\n---\nssh: :2\n": "more than one YAML document",
	} {
		os.WriteFile(file, []byte(text), 0600)
		c, _, err := loadConfig()
		switch {
		case want == "" && (err != nil || c.SSH != ":2222"):
			t.Errorf("%q: %+v %v", text, c, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file)):
			t.Errorf("%q: %v, want an error naming %s and saying %q", text, err, file, want)
		}
	}
}
