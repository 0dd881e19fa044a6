package lab

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// began is before any secret a test makes: a file last changed earlier
// cannot hold one.
var began = time.Now().Add(-time.Second)

// SearchFiles fails t if secret is in any file under the roots. It reads
// only the files changed (ctime, which no one can set back) since the
// test process began: a file cannot hold a secret made after it was last
// written, and /tmp on a long-lived machine holds gigabytes of older
// ones. Fewer than ten files read is a failure too: the search missed.
func SearchFiles(t testing.TB, secret string, roots ...string) {
	t.Helper()
	n := 0
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil || fi.Size() > 256<<20 {
				return nil
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && time.Unix(st.Ctim.Sec, st.Ctim.Nsec).Before(began) {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			n++
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("the secret is in %s", p)
			}
			return nil
		})
	}
	if n < 10 {
		t.Errorf("only %d files searched under %v", n, roots)
	}
}

// SearchProcs fails t if secret is in any process's argv or environment.
func SearchProcs(t testing.TB, secret string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(b, []byte(secret)) {
				cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				t.Errorf("the secret is in %s/%s (%q)", p, f, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
			}
		}
	}
}
