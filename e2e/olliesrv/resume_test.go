package olliesrv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/host"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// TestCrashGoesOn (issue 30): in a session made without resume= (auto),
// a turn that a SIGKILL of olliesrv cut short goes on by itself once
// olliesrv starts again, without a person: a cut model request is asked
// again, a tool call that was running is answered as interrupted with its
// outcome unknown (and is not run again), the chat says what happened,
// and the session file records the resume. A turn cut again and again
// goes on host.MaxResumes times, then waits for a person.
func TestCrashGoesOn(t *testing.T) {
	binaries(t)
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"model request in flight", goesOnModelInFlight},
		{"tool running", goesOnToolRunning},
		{"cut again and again", goesOnCutAgain},
		{"ollie chat attached", goesOnChatAttached},
		{"resume=manual", goesOnManual},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// goesOn is what the chat says of a turn that went on by itself.
const goesOn = "[olliesrv stopped during this turn and started again; the turn goes on by itself"

// goesOnModelInFlight: a model request cut mid-reply is asked again, and
// the prompt stays in the history once.
func goesOnModelInFlight(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.createResume("default", "auto")
	r.llm.Push(fakellm.Response{Text: []string{"half an ans"}, Hang: true})
	r.prompt("first prompt")
	r.waitFor("the model request", func() bool { return len(r.llm.ChatRequests()) == 1 })
	r.kill()

	r.llm.Push(fakellm.Text("the answer, asked again"))
	r.start()
	chat := r.chatSays("the answer, asked again")
	if !strings.Contains(chat, goesOn) {
		t.Errorf("the chat does not say the turn went on by itself:\n%s", chat)
	}
	r.waitFor("the resumed turn's end", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
	reqs := r.llm.ChatRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2: the cut one and the one asked again", len(reqs))
	}
	if m := reqs[1].Messages[len(reqs[1].Messages)-1]; m.Role != "user" || m.Text() != "first prompt" {
		t.Errorf("the request asked again ends with %s %q, want the cut prompt", m.Role, m.Text())
	}
	if got := r.userPrompts(); !slices.Equal(got, []string{"first prompt"}) {
		t.Errorf("user messages %q, want the prompt once", got)
	}
	if stats := r.read("session/crash/agent/a/stats"); strings.Contains(stats, `"last_error"`) {
		t.Errorf("the resumed turn ended in an error: %s", stats)
	}
	if b, _ := os.ReadFile(r.sessionFile()); strings.Count(string(b), `"kind":"agent.resume"`) != 1 {
		t.Errorf("the session file does not record one resume:\n%s", b)
	}
	for i, req := range reqs {
		for _, e := range conversationErrors(req) {
			t.Errorf("chat request %d: %s", i+1, e)
		}
	}
}

