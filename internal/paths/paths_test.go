package paths

import (
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

func TestSearch(t *testing.T) {
	user, deployed := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(deployed, "default.yaml"), []byte("deployed"), 0644)
	os.WriteFile(filepath.Join(deployed, "ops.yaml"), []byte("ops"), 0644)
	os.WriteFile(filepath.Join(user, "default.yaml"), []byte("mine"), 0644)
	os.WriteFile(filepath.Join(user, "notes.txt"), []byte("x"), 0644)
	s := Search{Dirs: []string{user, filepath.Join(user, "missing"), deployed}, Ext: ".yaml"}
	file, data, err := s.Find("default")
	if err != nil || string(data) != "mine" || file != filepath.Join(user, "default.yaml") {
		t.Errorf("Find(default) = %q %q %v; the user's file should win", file, data, err)
	}
	if _, data, _ := s.Find("ops"); string(data) != "ops" {
		t.Errorf("Find(ops) = %q", data)
	}
	for _, bad := range []string{"nosuch", "../x", "a/b", ""} {
		if _, _, err := s.Find(bad); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Find(%q): %v", bad, err)
		}
	}
	if got := strings.Join(s.Names(), ","); got != "default,ops" {
		t.Errorf("Names = %s", got)
	}
}

func TestDataDir(t *testing.T) {
	t.Setenv("OLLIE_DATA", "/srv/ollie/data")
	if d := DataDir(); d != "/srv/ollie/data" {
		t.Errorf("DataDir with OLLIE_DATA = %s", d)
	}
	t.Setenv("OLLIE_DATA", "")
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	if d := DataDir(); d != filepath.Join(filepath.Dir(filepath.Dir(exe)), "data") {
		t.Errorf("DataDir = %s", d)
	}
	t.Setenv("XDG_CONFIG_HOME", "/home/u/.config")
	if ds := Defaults("agents"); len(ds) != 2 || ds[0] != "/home/u/.config/ollie/agents" || !strings.HasSuffix(ds[1], "/data/agents") {
		t.Errorf("Defaults = %v", ds)
	}
}

func TestRemoteSocket(t *testing.T) {
	t.Setenv("OLLIE_REMOTE_DIR", "/tmp/orx")
	if got := RemoteSocket("web1"); got != "/tmp/orx/web1.ns" {
		t.Errorf("RemoteSocket(web1) = %q", got)
	}
	long := strings.Repeat("h", 200)
	for _, h := range []string{"a/b", "a_b/..", long, "../x"} {
		got := RemoteSocket(h)
		if len(got) > 107 || filepath.Dir(got) != "/tmp/orx" || !strings.HasPrefix(filepath.Base(got), "h-") {
			t.Errorf("RemoteSocket(%q) = %q", h, got)
		}
	}
	if RemoteSocket("a/b") == RemoteSocket("a_b") {
		t.Error("two hosts share a socket")
	}
}

// One rule for where state lives, everywhere: an absolute XDG_STATE_HOME,
// else the home's .local/state; a relative one is ignored; with no HOME,
// the password database's home, never a shared directory another user
// could make first.
func TestStateDir(t *testing.T) {
	pw, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	pwState := filepath.Join(pw.HomeDir, ".local", "state", "ollie")
	for _, c := range []struct {
		xdg, home, want string
	}{
		{"/xdg", "/home/u", "/xdg/ollie"},
		{"", "/home/u", "/home/u/.local/state/ollie"},
		{"rel/state", "/home/u", "/home/u/.local/state/ollie"},
		{"", "", pwState},
		{"rel", "also/relative", pwState},
	} {
		t.Setenv("XDG_STATE_HOME", c.xdg)
		t.Setenv("HOME", c.home)
		got, err := StateDir()
		if c.want == "" {
			if err == nil || got != "" {
				t.Errorf("XDG_STATE_HOME=%q HOME=%q: %q, %v; want an error", c.xdg, c.home, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("XDG_STATE_HOME=%q HOME=%q: %q, %v; want %q", c.xdg, c.home, got, err, c.want)
		}
	}
}

// The configuration directory follows the same rule: an absolute
// XDG_CONFIG_HOME, else the home's .config; nothing with neither.
func TestConfigDirFrom(t *testing.T) {
	for _, c := range []struct{ xdg, home, want string }{
		{"/xdg", "/home/u", "/xdg/ollie"},
		{"", "/home/u", "/home/u/.config/ollie"},
		{"rel", "/home/u", "/home/u/.config/ollie"},
		{"", "", ""},
		{"rel", "rel", ""},
	} {
		env := map[string]string{"XDG_CONFIG_HOME": c.xdg, "HOME": c.home}
		if got := ConfigDirFrom(func(k string) string { return env[k] }); got != c.want {
			t.Errorf("XDG_CONFIG_HOME=%q HOME=%q: %q, want %q", c.xdg, c.home, got, c.want)
		}
	}
}
