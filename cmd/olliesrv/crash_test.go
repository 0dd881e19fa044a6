package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/nstest"
)

// Crash and resume, through the real binary: olliesrv is killed with
// SIGKILL at each point of a tool call's effect sandwich, started again on
// the same state directory, and each time the session and agent come back
// by name and ID, the tool ran at most once (replay-safe tools: at most
// twice), every intent in the session file has exactly one settlement, and
// the agent answers a new prompt with a well-formed conversation, through
// the real openai-go client against fakellm. "During the tool" is
// TestCrashDuringTool (e2e_test.go).
//
// What the design does with the prompt that was running (read from
// host/durable.go and agent/durable.go, and asserted here) in a
// session made resume=manual: a prompt already dequeued is not run again.
// Its user message stays in the history (the model sees it as context with
// the next prompt), and the chat of the restored agent says "[interrupted:
// olliesrv stopped during this turn; …]". Prompts queued and not yet
// dequeued run after the restart, in order, once. By default (resume=auto)
// the cut turn goes on by itself: TestCrashGoesOn.

// crashWait bounds every wait on a condition. Generous: the VM is shared
// and each wait normally ends in well under a second.
const crashWait = 30 * time.Second

// crashRig is one session with one agent, a marker tool and the model
// server, across several runs of olliesrv on one state directory.
type crashRig struct {
	t       *testing.T
	llm     *fakellm.Server
	dir     string // namespace directory (socket)
	work    string // the session's cwd: the tool's marker file and controls
	state   string // XDG_STATE_HOME, shared by every run
	env     []string
	srv     *exec.Cmd
	logs    []*logBuffer // stderr of every run; read only once that run was waited for
	pidFile string       // the running olliesrv's pid, for the preTool hook
	sid     string       // session ID
	aid     string       // agent ID
}

// markerTool appends a line to work/runs, then, on its nth run, hangs if
// work/hang-N exists, or waits on the FIFO work/exit-N if it exists, and
// finally prints "real result of run N".
const markerTool = `#!/bin/sh
echo run >> "%[1]s/runs"
n=$(grep -c run "%[1]s/runs")
if [ -e "%[1]s/hang-$n" ]; then sleep 120; fi
if [ -p "%[1]s/exit-$n" ]; then read x < "%[1]s/exit-$n"; fi
echo "real result of run $n"
`

func newCrashRig(t *testing.T, replaySafe bool) *crashRig {
	r := &crashRig{t: t, llm: fakellm.Start(t), dir: nstest.ShortTempDir(t), work: t.TempDir(), state: t.TempDir()}
	tools, config := t.TempDir(), t.TempDir()
	meta := fmt.Sprintf(`{"description": "Append to a marker file.", "timeout": 300, "replaySafe": %t}`, replaySafe)
	os.WriteFile(filepath.Join(tools, "mark.meta"), []byte(meta), 0644)
	os.WriteFile(filepath.Join(tools, "mark"), []byte(fmt.Sprintf(markerTool, r.work)), 0755)
	// A profile whose preTool hook kills olliesrv once, when armed: it runs
	// outside the sandbox, after the model's reply is committed and before
	// the call's intent.
	r.pidFile = filepath.Join(config, "olliesrv.pid")
	armed := filepath.Join(r.work, "armed")
	hook := fmt.Sprintf(`if [ -e %s ]; then rm -f %[1]s; kill -9 $(cat %s); sleep 5; fi`, armed, r.pidFile)
	profile, _ := json.Marshal(map[string]any{"description": "Crash test.", "prompt": []string{"echo You are a test agent."},
		"hooks": map[string]string{"preTool": hook}})
	os.MkdirAll(filepath.Join(config, "ollie", "agents"), 0755)
	os.WriteFile(filepath.Join(config, "ollie", "agents", "crashhook.json"), profile, 0644)

	data, _ := filepath.Abs("../../data")
	r.env = []string{"OLLIE_TOOLS_PATH=" + tools, "OLLIE_DATA=" + data, "XDG_STATE_HOME=" + r.state, "XDG_CONFIG_HOME=" + config,
		"OPENAI_BASE_URL=" + r.llm.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"}
	// Registered after the temporary directories, so it runs before they
	// go, and after startBinary's cleanups have stopped the server.
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(r.diag())
		}
	})
	return r
}

