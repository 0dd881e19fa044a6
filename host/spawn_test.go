package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/nstest"
)

// TestSpawnOnlyIntoOwnSessions: an agent whose profile may spawn adds
// agents to its own session and to the sessions its tool made, never to
// one the admin made, not even one whose directory lies inside the
// agent's own (issue 28, item 7). Its tool asks as a real tool does: a 9P
// client presenting the agent's capability.
func TestSpawnOnlyIntoOwnSessions(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, admin := modelDaemon(t, streamer("done"))
	work := t.TempDir()
	home := filepath.Join(work, "orch")
	for _, dir := range []string{"admins", "mine"} {
		if err := os.MkdirAll(filepath.Join(home, dir), 0755); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range [][2]string{
		{"session/new", "name=s cwd=" + work},
		{"session/s/agent/new", "name=orch profile=orchestrator cwd=" + home},
		// The admin's own session, inside the orchestrator's directory.
		{"session/new", "name=admins cwd=" + filepath.Join(home, "admins")},
	} {
		if _, err := nstest.RdWr(admin, req[0], req[1]); err != nil {
			t.Fatalf("%s %s: %v", req[0], req[1], err)
		}
	}
	orch := attachAgent(t, d, strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/orch/id")))

	_, err := nstest.RdWr(orch, "session/admins/agent/new", "name=intruder profile=worker")
	if err == nil || !strings.Contains(err.Error(), "refused: agent orch adds agents only to its own session and to the sessions it made") ||
		!strings.Contains(err.Error(), "admins was made by the admin") {
		t.Errorf("the orchestrator's tool adding an agent to the admin's session: %v, want it refused as made by the admin", err)
	}
	if got := nstest.ReadFile(t, admin, "session/admins/agent/idx"); got != "" {
		t.Errorf("the admin's session has agents it was not given: %q", got)
	}

	// What it may do still works: its own session, and a session it made.
	if _, err := nstest.RdWr(orch, "session/s/agent/new", "name=worker profile=worker"); err != nil {
		t.Errorf("the orchestrator cannot add a worker to its own session: %v", err)
	}
	if _, err := nstest.RdWr(orch, "session/new", "name=mine cwd="+filepath.Join(home, "mine")); err != nil {
		t.Fatalf("the orchestrator cannot make a session in its directory: %v", err)
	}
	if _, err := nstest.RdWr(orch, "session/mine/agent/new", "name=worker profile=worker"); err != nil {
		t.Errorf("the orchestrator cannot add a worker to the session it made: %v", err)
	}
}

// TestAgentCwdInsideSession: an agent works inside its session's
// directory, whoever makes it: the admin too is refused a cwd outside it,
// by path or through a symbolic link inside it that leads out, and the
// agent is not made. A directory inside it is taken, its links resolved.
func TestAgentCwdInsideSession(t *testing.T) {
	data, _ := filepath.Abs("../data")
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
