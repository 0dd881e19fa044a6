package olliesrv

import (
	"strings"
	"testing"

	"ollie/agent/fakellm"
)

// skillMark is a line of the starter skill ollie-namespace, offered on
// every host, so that the test can count where its text went.
const skillMark = "# ollie's namespace from the shell"

// count is how many times s occurs in a request's messages.
func count(req *fakellm.ChatRequest, s string) int {
	n := 0
	for _, m := range req.Messages {
		n += strings.Count(m.Text(), s)
	}
	return n
}

// A scripted model loads a skill through the real binary: its text reaches
// the next request, a compaction carries it, and after SIGKILL and a
// restart the agent lists it as loaded and offers it again without sending
// it again.
func TestSkillLoadCompactCrash(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.create("crashhook")
	r.llm.Push(fakellm.ToolCall("load_skill", `{"name": "ollie-namespace"}`), fakellm.Text("loaded"))
	r.prompt("learn to drive agents")
	// The answer after the load, quoted: the skill's text (the tool's
	// result, logged before the next request) says "unloaded".
	r.waitFor("the skill's load", func() bool { return strings.Contains(r.read("session/crash/agent/a/log"), `"loaded"`) })
	reqs := r.llm.ChatRequests()
	if sys := reqs[0].Messages[0].Text(); !strings.Contains(sys, "- ollie-namespace: ") || !strings.Contains(sys, "call load_skill") {
		t.Errorf("the first request's system prompt does not offer the skill:\n%s", sys)
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; last.Role != "tool" || !strings.Contains(last.Text(), skillMark) {
		t.Fatalf("the request after load_skill ends with %s %.200q, not the skill's text", last.Role, last.Text())
	}
	if got := r.read("session/crash/agent/a/skills"); got != "ollie-namespace\n" {
		t.Errorf("skills = %q", got)
	}

	// Enough turns that compaction removes the load, then compact.
	for i := range 5 {
		r.llm.Push(fakellm.Text("answer"))
		r.prompt("question")
		r.waitFor("a turn", func() bool { return strings.Count(r.read("session/crash/agent/a/log"), `"answer"`) == i+1 })
	}
	r.waitFor("idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
	if out := r.ollie("compact", "rdwr", "session/crash/agent/a/ctl"); out == "removed 0 messages\n" {
		t.Fatalf("compact removed nothing")
	}
	r.llm.Push(fakellm.Text("after compaction"))
	r.prompt("go on")
	r.waitFor("the turn after the compaction", func() bool {
		return strings.Contains(r.read("session/crash/agent/a/log"), "after compaction")
	})
	reqs = r.llm.ChatRequests()
	after := reqs[len(reqs)-1]
	if n := count(after, skillMark); n != 1 {
		t.Errorf("the skill's text is in the request after the compaction %d times, want once", n)
	}
	if first := after.Messages[1].Text(); !strings.Contains(first, "earlier messages were removed") || !strings.Contains(first, skillMark) {
		t.Errorf("the compaction note does not carry the skill:\n%.300s", first)
	}

	r.kill()
	r.start()
	r.checkRestored()
	if got := r.read("session/crash/agent/a/skills"); got != "ollie-namespace\n" {
		t.Errorf("skills after the restart = %q", got)
	}
	last := r.goesOn()
	if sys := last.Messages[0].Text(); !strings.Contains(sys, "- ollie-namespace: ") || !strings.Contains(sys, "loaded before olliesrv restarted") {
		t.Errorf("after the restart the system prompt does not offer the skill again as loaded:\n%s", sys)
	}
	if n := count(last, skillMark); n != 1 {
		t.Errorf("the skill's text is in the request after the restart %d times, want once (kept in the history, not sent again)", n)
	}
}