// start runs olliesrv on the rig's state and records its pid for the hook.
func (r *crashRig) start() {
	r.t.Helper()
	var log *logBuffer
	r.srv, log = startBinary(r.t, r.dir, r.env...)
	r.logs = append(r.logs, log)
	os.WriteFile(r.pidFile, []byte(strconv.Itoa(r.srv.Process.Pid)), 0644)
}

// kill sends SIGKILL and reaps the server.
func (r *crashRig) kill() {
	r.t.Helper()
	if err := r.srv.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		r.t.Fatal(err)
	}
	r.waitDead()
}

// waitDead waits for the server to die (killed by the test or the hook)
// and checks it died of SIGKILL.
func (r *crashRig) waitDead() {
	r.t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.srv.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(crashWait):
		r.srv.Process.Kill()
		<-done
		r.t.Fatal("olliesrv did not die")
	}
	if ws, ok := r.srv.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		r.t.Fatalf("olliesrv ended with %v, not by SIGKILL", err)
	}
}

// diag is what a failure shows: every run's log and the session file.
func (r *crashRig) diag() string {
	if r.srv != nil && r.srv.ProcessState == nil {
		r.srv.Process.Kill()
		r.srv.Wait()
	}
	var b strings.Builder
	for i, l := range r.logs {
		fmt.Fprintf(&b, "--- olliesrv run %d:\n%s", i+1, l.String())
	}
	files, _ := filepath.Glob(filepath.Join(r.state, "ollie", "sessions", "*.jsonl"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "--- %s:\n%s", f, data)
	}
	runs, _ := os.ReadFile(filepath.Join(r.work, "runs"))
	fmt.Fprintf(&b, "--- marker file:\n%s", runs)
	return b.String()
}

// ollie runs the client and fails the test unless it succeeds.
func (r *crashRig) ollie(stdin string, args ...string) string {
	r.t.Helper()
	out, code := runBinary(r.t, r.dir, stdin, args...)
	if code != 0 {
		r.t.Fatalf("ollie %s <<< %q: exit %d: %s", strings.Join(args, " "), stdin, code, out)
	}
	return out
}

func (r *crashRig) read(path string) string { r.t.Helper(); return r.ollie("", "read", path) }

// waitFor polls cond until it holds, failing after crashWait.
func (r *crashRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(crashWait)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// create makes session "crash" with agent "a" and remembers their IDs.
// The session is resume=manual: a cut turn waits for a person, as these
// tests of what a crash leaves behind expect (TestCrashGoesOn is the
// default, resume=auto).
func (r *crashRig) create(profile string) {
	r.t.Helper()
	r.createResume(profile, "manual")
}

// createResume is create with the session's resume= mode.
func (r *crashRig) createResume(profile, resume string) {
	r.t.Helper()
	r.ollie("name=crash cwd="+r.work+" resume="+resume, "rdwr", "session/new")
	r.ollie("name=a backend=openai profile="+profile, "rdwr", "session/crash/agent/new")
	r.sid = strings.TrimSpace(r.read("session/crash/id"))
	r.aid = strings.TrimSpace(r.read("session/crash/agent/a/id"))
}

func (r *crashRig) prompt(text string) {
	r.t.Helper()
	r.ollie(text, "write", "session/crash/agent/a/prompt")
}

// runs is how many times the tool started.
func (r *crashRig) runs() int {
	b, _ := os.ReadFile(filepath.Join(r.work, "runs"))
	return strings.Count(string(b), "run\n")
}

// checkRuns checks that the tool ran want times. A wrong extra run could
// still be on its way when the test gets here, so rather than wait a while
// and count, the agent calls the tool once more, as a barrier, and that
// run tells which it is. The barrier comes after every run the test's
// turns started (a turn asks the model again only once its calls have
// ended) and after every run restoring the session started: such a run
// answers a call left open in the history once the runs have ended, and
// the barrier turn's request must have every call answered.
func (r *crashRig) checkRuns(want int) {
	r.t.Helper()
	r.llm.Push(fakellm.ToolCalls(fakellm.Call{ID: "call_barrier", Name: "mark", Args: `{}`}), fakellm.Text("barrier passed"))
	r.prompt("mark once more")
	r.waitFor("the barrier call", func() bool {
		return strings.Contains(r.read("session/crash/agent/a/log"), "barrier passed")
	})
	reqs := r.llm.ChatRequests()
	for i, req := range reqs {
		for _, e := range conversationErrors(req) {
			r.t.Errorf("chat request %d: %s", i+1, e)
		}
	}
	var barrier string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" && m.ToolCallID == "call_barrier" {
			barrier = m.Text()
		}
	}
	if wantRes := fmt.Sprintf("real result of run %d", want+1); !strings.Contains(barrier, wantRes) {
		r.t.Errorf("the barrier call's result is %q, want %q: the tool ran %d times before it, want %d", barrier, wantRes, r.runs()-1, want)
	}
	if n := r.runs(); n != want+1 {
		r.t.Errorf("the tool ran %d times with the barrier, want %d and the barrier's", n, want)
	}
}

