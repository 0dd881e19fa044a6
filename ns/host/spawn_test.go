package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/nstest"
)

// TestAgentCwdInsideSession: an agent works inside its session's
// directory, whoever makes it: the admin too is refused a cwd outside it,
// by path or through a symbolic link inside it that leads out, and the
// agent is not made. A directory inside it is taken, its links resolved.
func TestAgentCwdInsideSession(t *testing.T) {
	data, _ := filepath.Abs("../../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	_, admin := modelDaemon(t, streamer("done"))
	work, outside := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "sub"), 0755); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"out": outside, "up": "..", "in": "sub"} {
		if err := os.Symlink(to, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+work); err != nil {
		t.Fatal(err)
	}
	for i, cwd := range []string{outside, "/", filepath.Join(work, ".."), filepath.Join(work, "out"), filepath.Join(work, "up")} {
		_, err := nstest.RdWr(admin, "session/s/agent/new", fmt.Sprintf("name=a%d cwd=%s", i, cwd))
		if err == nil || !strings.Contains(err.Error(), "an agent works inside its session's directory") {
			t.Errorf("the admin making an agent with cwd %s outside its session's %s: %v, want it refused", cwd, work, err)
		}
	}
	if got := nstest.ReadFile(t, admin, "session/s/agent/idx"); got != "" {
		t.Fatalf("agents were made outside their session's directory: %q", got)
	}
	if _, err := nstest.RdWr(admin, "session/s/agent/new", "name=a cwd="+filepath.Join(work, "in")); err != nil {
		t.Fatalf("the admin making an agent in a directory inside its session's: %v", err)
	}
	real, _ := filepath.EvalSymlinks(filepath.Join(work, "sub"))
	if got, err := nstest.RdWr(admin, "session/s/agent/a/ctl", "cwd"); err != nil || got != real+"\n" {
		t.Errorf("the agent's cwd is %q (%v), want %s: its link resolved", got, err, real)
	}
}
