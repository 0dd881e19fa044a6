package host

import (
	"ollie/internal/nstest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"
)

// TestBypassPending: with no desktop broker connected, an elevated tool's
// request waits in bypass/pending/{id}, where writing approve runs it
// outside the sandbox and deny gives the model the reason; bypass/policy
// can deny at once instead. (The scripted model names every call "c1", as
// many local models do: each turn's call must still be its own record.)
func TestBypassPending(t *testing.T) {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo.", "elevated": true}`), 0644)
	// Outside the sandbox no_new_privs is off: the tool says so.
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\necho \"echo got $(cat) nnp=$(grep NoNewPrivs /proc/self/status | tr -dc 0-9)\"\n"), 0755)
	data, _ := filepath.Abs("../../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)

	be := &twoStep{}
	_, fs := modelDaemon(t, be)
	if got := nstest.ReadFile(t, fs, "bypass/policy"); got != "nobroker=pending timeout=5m0s yolo=allow\n" {
		t.Errorf("default policy %q", got)
	}
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	sid, aid := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id")), strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/a/id"))
	chat, err := fs.Open("session/s/agent/a/chat", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()

	pending := func() string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if f, err := fs.Open("bypass/pending", plan9.OREAD); err == nil {
				dirs, _ := f.Dirreadall()
				f.Close()
				if len(dirs) == 1 {
					return dirs[0].Name
				}
			}
		}
		t.Fatalf("no request in bypass/pending; state %q, log:\n%s", nstest.ReadFile(t, fs, "session/s/agent/"+aid+"/state"), nstest.ReadFile(t, fs, "session/s/agent/"+aid+"/log"))
		return ""
	}

	// Approved by writing the file.
	if err := nstest.WriteFile(fs, "session/s/agent/a/prompt", "hello"); err != nil {
		t.Fatal(err)
	}
	id := pending()
	if req := nstest.ReadFile(t, fs, "bypass/pending/"+id); !strings.Contains(req, "tool:     echo\n") || !strings.Contains(req, "write approve") {
		t.Errorf("bypass/pending/%s = %q", id, req)
	}
	// Who asks: the agent's session and the agent, by name and ID, as the
	// toolsrv got them with the call.
	if req := nstest.ReadFile(t, fs, "bypass/pending/"+id); !strings.Contains(req, "session:  s ("+sid+"), agent a ("+aid+")\n") || strings.Contains(req, "variant") {
		t.Errorf("bypass/pending/%s does not name session %s and agent %s (or names a variant of a tool without):\n%s", id, sid, aid, req)
	}
	if err := nstest.WriteFile(fs, "bypass/pending/"+id, "maybe"); err == nil {
		t.Error("a bad decision was accepted")
	}
	if err := nstest.WriteFile(fs, "bypass/pending/"+id, "approve"); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, chat, 5)
	if !strings.Contains(strings.Join(lines, "\n"), `echo got {"text":"hello"} nnp=0`) {
		t.Errorf("after approve the chat is %q", lines)
	}

	// Denied by writing the file: the model reads the reason. The agent,
	// renamed, is named as it is called when it calls.
	if err := nstest.WriteFile(fs, "session/s/agent/a/name", "fixer"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "session/s/agent/fixer/prompt", "again"); err != nil {
		t.Fatal(err)
	}
	id = pending()
	if req := nstest.ReadFile(t, fs, "bypass/pending/"+id); !strings.Contains(req, "session:  s ("+sid+"), agent fixer ("+aid+")\n") {
		t.Errorf("bypass/pending/%s does not name the agent renamed fixer (%s):\n%s", id, aid, req)
	}
	if err := nstest.WriteFile(fs, "bypass/pending/"+id, "deny not on a Friday"); err != nil {
		t.Fatal(err)
	}
	lines = readLines(t, chat, 5)
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "not on a Friday") || strings.Contains(got, `echo got {"text":"again"}`) {
		t.Errorf("after deny the chat is %q", lines)
	}

	// The policy denies at once when asked to.
	if err := nstest.WriteFile(fs, "bypass/policy", "nobroker=deny"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "bypass/policy", "nobroker=sometimes"); err == nil {
		t.Error("a bad policy was accepted")
	}
	if err := nstest.WriteFile(fs, "session/s/agent/fixer/prompt", "third"); err != nil {
		t.Fatal(err)
	}
	lines = readLines(t, chat, 5)
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "no desktop broker is connected") {
		t.Errorf("with nobroker=deny the chat is %q", lines)
	}
}