// checkRestored checks that the session and the agent are back by name
// and by ID, and idle.
func (r *crashRig) checkRestored() {
	r.t.Helper()
	if idx := r.read("session/idx"); !strings.HasPrefix(idx, r.sid+"\tcrash\t") || strings.Count(idx, "\n") != 1 {
		r.t.Errorf("restored session/idx = %q, want session %s named crash", idx, r.sid)
	}
	if got := r.read("session/" + r.sid + "/name"); got != "crash\n" {
		r.t.Errorf("session %s is named %q", r.sid, got)
	}
	if got := r.read("session/crash/agent/a/id"); got != r.aid+"\n" {
		r.t.Errorf("agent a has ID %q, want %s", got, r.aid)
	}
	if got := r.read("session/" + r.sid + "/agent/" + r.aid + "/name"); got != "a\n" {
		r.t.Errorf("agent %s is named %q", r.aid, got)
	}
	r.waitFor("the restored agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
}

// sessionFile is the session's one file.
func (r *crashRig) sessionFile() string {
	r.t.Helper()
	files, _ := filepath.Glob(filepath.Join(r.state, "ollie", "sessions", "*.jsonl"))
	if len(files) != 1 {
		r.t.Fatalf("session files: %v", files)
	}
	return files[0]
}

// call is what the session file says of one tool call.
type call struct {
	intents, settles, reruns int
	result                   json.RawMessage // of the first settlement
}

// calls reads the session file, records inside transactions included,
// and checks that every intent has exactly one settlement and every
// settlement an intent.
func (r *crashRig) calls() map[string]*call {
	r.t.Helper()
	data, err := os.ReadFile(r.sessionFile())
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]*call{}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, line := range lines {
		var recs []map[string]json.RawMessage
		if strings.HasPrefix(line, "[") {
			err = json.Unmarshal([]byte(line), &recs)
		} else {
			recs = make([]map[string]json.RawMessage, 1)
			err = json.Unmarshal([]byte(line), &recs[0])
		}
		if err != nil {
			r.t.Fatalf("session file line %d is not JSON: %v: %s", i+1, err, line)
		}
		for _, rec := range recs {
			var kind, id string
			json.Unmarshal(rec["kind"], &kind)
			json.Unmarshal(rec["id"], &id)
			if !strings.HasPrefix(kind, "tool.") {
				continue
			}
			c := out[id]
			if c == nil {
				c = &call{}
				out[id] = c
			}
			switch kind {
			case "tool.intent":
				c.intents++
			case "tool.settle":
				if c.settles == 0 {
					c.result = rec["result"]
				}
				c.settles++
			case "tool.rerun":
				c.reruns++
			}
		}
	}
	for id, c := range out {
		if c.intents != 1 || c.settles != 1 {
			r.t.Errorf("call %s: %d intents and %d settlements, want exactly one of each", id, c.intents, c.settles)
		}
	}
	return out
}

// onlyCall returns the one tool call of the session file.
func (r *crashRig) onlyCall() *call {
	r.t.Helper()
	cs := r.calls()
	if len(cs) != 1 {
		r.t.Fatalf("%d tool calls in the session file, want 1", len(cs))
	}
	for _, c := range cs {
		return c
	}
	return nil
}

