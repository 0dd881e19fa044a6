package host

import (
	"strings"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/nstest"
)

// TestSessionRestsBetweenTurns: a session left idle lets its tool server
// go (OLLIE_TOOLSRV_IDLE), and its agent's next turn calls a tool as
// before, the tool server started again for it.
func TestSessionRestsBetweenTurns(t *testing.T) {
	echoTool(t)
	t.Setenv("OLLIE_TOOLSRV_IDLE", "300ms")

	be := &twoStep{}
	d, fs := modelDaemon(t, be)
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=coder profile=default"); err != nil {
		t.Fatal(err)
	}
	sid := sid0(t, fs)
	turn := func(prompt string, requests int) {
		t.Helper()
		if err := nstest.WriteFile(fs, "session/s/agent/coder/prompt", prompt); err != nil {
			t.Fatal(err)
		}
		await.Until(t, 20*time.Second, "the turn's tool result reaching the model", func() bool {
			be.mu.Lock()
			defer be.mu.Unlock()
			if len(be.seen) < requests {
				return false
			}
			msgs := be.seen[requests-1]
			return strings.Contains(msgs[len(msgs)-1].Content, "echo got") && strings.Contains(msgs[len(msgs)-1].Content, prompt)
		})
	}
	turn("first", 2)
	await.Until(t, 20*time.Second, "the idle session's tool server resting", func() bool { return !d.ns.tools.Running(sid) })
	turn("second", 4)
}
