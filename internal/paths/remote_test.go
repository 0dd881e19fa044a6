package paths

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeeperDir: the default ssh configuration's keeper lives in
// RemoteDir, another configuration's in a sibling named by its hash (the
// same from any working directory), and OLLIE_REMOTE_DIR names the one
// directory for every configuration.
func TestKeeperDir(t *testing.T) {
	rt := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", rt)
	os.Unsetenv("OLLIE_REMOTE_DIR")
	base := filepath.Join(rt, "ollie-remote")
	if d := KeeperDir(NewSSHConfig("", nil)); d != base {
		t.Errorf("default: %s, want %s", d, base)
	}
	a := KeeperDir(NewSSHConfig("/etc/a_config", nil))
	b := KeeperDir(NewSSHConfig("/etc/b_config", nil))
	ak := KeeperDir(NewSSHConfig("/etc/a_config", []string{"/etc/known"}))
	if a == b || a == ak || !strings.HasPrefix(a, base+"-") || len(a) != len(base)+13 {
		t.Errorf("-F a: %s, -F b: %s, -F a -known-hosts: %s", a, b, ak)
	}
	wd, _ := os.Getwd()
	t.Chdir("/etc")
	if r := KeeperDir(NewSSHConfig("a_config", nil)); r != a {
		t.Errorf("a relative -F from /etc: %s, want %s", r, a)
	}
	t.Chdir(wd)
	if s := NewSSHConfig("/etc/a_config", []string{"/k"}); s.String() != "-F /etc/a_config -known-hosts /k" || NewSSHConfig("", nil).String() != "the default ssh configuration" {
		t.Errorf("names: %q", s)
	}

	// Two keepers hold an h11: which one is for the caller to say.
	for _, d := range []string{base, b} {
		os.MkdirAll(d, 0o700)
		l, err := net.Listen("unix", RemoteSocketIn(d, "h11"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if got := KeeperDirs(); len(got) != 2 || got[0] != base || got[1] != b {
		t.Errorf("KeeperDirs: %q", got)
	}
	// A sibling others may reach is not a keeper's.
	open := base + "-0123456789ab"
	os.Mkdir(open, 0o755)
	if got := KeeperDirs(); len(got) != 2 {
		t.Errorf("KeeperDirs with a directory others may write: %q", got)
	}
	if _, all, ok := FindRemoteSocket("h11"); ok || len(all) != 2 {
		t.Errorf("h11 held twice: %q, %v", all, ok)
	}
	if sock, _, ok := FindRemoteSocket("h12"); !ok || sock != RemoteSocket("h12") {
		t.Errorf("h12 held by none: %s, %v", sock, ok)
	}

	t.Setenv("OLLIE_REMOTE_DIR", "/tmp/orx")
	if d := KeeperDir(NewSSHConfig("/etc/b_config", nil)); d != "/tmp/orx" {
		t.Errorf("with OLLIE_REMOTE_DIR: %s", d)
	}
	if got := KeeperDirs(); len(got) != 1 || got[0] != "/tmp/orx" {
		t.Errorf("KeeperDirs with OLLIE_REMOTE_DIR: %q", got)
	}
}