// chatSays waits until the agent's chat stream holds want, and returns it.
func (r *crashRig) chatSays(want string) string {
	r.t.Helper()
	_, ollie := binaries(r.t)
	cmd := exec.Command(ollie, "read", "session/crash/agent/a/chat")
	cmd.Env = append(os.Environ(), "NAMESPACE="+r.dir)
	var out nstest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	deadline := time.Now().Add(crashWait)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			r.t.Fatalf("the chat never said %q:\n%s", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out.String()
}

// history is the agent's log, decoded.
type logMessage struct {
	Role       string
	Content    string
	ToolCallID string            `json:"tool_call_id"`
	ToolCalls  []json.RawMessage `json:"tool_calls"`
}

func (r *crashRig) history() []logMessage {
	r.t.Helper()
	var out []logMessage
	for _, line := range strings.Split(strings.TrimSpace(r.read("session/crash/agent/a/log")), "\n") {
		if line == "" {
			continue
		}
		var m logMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			r.t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// userPrompts are the user messages of the history, in order.
func (r *crashRig) userPrompts() []string {
	var out []string
	for _, m := range r.history() {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// goesOn checks that the agent answers a new prompt, and that every
// request the model got was a well-formed conversation. It returns the
// last request.
func (r *crashRig) goesOn() *fakellm.ChatRequest {
	r.t.Helper()
	r.llm.Push(fakellm.Text("still here"))
	r.prompt("and now?")
	r.waitFor("the answer to a prompt after the restart", func() bool {
		return strings.Contains(r.read("session/crash/agent/a/log"), "still here")
	})
	reqs := r.llm.ChatRequests()
	for i, req := range reqs {
		for _, e := range conversationErrors(req) {
			r.t.Errorf("chat request %d: %s", i+1, e)
		}
	}
	last := reqs[len(reqs)-1]
	if m := last.Messages[len(last.Messages)-1]; m.Role != "user" || m.Text() != "and now?" {
		r.t.Errorf("the last request ends with %s %q, not the new prompt", m.Role, m.Text())
	}
	return last
}

// conversationErrors checks that every assistant tool call is answered by
// a tool message before the next message of another role, and that every
// tool message answers such a call.
func conversationErrors(req *fakellm.ChatRequest) []string {
	var errs []string
	open := map[string]bool{}
	unanswered := func(at string) {
		if len(open) > 0 {
			ids := make([]string, 0, len(open))
			for id := range open {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			errs = append(errs, fmt.Sprintf("%s: tool calls %v have no result", at, ids))
			clear(open)
		}
	}
	for i, m := range req.Messages {
		if m.Role != "tool" {
			unanswered(fmt.Sprintf("message %d (%s)", i, m.Role))
		}
		switch m.Role {
		case "assistant":
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		case "tool":
			if !open[m.ToolCallID] {
				errs = append(errs, fmt.Sprintf("message %d: a tool result for %q, which no open call asked for", i, m.ToolCallID))
			}
			delete(open, m.ToolCallID)
		}
	}
	unanswered("the end")
	return errs
}

// toolResult is the content of the tool message answering the only call
// in req.
func toolResult(req *fakellm.ChatRequest) string {
	for _, m := range req.Messages {
		if m.Role == "tool" {
			return m.Text()
		}
	}
	return ""
}

// release lets a tool blocked on the FIFO exit-N go, if it is still there.
func (r *crashRig) release(n int) {
	f, err := os.OpenFile(filepath.Join(r.work, fmt.Sprintf("exit-%d", n)), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return // ENXIO: no reader; the tool died with its toolsrv
	}
	f.Write([]byte("go\n"))
	f.Close()
}

func TestCrashResume(t *testing.T) {
	binaries(t) // build once, before the subtests' clocks start

	// Killed while the model's request is in flight: the reply, a tool
	// call, has streamed but not finished. Nothing was committed of it, so
	// there is no intent and the tool never runs; the prompt, already
	// dequeued, comes back as an interrupted turn and is not run again.
	t.Run("before the intent: model request in flight", func(t *testing.T) {
		t.Parallel()
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
	})

	// Killed by the preTool hook: the model's reply asking for the call is
	// committed, its intent is not. The call is answered as interrupted in
	// the history, but there is no intent, no settlement, and no run.
	t.Run("before the intent: reply committed", func(t *testing.T) {
		t.Parallel()
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
		h := r.history()
		if len(h) != 3 || h[1].Role != "assistant" || len(h[1].ToolCalls) != 1 || h[2].Role != "tool" || !strings.Contains(h[2].Content, "stopped before this call started; it was not run") {
			t.Errorf("restored history %+v, want the prompt, the call and a result saying it never started", h)
		}
		if cs := r.calls(); len(cs) != 0 {
			t.Errorf("tool calls in the session file: %v", cs)
		}
		r.goesOn()
		r.checkRuns(0)
	})

	// The tool did its work and is about to exit when olliesrv dies. The
	// brief was for the tool to kill olliesrv itself, but a sandboxed tool
	// cannot signal it (Landlock ABI 6+ scopes signals: kill fails with
	// EPERM), so the tool appends to its marker as its last act and waits
	// on a FIFO to exit, and the test kills olliesrv at that moment.
	t.Run("after the tool ran, before the settlement", func(t *testing.T) {
		t.Parallel()
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
	})

	// A replay-safe tool interrupted by the crash runs once more while
	// olliesrv restores the session, and is settled once, with its result.
	t.Run("replay-safe tool runs once more", func(t *testing.T) {
		t.Parallel()
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
	})

	// The re-run's result must outlive the next restart too: it is what the
	// model was told, and what the session file settled.
	t.Run("replay-safe result survives another restart", func(t *testing.T) {
		t.Parallel()
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
	})

	// A second crash during the re-run: the call is settled as interrupted
	// at the next start and never runs a third time.
	t.Run("replay-safe tool crashes again during its re-run", func(t *testing.T) {
		t.Parallel()
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
	})

	// Prompts written while the agent is busy are committed before the
	// write returns: after the crash they run, in order, each once; the
	// one that was running is the interrupted turn.
	t.Run("queued prompts survive", func(t *testing.T) {
		t.Parallel()
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
	})

	// A crash that tore the last line: the line is dropped with a warning,
	// cut from the file, and the session is whole.
	t.Run("torn session file", func(t *testing.T) {
		t.Parallel()
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
	})
}

// chatNow is the agent's chat stream as it stands, once it has stopped
// growing for a moment: the turn has ended and nothing more is coming.
func (r *crashRig) chatNow(want string) string {
	r.t.Helper()
	chat := r.chatSays(want)
	for {
		time.Sleep(300 * time.Millisecond)
		again := r.chatSays(want)
		if again == chat {
			return chat
		}
		chat = again
	}
}

// TestCrashKeepsChat: the chat stream of a restarted agent is the one it
// had, rebuilt from the session file, and a turn that ended in a model
// error is still that error, not a turn the crash interrupted.
func TestCrashKeepsChat(t *testing.T) {
	binaries(t)

	t.Run("chat rebuilt", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		r.llm.Push(fakellm.ToolCall("mark", `{}`), fakellm.Text("the marker ", "is set"))
		r.prompt("set the marker")
		r.waitFor("the turn to end", func() bool { return strings.Contains(r.read("session/crash/agent/a/log"), "is set") })
		r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
		before := r.chatNow("is set")
		for _, want := range []string{"set the marker\n", "→ mark {}", "← mark: real result of run 1", "the marker is set\n"} {
			if !strings.Contains(before, want) {
				t.Fatalf("the chat before the crash lacks %q:\n%s", want, before)
			}
		}
		r.kill()

		r.start()
		r.checkRestored()
		if after := r.chatNow("is set"); after != before {
			t.Errorf("the chat after the restart:\n%q\nwant the chat before it:\n%q", after, before)
		}
		if raw := r.read("session/crash/agent/a/stats"); strings.Contains(raw, "last_error") {
			t.Errorf("a turn that ended well has an error after the restart: %s", raw)
		}
		r.goesOn()
		r.checkRuns(1)
	})

	t.Run("model error kept", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		r.llm.Push(fakellm.Error(400, "this model does not exist"))
		r.prompt("first prompt")
		r.waitFor("the model error", func() bool {
			return strings.Contains(r.read("session/crash/agent/a/stats"), "this model does not exist")
		})
		r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
		before := r.chatNow("this model does not exist")
		if !strings.Contains(before, "[model error:") {
			t.Fatalf("the chat does not show the model error:\n%s", before)
		}
		r.kill()

		r.start()
		r.checkRestored()
		after := r.chatNow("this model does not exist")
		if after != before {
			t.Errorf("the chat after the restart:\n%q\nwant the chat before it:\n%q", after, before)
		}
		if strings.Contains(after, "[interrupted") {
			t.Errorf("a turn that ended in a model error is reported as interrupted:\n%s", after)
		}
		if stats := r.read("session/crash/agent/a/stats"); !strings.Contains(stats, "model error") || !strings.Contains(stats, "this model does not exist") {
			t.Errorf("stats after the restart lost the model error: %s", stats)
		}
		r.goesOn()
	})
}

// TestCrashTurnHistory: a restart marks as interrupted only a turn that was
// running when olliesrv stopped, and only once: a turn a safety limit
// stopped keeps its reason, an idle agent is not logged as having had a
// turn running, and a turn interrupted once is not interrupted again by
// the next restart.
func TestCrashTurnHistory(t *testing.T) {
	binaries(t)

	t.Run("safety limit kept", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		// The same call three times in a row stops the turn.
		r.llm.Push(fakellm.ToolCall("mark", `{}`), fakellm.ToolCall("mark", `{}`), fakellm.ToolCall("mark", `{}`))
		r.prompt("loop")
		r.waitFor("the safety limit", func() bool {
			return strings.Contains(r.read("session/crash/agent/a/stats"), "stopped: the model made the same tool call")
		})
		r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
		before := r.chatNow("stopped: the model made the same tool call")
		r.kill()

		for run := 2; run <= 3; run++ {
			r.start()
			r.checkRestored()
			after := r.chatNow("stopped: the model made the same tool call")
			if after != before {
				t.Errorf("run %d: the chat after the restart:\n%q\nwant the chat before it:\n%q", run, after, before)
			}
			if stats := r.read("session/crash/agent/a/stats"); !strings.Contains(stats, "stopped: the model made the same tool call") {
				t.Errorf("run %d: stats lost the safety limit: %s", run, stats)
			}
			r.kill()
			if log := r.logs[run-1].String(); strings.Contains(log, "turn was running") {
				t.Errorf("run %d: an idle agent is logged as having had a turn running:\n%s", run, log)
			}
		}
		r.start()
		r.checkRestored()
		r.goesOn()
	})

	t.Run("interrupted once", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		os.WriteFile(filepath.Join(r.work, "hang-1"), nil, 0644)
		r.llm.Push(fakellm.ToolCall("mark", `{}`))
		r.prompt("hang")
		r.waitFor("the tool to start", func() bool { return r.runs() == 1 })
		r.kill()

		r.start()
		r.checkRestored()
		first := r.chatNow("[interrupted: olliesrv stopped during this turn")
		if n := strings.Count(first, "[interrupted: olliesrv stopped"); n != 1 {
			t.Errorf("after the first restart the chat says interrupted %d times:\n%s", n, first)
		}
		r.kill()
		if log := r.logs[1].String(); !strings.Contains(log, "turn was running") {
			t.Errorf("the interrupted turn is not in the log:\n%s", log)
		}

		r.start()
		r.checkRestored()
		if again := r.chatNow("[interrupted: olliesrv stopped during this turn"); again != first {
			t.Errorf("a second restart changed the chat:\n%q\nwant:\n%q", again, first)
		}
		if stats := r.read("session/crash/agent/a/stats"); !strings.Contains(stats, "interrupted: olliesrv stopped") {
			t.Errorf("stats do not say the turn was interrupted: %s", stats)
		}
		r.kill()
		if log := r.logs[2].String(); strings.Contains(log, "turn was running") {
			t.Errorf("the second restart logs the agent as having had a turn running:\n%s", log)
		}
		r.start()
		r.checkRestored()
		r.goesOn()
		r.checkRuns(1)
	})
}
