package paths

import (
	"encoding/json"
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

// TestQualifiedHost (issue 31, item 3): where the hosts of every keeper
// are shown at once, a name two keepers hold is NAME~TAG, TAG naming the
// keeper by its ssh configuration ("default", the -F file's base name, the
// directory's hash when two would share one), and ollie -H NAME~TAG
// reaches that keeper's host.
func TestQualifiedHost(t *testing.T) {
	rt := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", rt)
	os.Unsetenv("OLLIE_REMOTE_DIR")
	cfgs := []SSHConfig{NewSSHConfig("", nil), NewSSHConfig("/etc/lab config", nil), NewSSHConfig("/a/other", nil),
		NewSSHConfig("/b/other", nil), NewSSHConfig("", []string{"/k/known"})}
	var dirs []string
	for _, s := range cfgs {
		d := KeeperDir(s)
		os.MkdirAll(d, 0o700)
		b, _ := json.Marshal(s)
		os.WriteFile(filepath.Join(d, KeeperSSHFile), b, 0o600)
		dirs = append(dirs, d)
	}
	tags := KeeperTags(KeeperDirs())
	hash := func(d string) string { return strings.TrimPrefix(filepath.Base(d), "ollie-remote-") }
	want := []string{"default", "lab_config", "other-" + hash(dirs[2]), "other-" + hash(dirs[3]), "known"}
	for i, d := range dirs {
		if tags[d] != want[i] {
			t.Errorf("tag of %s: %q, want %q", cfgs[i], tags[d], want[i])
		}
	}
	for _, d := range dirs[:2] {
		l, err := net.Listen("unix", RemoteSocketIn(d, "h11"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if sock, _, ok := FindRemoteSocket("h11~lab_config"); !ok || sock != RemoteSocketIn(dirs[1], "h11") {
		t.Errorf("h11~lab_config: %s, %v", sock, ok)
	}
	if sock, _, ok := FindRemoteSocket("h11~default"); !ok || sock != RemoteSocketIn(dirs[0], "h11") {
		t.Errorf("h11~default: %s, %v", sock, ok)
	}
	if _, all, _ := FindRemoteSocket("h11~known"); len(all) != 0 {
		t.Errorf("h11~known, a keeper that holds no h11: %q", all)
	}
	if h, tag, ok := SplitQualified("user@h11~lab_config"); !ok || h != "user@h11" || tag != "lab_config" {
		t.Errorf("SplitQualified: %q %q %v", h, tag, ok)
	}
	if _, _, ok := SplitQualified("h11"); ok {
		t.Error("SplitQualified(h11) is qualified")
	}
}
