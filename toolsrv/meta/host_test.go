package meta

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeHost is a host whose PATH, environment, OS and arch are the test's.
// Stat sees the real files under root (the test's temporary directory) and,
// elsewhere, only the invented files of files, so that the real machine's
// /var/log/syslog never decides a test.
type fakeHost struct {
	root   string
	path   []string               // PATH, directories under root
	files  map[string]fs.FileMode // invented files outside root
	env    map[string]string
	goos   string
	goarch string
}

func (h *fakeHost) LookPath(file string) (string, error) {
	for _, d := range h.path {
		if p := filepath.Join(d, file); Executable(h, p) {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

func (h *fakeHost) Stat(name string) (fs.FileInfo, error) {
	if mode, ok := h.files[name]; ok {
		return fakeInfo{name: filepath.Base(name), mode: mode}, nil
	}
	if h.root != "" && (name == h.root || strings.HasPrefix(name, h.root+"/")) {
		return os.Stat(name)
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

func (h *fakeHost) Getenv(key string) string { return h.env[key] }
func (h *fakeHost) GOOS() string             { return h.goos }
func (h *fakeHost) GOARCH() string           { return h.goarch }

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (i fakeInfo) Name() string       { return i.name }
func (i fakeInfo) Size() int64        { return 0 }
func (i fakeInfo) Mode() fs.FileMode  { return i.mode }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fakeInfo) Sys() any           { return nil }

// writeExec writes an executable script under dir, creating dir.
func writeExec(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConditions(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	jc := writeExec(t, bin, "journalctl")
	h := &fakeHost{root: root, path: []string{bin}, goos: "linux", goarch: "amd64",
		env:   map[string]string{"DISPLAY": ":0"},
		files: map[string]fs.FileMode{"/var/log/syslog": 0o640, "/usr/bin/rg": 0o755, "/etc/dir": fs.ModeDir | 0o755}}
	tests := []struct {
		c      Condition
		ok     bool
		detail string
	}{
		{Condition{"binary", "journalctl"}, true, `binary "journalctl" found at ` + jc},
		{Condition{"binary", "rg"}, false, `binary "rg" not found in PATH`},
		{Condition{"binary", "/usr/bin/rg"}, true, `binary "/usr/bin/rg" is an executable file`},
		{Condition{"binary", "/etc/dir"}, false, `binary "/etc/dir" is not an executable file`},
		{Condition{"file", "/var/log/syslog"}, true, `file "/var/log/syslog" exists`},
		{Condition{"file", "/etc/dir"}, true, `file "/etc/dir" exists`},
		{Condition{"file", "/var/log/messages"}, false, `file "/var/log/messages" does not exist`},
		{Condition{"os", "linux"}, true, `os is "linux"`},
		{Condition{"os", "darwin"}, false, `os is "linux", not "darwin"`},
		{Condition{"arch", "amd64"}, true, `arch is "amd64"`},
		{Condition{"arch", "arm64"}, false, `arch is "amd64", not "arm64"`},
		{Condition{"env", "DISPLAY"}, true, `env DISPLAY is set`},
		{Condition{"env", "WAYLAND_DISPLAY"}, false, `env WAYLAND_DISPLAY is empty`},
		{Condition{"nenv", "SSH_CONNECTION"}, true, `nenv SSH_CONNECTION is empty`},
		{Condition{"nenv", "DISPLAY"}, false, `nenv DISPLAY is set`},
	}
	for _, tt := range tests {
		got := tt.c.On(h)
		if got.OK != tt.ok || got.Detail != tt.detail {
			t.Errorf("%s: got %v %q, want %v %q", tt.c, got.OK, got.Detail, tt.ok, tt.detail)
		}
	}
}

func TestLocalHost(t *testing.T) {
	var h Host = LocalHost{}
	if _, err := h.LookPath("sh"); err != nil {
		t.Errorf("LookPath(sh): %v", err)
	}
	if fi, err := h.Stat("/"); err != nil || !fi.IsDir() {
		t.Errorf("Stat(/): %v", err)
	}
	t.Setenv("OLLIE_TEST_VAR", "x")
	if h.Getenv("OLLIE_TEST_VAR") != "x" || h.GOOS() == "" || h.GOARCH() == "" {
		t.Error("LocalHost does not report the environment, OS or arch")
	}
}
