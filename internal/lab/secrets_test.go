package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf said.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// SearchFiles finds a secret in a file written since the tests began and
// names it; SearchProcs finds one in a process's environment.
func TestSearchFindsSecrets(t *testing.T) {
	dir := t.TempDir()
	for i := range 12 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte("nothing here"), 0o600)
	}
	secret := "s3cret-" + fmt.Sprint(os.Getpid())
	leak := filepath.Join(dir, "sub", "leak")
	os.MkdirAll(filepath.Dir(leak), 0o700)
	os.WriteFile(leak, []byte("x"+secret+"y"), 0o600)
	r := &recorder{TB: t}
	SearchFiles(r, secret, dir)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], leak) {
		t.Errorf("SearchFiles said %q, want the leak named", r.errs)
	}
	r = &recorder{TB: t}
	SearchFiles(r, "not-"+secret+"-anywhere", dir)
	if len(r.errs) != 0 {
		t.Errorf("SearchFiles of an absent secret said %q", r.errs)
	}
	// A process started with it in its environment.
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "OLLIE_LAB_TEST_SECRET="+secret)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	r = &recorder{TB: t}
	SearchProcs(r, secret)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid)) {
		t.Errorf("SearchProcs said %q, want the sleep's environment named", r.errs)
	}
}
