package olliesrv

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// TestClient9pUnderSandbox (issue 31, item 4): an agent's client_9p call
// reaches the namespace from inside the sandbox, through the olliesrv
// binary serving it ($OLLIE_CLIENT), on a daemon whose PATH has no ollie:
// the starter tool is offered and works where the person's ollie command
// is out of PATH and out of the sandbox's reach.
func TestClient9pUnderSandbox(t *testing.T) {
	llm := fakellm.Start(t)
	data, _ := filepath.Abs("../../data")
	dir, work := nstest.ShortTempDir(t), t.TempDir()
	_, log := startBinary(t, dir, "OLLIE_TOOLS_PATH="+filepath.Join(data, "tools"), "OLLIE_DATA="+data, "PATH=/usr/bin:/bin",
		"OPENAI_BASE_URL="+llm.URL+"/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model")
	for _, step := range [][]string{
		{"name=c cwd=" + work, "rdwr", "session/new"},
		{"name=a backend=openai", "rdwr", "session/c/agent/new"},
	} {
		if out, code := runBinary(t, dir, step[0], step[1:]...); code != 0 {
			t.Fatalf("%v: %d %q\n%s", step, code, out, log.String())
		}
	}
	llm.Push(fakellm.ToolCall("client_9p", `{"op": "read", "path": "session/c/agent/a/name"}`), fakellm.Text("read it"))
	if out, code := runBinary(t, dir, "read your name", "write", "session/c/agent/a/prompt"); code != 0 {
		t.Fatalf("prompt: %d %q", code, out)
	}
	agentLog := func() string { out, _ := runBinary(t, dir, "", "read", "session/c/agent/a/log"); return out }
	await.Until(t, 30*time.Second, "the answer", func() bool { return strings.Contains(agentLog(), "read it") },
		func() string { return "log:\n" + agentLog() + "\nolliesrv:\n" + log.String() })
	reqs := llm.ChatRequests()
	last := reqs[len(reqs)-1].Messages
	if res := last[len(last)-1]; res.Role != "tool" || strings.TrimSpace(res.Text()) != "a" {
		t.Errorf("client_9p under the sandbox answered %s %q, want the agent's name", res.Role, res.Text())
	}
}