// goesOnToolRunning: a call cut while its tool ran is answered with its
// outcome unknown, and the tool is not run again.
func goesOnToolRunning(t *testing.T) {
	r := newCrashRig(t, false) // not replay-safe: never run again by itself
	r.start()
	r.createResume("default", "auto")
	os.WriteFile(filepath.Join(r.work, "hang-1"), nil, 0644)
	r.llm.Push(fakellm.ToolCall("mark", `{}`))
	r.prompt("mark it")
	r.waitFor("the tool to start", func() bool { return r.runs() == 1 })
	r.kill()

	r.llm.Push(fakellm.Text("I will check whether it was marked"))
	r.start()
	r.chatSays("I will check whether it was marked")
	r.waitFor("the resumed turn's end", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
	reqs := r.llm.ChatRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != "tool" || !strings.Contains(last.Text(), "whether it finished and what it did are unknown") {
		t.Errorf("the model was told %s %q of the cut call, want its outcome unknown", last.Role, last.Text())
	}
	for i, req := range reqs {
		for _, e := range conversationErrors(req) {
			t.Errorf("chat request %d: %s", i+1, e)
		}
	}
	if n := r.runs(); n != 1 {
		t.Errorf("the tool ran %d times, want once: a cut call is never run again by itself", n)
	}
	if b, _ := os.ReadFile(r.sessionFile()); strings.Count(string(b), `"kind":"tool.settle"`) != 1 {
		t.Errorf("want one settlement of the cut call:\n%s", b)
	}
}

// goesOnCutAgain: a turn cut again and again goes on host.MaxResumes
// times, then waits for a person.
func goesOnCutAgain(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.createResume("default", "auto")
	r.llm.Push(fakellm.Response{Hang: true})
	r.prompt("a turn that never ends")
	for i := 1; i <= host.MaxResumes+1; i++ {
		r.waitFor(fmt.Sprintf("model request %d", i), func() bool { return len(r.llm.ChatRequests()) == i })
		r.kill()
		if i <= host.MaxResumes {
			r.llm.Push(fakellm.Response{Hang: true})
		}
		r.start()
	}
	chat := r.chatSays(fmt.Sprintf("after it went on by itself %d times in a row", host.MaxResumes))
	r.waitFor("the agent to wait for a person", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
	if n := strings.Count(chat, goesOn); n != host.MaxResumes {
		t.Errorf("the turn went on by itself %d times, want %d:\n%s", n, host.MaxResumes, chat)
	}
	if n := len(r.llm.ChatRequests()); n != host.MaxResumes+1 {
		t.Errorf("%d model requests, want %d", n, host.MaxResumes+1)
	}
	r.goesOn()
}

// goesOnChatAttached: ollie chat sent the prompt and waits for the turn's
// end: it rides the restart, says so once, shows the answer asked again
// once, and ends the turn after it.
func goesOnChatAttached(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.createResume("default", "auto")
	r.llm.Push(fakellm.Response{Text: []string{"the first half of an answer "}, Hang: true})
	_, ollie := binaries(t)
	cmd := exec.Command(ollie, "chat", "session/crash/agent/a")
	cmd.Env = append(os.Environ(), "NAMESPACE="+r.dir, "NO_COLOR=1")
	cmd.Stdin = strings.NewReader("a question cut short\n")
	var out nstest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r.waitFor("the model request", func() bool { return len(r.llm.ChatRequests()) == 1 })
	r.waitFor("the chat to show the first half", func() bool { return strings.Contains(out.String(), "the first half") })
	r.kill()
	// Down as long as a keeper may take to start it again: the chat's
	// dials are refused meanwhile. The outage is the point.
	await.For(t.Context(), 2500*time.Millisecond)
	r.llm.Push(fakellm.Text("the whole answer, asked again"))
	r.start()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ollie chat: %v\n%s", err, out.String())
		}
	case <-time.After(crashWait):
		cmd.Process.Kill()
		t.Fatalf("ollie chat did not end after the resumed turn:\n%s", out.String())
	}
	s := out.String()
	answer, end := strings.Index(s, "the whole answer, asked again"), strings.LastIndex(s, "── idle")
	if answer < 0 || end < answer || strings.Count(s, "the whole answer, asked again") != 1 {
		t.Errorf("the chat does not show the answer once, then the turn's end:\n%s", s)
	}
	if strings.Contains(s, "approvals will not show here") {
		t.Errorf("the chat stopped watching for approvals across the restart:\n%s", s)
	}
	if strings.Count(s, "[olliesrv restarted; following the agent again]") != 1 || strings.Count(s, "a question cut short") > 1 {
		t.Errorf("the chat does not say once that it follows again, or repeats the prompt:\n%s", s)
	}
}

// goesOnManual: a resume=manual session's cut turn waits for a person.
func goesOnManual(t *testing.T) {
	r := newCrashRig(t, false)
	r.start()
	r.create("default") // resume=manual
	r.llm.Push(fakellm.Response{Hang: true})
	r.prompt("first prompt")
	r.waitFor("the model request", func() bool { return len(r.llm.ChatRequests()) == 1 })
	r.kill()
	r.start()
	chat := r.chatSays("this session waits for a person (resume=manual)")
	r.checkRestored()
	if strings.Contains(chat, goesOn) || len(r.llm.ChatRequests()) != 1 {
		t.Errorf("a resume=manual session went on by itself (%d requests):\n%s", len(r.llm.ChatRequests()), chat)
	}
}
