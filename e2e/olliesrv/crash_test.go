package olliesrv

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
	"ollie/internal/await"
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

// waitFor asks cond until it holds, failing after crashWait.
func (r *crashRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	await.Until(r.t, crashWait, "waiting for "+what, cond)
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
	await.Until(r.t, crashWait, fmt.Sprintf("the chat saying %q", want),
		func() bool { return strings.Contains(out.String(), want) },
		func() string { return "the chat:\n" + out.String() })
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
