package olliesrv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"ollie/agent/fakellm"
)

// TestCrashResume kills olliesrv at each point of a tool call's effect
// sandwich (see crash_test.go) and checks what the next start makes of it.
func TestCrashResume(t *testing.T) {
	binaries(t) // build once, before the subtests' clocks start
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"before the intent: model request in flight", crashModelInFlight},
		{"before the intent: reply held for it", crashReplyHeld},
		{"after the tool ran, before the settlement", crashToolRanUnsettled},
		{"replay-safe tool runs once more", crashReplaySafeReruns},
		{"replay-safe result survives another restart", crashReplaySafeSurvives},
		{"replay-safe tool crashes again during its re-run", crashReplaySafeAgain},
		{"queued prompts survive", crashQueuedPrompts},
		{"torn session file", crashTornFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// crashModelInFlight: killed while the model's request is in flight: the
// reply, a tool call, has streamed but not finished. Nothing was committed
// of it, so there is no intent and the tool never runs; the prompt, already
// dequeued, comes back as an interrupted turn and is not run again.
func crashModelInFlight(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.create("default")
	r.llm.Push(fakellm.Response{ToolCalls: []fakellm.Call{{Name: "mark", Args: `{}`}}, Hang: true})
	r.prompt("first prompt")
	r.waitFor("the model request", func() bool { return len(r.llm.ChatRequests()) == 1 })
	r.kill()

	r.start()
	r.checkRestored()
	r.chatSays("[interrupted: olliesrv stopped during this turn")
	if got := r.userPrompts(); !slices.Equal(got, []string{"first prompt"}) {
		t.Errorf("restored user messages %q, want the interrupted prompt once", got)
	}
	if cs := r.calls(); len(cs) != 0 {
		t.Errorf("tool calls in the session file: %v", cs)
	}
	last := r.goesOn()
	if n := len(r.llm.ChatRequests()); n != 2 {
		t.Errorf("%d model requests, want 2: the interrupted prompt must not run again", n)
	}
	if got := last.Messages[len(last.Messages)-2]; got.Role != "user" || got.Text() != "first prompt" {
		t.Errorf("the interrupted prompt is not in the context of the next one: %s %q", got.Role, got.Text())
	}
	r.checkRuns(0)
}

// crashReplyHeld: killed by the preTool hook, after the model's reply
// asking for the call and before its intent. The reply goes to the file in
// one commit with the intent (agentJournal.held), so neither is there:
// the prompt comes back as an interrupted turn, the call was never
// recorded and never runs, and the prompt is not run again.
func crashReplyHeld(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.create("crashhook")
	os.WriteFile(filepath.Join(r.work, "armed"), nil, 0644)
	r.llm.Push(fakellm.ToolCall("mark", `{}`))
	r.prompt("first prompt")
	r.waitDead()

	r.start()
	r.checkRestored()
	r.chatSays("[interrupted: olliesrv stopped during this turn")
	if h := r.history(); len(h) != 1 || h[0].Role != "user" || h[0].Content != "first prompt" {
		t.Errorf("restored history %+v, want the prompt alone: the reply waits for its intent", h)
	}
	if cs := r.calls(); len(cs) != 0 {
		t.Errorf("tool calls in the session file: %v", cs)
	}
	r.goesOn()
	if n := len(r.llm.ChatRequests()); n != 2 {
		t.Errorf("%d model requests, want 2: the interrupted prompt must not run again", n)
	}
	r.checkRuns(0)
}

// crashToolRanUnsettled: the tool did its work and is about to exit when
// olliesrv dies. The brief was for the tool to kill olliesrv itself, but a
// sandboxed tool cannot signal it (Landlock ABI 6+ scopes signals: kill
// fails with EPERM), so the tool appends to its marker as its last act and
// waits on a FIFO to exit, and the test kills olliesrv at that moment.
func crashToolRanUnsettled(t *testing.T) {
	r := newCrashRig(t, false)
	if err := syscall.Mkfifo(filepath.Join(r.work, "exit-1"), 0600); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.create("default")
	r.llm.Push(fakellm.ToolCall("mark", `{}`))
	r.prompt("first prompt")
	r.waitFor("the tool to finish its work", func() bool { return r.runs() == 1 })
	r.kill()
	r.release(1)

	r.start()
	r.checkRestored()
	r.chatSays("[interrupted: olliesrv stopped during this turn")
	c := r.onlyCall()
	if c.reruns != 0 || !strings.Contains(string(c.result), `"status":"interrupted"`) {
		t.Errorf("the call was settled with %s after %d re-runs, want interrupted and none", c.result, c.reruns)
	}
	last := r.goesOn()
	if got := toolResult(last); !strings.Contains(got, "not run again") {
		t.Errorf("the model was told %q of the call", got)
	}
	r.checkRuns(1)
}

// crashReplaySafeReruns: a replay-safe tool interrupted by the crash runs
// once more while olliesrv restores the session, and is settled once, with
// its result.
func crashReplaySafeReruns(t *testing.T) {
	r := newCrashRig(t, true)
	os.WriteFile(filepath.Join(r.work, "hang-1"), nil, 0644)
	r.start()
	r.create("default")
	r.llm.Push(fakellm.ToolCall("mark", `{}`))
	r.prompt("first prompt")
	r.waitFor("the tool to start", func() bool { return r.runs() == 1 })
	r.kill()

	r.start()
	r.checkRestored()
	r.chatSays("[interrupted: olliesrv stopped during this turn")
	// The re-run runs in the background once the daemon serves, so
	// the turn's end can be in the file before the settlement is.
	r.waitFor("the re-run to settle", func() bool {
		for _, c := range r.calls() {
			return c.settles > 0
		}
		return false
	})
	c := r.onlyCall()
	if c.reruns != 1 || !strings.Contains(string(c.result), "real result of run 2") {
		t.Errorf("the call was settled with %s after %d re-runs, want the second run's result after one", c.result, c.reruns)
	}
	last := r.goesOn()
	if got := toolResult(last); !strings.Contains(got, "real result of run 2") {
		t.Errorf("the model was told %q of the re-run call", got)
	}
	r.checkRuns(2)
}

// crashReplaySafeSurvives: the re-run's result must outlive the next
// restart too: it is what the model was told, and what the session file
// settled.
func crashReplaySafeSurvives(t *testing.T) {
	r := newCrashRig(t, true)
	os.WriteFile(filepath.Join(r.work, "hang-1"), nil, 0644)
	r.start()
	r.create("default")
	r.llm.Push(fakellm.ToolCall("mark", `{}`))
	r.prompt("first prompt")
	r.waitFor("the tool to start", func() bool { return r.runs() == 1 })
	r.kill()
	r.start()
	r.checkRestored()
	// The re-run runs in the background: a session that waits for a
	// person (resume=manual) is idle meanwhile.
	r.waitFor("the re-run's settlement in the session file", func() bool {
		b, _ := os.ReadFile(r.sessionFile())
		return strings.Contains(string(b), `"kind":"tool.settle"`)
	})
	r.kill()

	r.start()
	r.checkRestored()
	h := r.history()
	if len(h) != 3 || h[2].Role != "tool" {
		t.Fatalf("restored history %+v, want the prompt, the call and its result", h)
	}
	r.onlyCall()
	r.checkRuns(2)
	if !strings.Contains(h[2].Content, "real result of run 2") {
		t.Errorf("after a second restart the re-run call's result reads %q, want the settled result", h[2].Content)
	}
}

// crashReplaySafeAgain: a second crash during the re-run: the call is
// settled as interrupted at the next start and never runs a third time.
func crashReplaySafeAgain(t *testing.T) {
	r := newCrashRig(t, true)
	os.WriteFile(filepath.Join(r.work, "hang-1"), nil, 0644)
	os.WriteFile(filepath.Join(r.work, "hang-2"), nil, 0644)
	r.start()
	r.create("default")
	r.llm.Push(fakellm.ToolCall("mark", `{}`))
	r.prompt("first prompt")
	r.waitFor("the tool to start", func() bool { return r.runs() == 1 })
	r.kill()

	r.start() // restoring runs the call again, and hangs in it
	r.waitFor("the re-run", func() bool { return r.runs() == 2 })
	r.kill()

	r.start()
	r.checkRestored()
	r.chatSays("[interrupted: olliesrv stopped during this turn")
	c := r.onlyCall()
	if c.reruns != 1 || !strings.Contains(string(c.result), `"status":"interrupted"`) {
		t.Errorf("the call was settled with %s after %d re-runs, want interrupted after one", c.result, c.reruns)
	}
	last := r.goesOn()
	if got := toolResult(last); !strings.Contains(got, "not run again") {
		t.Errorf("the model was told %q of the call", got)
	}
	r.checkRuns(2)
}

// crashQueuedPrompts: prompts written while the agent is busy are committed
// before the write returns: after the crash they run, in order, each once;
// the one that was running is the interrupted turn.
func crashQueuedPrompts(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.create("default")
	r.llm.Push(fakellm.Hang("thinking"))
	r.prompt("prompt 1")
	r.waitFor("the model request", func() bool { return len(r.llm.ChatRequests()) == 1 })
	for _, p := range []string{"prompt 2", "prompt 3", "prompt 4"} {
		r.prompt(p)
	}
	if got := r.read("session/crash/agent/a/fifo"); got != "prompt 2\nprompt 3\nprompt 4\n" {
		t.Fatalf("fifo before the crash = %q", got)
	}
	r.kill()

	r.llm.Push(fakellm.Text("answer 2"), fakellm.Text("answer 3"), fakellm.Text("answer 4"))
	r.start()
	r.waitFor("the queued prompts to run", func() bool {
		return strings.Contains(r.read("session/crash/agent/a/log"), "answer 4")
	})
	r.checkRestored()
	r.chatSays("[interrupted: olliesrv stopped during this turn")
	reqs := r.llm.ChatRequests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want 4: the interrupted one and the three queued", len(reqs))
	}
	for i, want := range []string{"prompt 2", "prompt 3", "prompt 4"} {
		msgs := reqs[i+1].Messages
		if m := msgs[len(msgs)-1]; m.Role != "user" || m.Text() != want {
			t.Errorf("request %d ends with %s %q, want %q", i+2, m.Role, m.Text(), want)
		}
	}
	if got := r.userPrompts(); !slices.Equal(got, []string{"prompt 1", "prompt 2", "prompt 3", "prompt 4"}) {
		t.Errorf("user messages %q: each prompt once, in order", got)
	}
	if got := r.read("session/crash/agent/a/fifo"); got != "" {
		t.Errorf("fifo after the queue ran = %q", got)
	}
	r.goesOn()
	if n := len(r.llm.ChatRequests()); n != 5 {
		t.Errorf("%d model requests, want 5", n)
	}
}

// crashTornFile: a crash that tore the last line: the line is dropped with
// a warning, cut from the file, and the session is whole.
func crashTornFile(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.create("default")
	r.llm.Push(fakellm.Text("first answer"))
	r.prompt("first prompt")
	r.waitFor("the first answer", func() bool {
		return strings.Contains(r.read("session/crash/agent/a/log"), "first answer")
	})
	before := r.read("session/crash/agent/a/log")
	r.kill()
	torn := `{"kind":"agent.prompt","seq":999,"time":"2026-11-30T09:00:0`
	f, err := os.OpenFile(r.sessionFile(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(torn)
	f.Close()

	r.start()
	r.checkRestored()
	if got := r.read("session/crash/agent/a/log"); got != before {
		t.Errorf("restored log:\n%s\nwant:\n%s", got, before)
	}
	r.goesOn()
	r.calls() // every line parses: the torn one was cut, not glued onto
	if data, _ := os.ReadFile(r.sessionFile()); strings.Contains(string(data), torn) {
		t.Errorf("the torn line is still in the session file")
	}
	r.kill()
	if log := r.logs[1].String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "dropped a torn last line") {
		t.Errorf("no warning about the torn line in the log:\n%s", log)
	}
}
