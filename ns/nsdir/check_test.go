package nsdir_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"ollie/ns/nsdir"
)

// othersDir returns a directory owned by another user: one made and given
// away when the test runs as root, else the root directory, root's.
func othersDir(t *testing.T) (dir string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		fi, err := os.Stat("/")
		if err != nil {
			t.Fatal(err)
		}
		uid := int(fi.Sys().(*syscall.Stat_t).Uid)
		if uid == os.Geteuid() {
			t.Skip("/ is this user's: no directory of another user to hand")
		}
		return "/", uid
	}
	dir = filepath.Join(t.TempDir(), "ns")
	if err := os.Mkdir(dir, 0777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0777)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return dir, 65534
}

func mkdir(t *testing.T, mode fs.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ns")
	if err := os.Mkdir(dir, 0700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// A client talks only through a directory that is its user's, real and
// private; each refusal says what is wrong with it.
func TestCheck(t *testing.T) {
	private := mkdir(t, 0700)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0600)
	others, uid := othersDir(t)
	for _, tt := range []struct {
		name string
		dir  string
		want error
		says []string
	}{
		{"private", private, nil, nil},
		{"readable", mkdir(t, 0750), nsdir.ErrNotPrivate, []string{"mode 0750", "chmod 700"}},
		{"writable", mkdir(t, 0777), nsdir.ErrNotPrivate, []string{"writable by other users", "mode 0777"}},
		{"symlink to a private directory", link, nsdir.ErrSymlink, []string{link, "symbolic link", "remove it"}},
		{"file", file, nsdir.ErrNotDir, []string{file, "not a directory"}},
		{"another user's", others, nsdir.ErrNotYours, []string{others, "uid " + strconv.Itoa(uid), "NAMESPACE"}},
		{"missing", filepath.Join(private, "none"), fs.ErrNotExist, nil},
	} {
		err := nsdir.Check(tt.dir)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Check(%s) = %v, want %v", tt.name, tt.dir, err, tt.want)
			continue
		}
		var de *nsdir.DirError
		if len(tt.says) > 0 && !errors.As(err, &de) {
			t.Errorf("%s: %v is not a *DirError", tt.name, err)
		}
		for _, s := range tt.says {
			if err != nil && !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", tt.name, err, s)
			}
		}
	}
}

// The daemon makes the directory, mends one only others can read, and
// refuses what it cannot trust without changing it.
func TestPrepare(t *testing.T) {
	t.Run("made", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "ns")
		if err := nsdir.Prepare(dir); err != nil {
			t.Fatal(err)
		}
		if p := perm(t, dir); p != 0700 {
			t.Errorf("mode %v, want 0700", p)
		}
		if err := nsdir.Prepare(dir); err != nil {
			t.Errorf("again: %v", err)
		}
	})
	t.Run("readable made private", func(t *testing.T) {
		dir := mkdir(t, 0755)
		if err := nsdir.Prepare(dir); err != nil {
			t.Fatal(err)
		}
		if p := perm(t, dir); p != 0700 {
			t.Errorf("mode %v, want 0700", p)
		}
	})
	t.Run("writable refused", func(t *testing.T) {
		dir := mkdir(t, 0777)
		if err := nsdir.Prepare(dir); !errors.Is(err, nsdir.ErrNotPrivate) {
			t.Errorf("got %v, want ErrNotPrivate", err)
		}
		if p := perm(t, dir); p != 0777 {
			t.Errorf("mode %v, changed", p)
		}
	})
	t.Run("symlink refused, not followed", func(t *testing.T) {
		target := mkdir(t, 0755)
		link := filepath.Join(t.TempDir(), "link")
		os.Symlink(target, link)
		if err := nsdir.Prepare(link); !errors.Is(err, nsdir.ErrSymlink) {
			t.Errorf("got %v, want ErrSymlink", err)
		}
		if p := perm(t, target); p != 0755 {
			t.Errorf("the link's target is mode %v: changed through the link", p)
		}
	})
	t.Run("dangling symlink refused", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "link")
		os.Symlink(filepath.Join(t.TempDir(), "none"), link)
		if err := nsdir.Prepare(link); !errors.Is(err, nsdir.ErrSymlink) {
			t.Errorf("got %v, want ErrSymlink", err)
		}
	})
	t.Run("another user's refused", func(t *testing.T) {
		dir, uid := othersDir(t)
		before := perm(t, dir)
		err := nsdir.Prepare(dir)
		if !errors.Is(err, nsdir.ErrNotYours) || !strings.Contains(err.Error(), "uid "+strconv.Itoa(uid)) {
			t.Errorf("got %v, want ErrNotYours naming uid %d", err, uid)
		}
		if p := perm(t, dir); p != before {
			t.Errorf("mode %v, was %v", p, before)
		}
	})
}
