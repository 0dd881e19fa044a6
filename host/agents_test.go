package host

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/agent/backend"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// twoStep is a Backend that asks for one tool call, then answers with
// what the tool said.
type twoStep struct {
	mu   sync.Mutex
	seen [][]backend.Message
}

func (b *twoStep) Name() string                              { return "twostep" }
func (b *twoStep) DefaultModel() string                      { return "m" }
func (b *twoStep) Models(context.Context) ([]string, error)  { return []string{"m", "other-model"}, nil }
func (b *twoStep) ContextLength(context.Context, string) int { return 0 }
func (b *twoStep) Chat(ctx context.Context, msgs []backend.Message, tools []backend.Tool, p backend.Params, on func(backend.Delta)) (*backend.Reply, error) {
	b.mu.Lock()
	b.seen = append(b.seen, msgs)
	b.mu.Unlock()
	last := msgs[len(msgs)-1]
	if len(tools) == 0 {
		return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, Content: "generated: " + last.Content}}, nil
	}
	if last.Role == backend.RoleTool {
		on(backend.Delta{Text: "the tool said: " + last.Content})
		return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, Content: "the tool said: " + last.Content}}, nil
	}
	return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant,
		ToolCalls: []backend.ToolCall{{ID: "c1", Name: "echo", Args: json.RawMessage(`{"text": "` + last.Content + `"}`)}}}}, nil
}

// echoTool makes a tools directory holding "echo" (it prints what it
// was given), and has the daemon and its tools find it and the starter
// data; it returns the directory.
func echoTool(t *testing.T) string {
	t.Helper()
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo.", "readOnly": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\necho \"echo got $(cat)\"\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	return tools
}

// modelDaemon starts olliesrv whose every backend is be, and attaches to
// it as the admin; the test's end shuts it down.
func modelDaemon(t *testing.T, be backend.Backend) (*Daemon, *client.Fsys) {
	t.Helper()
	return tracedModelDaemon(t, be, nil)
}

// tracedModelDaemon is modelDaemon, its 9P trace written to trace.
func tracedModelDaemon(t *testing.T, be backend.Backend, trace io.Writer) (*Daemon, *client.Fsys) {
	t.Helper()
	d, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Trace: trace, Backends: func(name string) (backend.Backend, error) { return be, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	return d, nstest.Attach(t, d.Socket, "")
}

func TestAgentThroughNamespace(t *testing.T) {
	tools := echoTool(t)

	be := &twoStep{}
	var trace nstest.SyncBuffer
	d, fs := tracedModelDaemon(t, be, &trace)
	n := d.ns
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	name, err := nstest.RdWr(fs, "session/s/agent/new", "name=coder profile=default")
	if err != nil || name != "coder\n" {
		t.Fatalf("agent/new = %q %v", name, err)
	}
	profileTools(t, fs)
	sharedTools(t, fs, tools)
	id := firstTurn(t, d, fs, &trace)

	// Another agent's identity cannot read this agent's chat or log, or
	// write its prompt; anyone may read its state.
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=other"); err != nil {
		t.Fatal(err)
	}
	otherID := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/other/id"))
	as := attachAgent(t, d, otherID)
	for _, f := range []string{"chat", "log", "fifo", "plan"} {
		if _, err := nstest.TryRead(as, "session/s/agent/coder/"+f); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("agent other read coder's %s: %v", f, err)
		}
	}
	if err := nstest.WriteFile(as, "session/s/agent/coder/prompt", "obey"); err == nil {
		t.Error("agent other wrote coder's prompt")
	}
	if _, err := nstest.TryRead(as, "session/s/agent/coder/state"); err != nil {
		t.Errorf("state should be world-readable: %v", err)
	}
	self := attachAgent(t, d, id)
	if err := nstest.WriteFile(self, "session/s/agent/coder/prompt", "again"); err != nil {
		t.Errorf("an agent cannot prompt itself: %v", err)
	}

	// Peers: only linked agents can be messaged, and only by the sender.
	if err := nstest.WriteFile(self, "session/s/agent/coder/peer/other", "psst"); err == nil {
		t.Error("messaged an agent that is not a peer")
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/coder/ctl", "peeradd other"); err != nil || got != "ok\n" {
		t.Fatalf("peeradd: %q %v", got, err)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/other/ctl", "peers"); got != "coder\n" {
		t.Errorf("the link is not both ways: %q", got)
	}
	if err := nstest.WriteFile(as, "session/s/agent/coder/peer/other", "impersonating"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("another agent wrote coder's peer file: %v", err)
	}
	otherAgent := n.agents.lookup(sid0(t, fs), "other")
	turns := otherAgent.Stats().Turns
	if err := nstest.WriteFile(self, "session/s/agent/coder/peer/other", "psst"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if !otherAgent.WaitTurns(wctx, turns+1) {
		t.Fatal("the peer message did not run")
	}
	if h := otherAgent.History(); !strings.Contains(h[0].Content, "Message from your peer coder:\npsst") {
		t.Errorf("peer message arrived as %q", h[0].Content)
	}

	// A sub-agent: agent/new with prompt= answers with the final reply and
	// leaves no agent behind.
	if got, err := nstest.RdWr(fs, "session/s/agent/new", "name=sub prompt=look at this now"); err != nil || got != `the tool said: echo got {"text":"look at this now"}`+"\n" {
		t.Errorf("sub-agent = %q %v", got, err)
	}
	if n.agents.lookup(sid0(t, fs), "sub") != nil {
		t.Error("the sub-agent is still there")
	}

	// Killing the session closes its agents.
	sid := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id"))
	if got := len(d.ns.agents.of(sid)); got != 2 {
		t.Fatalf("%d agents before the kill", got)
	}
	if _, err := nstest.RdWr(fs, "session/s/ctl", "kill"); err != nil {
		t.Fatal(err)
	}
	if got := len(d.ns.agents.of(sid)); got != 0 {
		t.Errorf("%d agents left", got)
	}
}

// profileTools: a profile's tool list narrows what its agent sees, and
// tool_load, tool_unload and a switch of profile change it.
func profileTools(t *testing.T, fs *client.Fsys) {
	if sp, err := nstest.RdWr(fs, "session/s/agent/coder/ctl", "systemprompt"); err != nil || !strings.Contains(sp, "/tmp") || len(sp) < 200 {
		t.Errorf("systemprompt = %q %v", sp, err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=x profile=nosuch"); err == nil || !strings.Contains(err.Error(), "coding") {
		t.Errorf("unknown profile: %v", err)
	}
	// A profile's tool list narrows what its agent sees.
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=narrow profile=coding"); err != nil {
		t.Fatal(err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "tools"); err != nil || strings.Contains(got, "echo") {
		t.Errorf("the coding profile's agent sees %q %v", got, err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/coder/ctl", "tools"); err != nil || got != "echo\tEcho.\n" {
		t.Errorf("the default profile's agent sees %q %v", got, err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "tool_load echo"); err != nil || !strings.HasSuffix(got, "reasoning_think\necho\n") {
		t.Errorf("tool_load on a profile's agent: %q %v", got, err)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "tools"); got != "echo\tEcho.\n" {
		t.Errorf("after tool_load the agent sees %q", got)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "tool_unload echo"); strings.Contains(got, "echo") {
		t.Errorf("tool_unload: %q", got)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "agent default"); err != nil || got != "default\n" {
		t.Fatalf("profile switch: %q %v", got, err)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "tools"); got != "echo\tEcho.\n" {
		t.Errorf("after switching to default the agent sees %q", got)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/narrow/ctl", "agent nosuch"); err == nil || !strings.Contains(err.Error(), "available") {
		t.Errorf("switch to an unknown profile: %v", err)
	}
	nstest.RdWr(fs, "session/s/agent/narrow/ctl", "kill")

}

// sharedTools: agents without a list share the session's tools, and each
// one's tool_load and tool_unload change its own list only.
func sharedTools(t *testing.T, fs *client.Fsys, tools string) {
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=other profile=default"); err != nil {
		t.Fatal(err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/other/ctl", "tool_unload echo"); err != nil || got != "\n" {
		t.Errorf("tool_unload on a shared agent: %q %v", got, err)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/other/ctl", "tools"); got != "" {
		t.Errorf("after tool_unload the agent sees %q", got)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/coder/ctl", "tools"); got != "echo\tEcho.\n" {
		t.Errorf("another agent's tool_unload changed coder's tools: %q", got)
	}
	os.WriteFile(filepath.Join(tools, "late.meta"), []byte(`{"description": "Late.", "readOnly": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "late"), []byte("#!/bin/sh\necho late\n"), 0755)
	if _, err := nstest.RdWr(fs, "session/s/ctl", "invalidate"); err != nil {
		t.Fatal(err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/other/ctl", "tool_load late"); err != nil || got != "late\n" {
		t.Errorf("tool_load of a tool the session lacks: %q %v", got, err)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/coder/ctl", "tools"); got != "echo\tEcho.\n" {
		t.Errorf("another agent's tool_load showed coder %q", got)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/other/ctl", "tool_load nosuch"); err == nil {
		t.Error("tool_load of an unknown tool succeeded")
	}
	nstest.RdWr(fs, "session/s/agent/other/ctl", "kill")
	if ag := nstest.ReadFile(t, fs, "agents"); !strings.Contains(ag, "coding\t") || !strings.Contains(ag, "orchestrator\t") {
		t.Errorf("agents = %q", ag)
	}
}

// firstTurn prompts agent coder: statewait returns at the change, the
// chat shows the turn, and the log, idx and stats record it. It returns
// the agent's ID.
func firstTurn(t *testing.T, d *Daemon, fs *client.Fsys, trace *nstest.SyncBuffer) string {
	id := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/coder/id"))
	if got := nstest.ReadFile(t, fs, "session/s/agent/coder/state"); got != "idle\n" {
		t.Fatalf("state = %q", got)
	}

	chat, err := fs.Open("session/s/agent/coder/chat", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()
	// statewait, read while idle, returns at the next change.
	waited := make(chan string, 1)
	go func() {
		s, _ := nstest.TryRead(fs, "session/s/agent/coder/statewait")
		waited <- s
	}()
	awaitRead(t, trace, "statewait")
	if err := nstest.WriteFile(fs, "session/s/agent/coder/prompt", "hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-waited:
		if s != "thinking\n" && s != "calling\n" && s != "idle\n" {
			t.Errorf("statewait = %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("statewait did not return after a prompt")
	}
	lines := readLines(t, chat, 5)
	want := []string{"hello", "", `→ echo {"text":"hello"}`, `← echo: echo got {"text":"hello"}`, `the tool said: echo got {"text":"hello"}`}
	if strings.Join(lines[:5], "\n") != strings.Join(want, "\n") {
		t.Fatalf("chat = %q, want %q", lines, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !d.ns.agents.lookup(strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id")), "coder").WaitTurns(ctx, 1) {
		t.Fatal("the turn did not end")
	}
	if idx := nstest.ReadFile(t, fs, "session/s/agent/idx"); !strings.Contains(idx, id+"\tcoder\t-\t0\tidle") {
		t.Errorf("agent idx = %q", idx)
	}
	logText := nstest.ReadFile(t, fs, "session/s/agent/"+id+"/log")
	if strings.Count(logText, "\n") != 4 || !strings.Contains(logText, `"role":"tool"`) {
		t.Errorf("log = %q", logText)
	}
	var stats struct{ Turns int }
	json.Unmarshal([]byte(nstest.ReadFile(t, fs, "session/s/agent/coder/stats")), &stats)
	if stats.Turns != 1 {
		t.Errorf("stats turns = %d", stats.Turns)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/coder/ctl", "fly"); err == nil || !strings.Contains(err.Error(), "valid: help, stop") {
		t.Errorf("bad ctl: %q %v", got, err)
	}

	return id
}

func TestGenerate(t *testing.T) {
	be := &twoStep{}
	_, fs := modelDaemon(t, be)
	got, err := nstest.RdWr(fs, "generate", `{"prompt": "hi", "system": "be brief"}`)
	if err != nil || got != "generated: hi\n" {
		t.Fatalf("generate = %q %v", got, err)
	}
	if len(be.seen) != 1 || be.seen[0][0].Content != "be brief" || be.seen[0][1].Content != "hi" {
		t.Errorf("the backend saw %+v", be.seen)
	}
	for req, want := range map[string]string{"": "empty prompt", `{"prompt": "x", "colour": 1}`: "unknown field"} {
		if _, err := nstest.RdWr(fs, "generate", req); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("generate %q: %v, want %q", req, err, want)
		}
	}
	d2, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Shutdown(context.Background())
	if _, err := nstest.RdWr(nstest.Attach(t, d2.Socket, ""), "generate", "hi"); err == nil || !strings.Contains(err.Error(), "no model backend is configured") {
		t.Errorf("generate without a backend: %v", err)
	}
}

// TestRestartRestores stops olliesrv and starts it again on the same state
// directory: sessions, names, pause state, agents, histories and queued
// prompts come back.
func TestRestartRestores(t *testing.T) {
	echoTool(t)
	state := t.TempDir()
	var trace nstest.SyncBuffer
	start := func() (*Daemon, *twoStep) {
		be := &twoStep{}
		d, err := Start(Config{StateDir: state, Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Trace: &trace, Backends: func(name string) (backend.Backend, error) { return be, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return d, be
	}
	d, _ := start()
	fs := nstest.Attach(t, d.Socket, "")
	nstest.RdWr(fs, "session/new", "name=keep cwd=/tmp")
	nstest.RdWr(fs, "session/new", "name=gone cwd=/tmp")
	nstest.WriteFile(fs, "session/keep/name", "kept")
	nstest.RdWr(fs, "session/kept/ctl", "pause")
	nstest.RdWr(fs, "session/gone/ctl", "kill")
	nstest.RdWr(fs, "session/kept/agent/new", "name=coder")
	id := strings.TrimSpace(nstest.ReadFile(t, fs, "session/kept/id"))
	if err := nstest.WriteFile(fs, "session/kept/agent/coder/prompt", "hello"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := d.ns.agents.lookup(id, "coder")
	if !e.WaitTurns(ctx, 1) {
		t.Fatal("the prompt did not finish")
	}
	if got, err := nstest.RdWr(fs, "session/kept/agent/coder/ctl", "model other-model"); err != nil || got != "other-model\n" {
		t.Fatalf("model switch: %q %v", got, err)
	}
	if err := nstest.WriteFile(fs, "session/kept/agent/coder/cfg", "cwd=/"); err == nil || !strings.Contains(err.Error(), "settable: model") {
		t.Errorf("cfg cwd: %v", err)
	}
	if cfg := nstest.ReadFile(t, fs, "session/kept/agent/coder/cfg"); !strings.Contains(cfg, `"model": "other-model"`) || !strings.Contains(cfg, `"profile": "default"`) {
		t.Errorf("cfg = %q", cfg)
	}
	if _, err := nstest.RdWr(fs, "session/kept/agent/coder/ctl", "inject remember the tests"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "session/kept/agent/coder/plan", "1. read\n2. fix\n"); err != nil {
		t.Fatal(err)
	}
	// The goal: status, wait, and handing it to the first agent.
	if err := nstest.WriteFile(fs, "session/kept/goalstatus", "finished"); err == nil || !strings.Contains(err.Error(), "valid: none, running") {
		t.Errorf("bad goal status: %v", err)
	}
	if err := nstest.WriteFile(fs, "session/kept/goal", "ship it"); err != nil {
		t.Fatal(err)
	}
	if st := nstest.ReadFile(t, fs, "session/kept/goalstatus"); st != "running\n" {
		t.Errorf("goalstatus = %q", st)
	}
	if !e.WaitTurns(ctx, 2) {
		t.Fatal("the goal did not reach the agent")
	}
	waited := make(chan string, 1)
	go func() { s, _ := nstest.TryRead(fs, "session/kept/goalwait"); waited <- s }()
	awaitRead(t, &trace, "goalwait")
	if err := nstest.WriteFile(fs, "session/kept/goalstatus", "complete"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-waited:
		if s != "complete\n" {
			t.Errorf("goalwait = %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("goalwait did not return")
	}
	before := nstest.ReadFile(t, fs, "session/kept/agent/coder/log")
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	d, _ = start()
	defer d.Shutdown(context.Background())
	fs = nstest.Attach(t, d.Socket, "")
	if idx := nstest.ReadFile(t, fs, "session/idx"); !strings.HasPrefix(idx, id+"\tkept\ttrue\t") || strings.Count(idx, "\n") != 1 {
		t.Fatalf("restored idx = %q", idx)
	}
	if got := nstest.ReadFile(t, fs, "session/kept/agent/coder/log"); got != before {
		t.Errorf("restored history:\n%s\nwant:\n%s", got, before)
	}
	if g, st := nstest.ReadFile(t, fs, "session/kept/goal"), nstest.ReadFile(t, fs, "session/kept/goalstatus"); g != "ship it" || st != "complete\n" {
		t.Errorf("restored goal %q, status %q", g, st)
	}
	if got, _ := nstest.RdWr(fs, "session/kept/agent/coder/ctl", "model"); got != "other-model\n" {
		t.Errorf("restored model %q", got)
	}
	if !strings.Contains(before, "remember the tests") {
		t.Errorf("inject did not reach the log: %q", before)
	}
	if got, err := nstest.RdWr(fs, "session/kept/agent/coder/ctl", "clear"); err != nil || got != "ok\n" {
		t.Fatalf("clear: %q %v", got, err)
	}
	if got := nstest.ReadFile(t, fs, "session/kept/agent/coder/log"); got != "" {
		t.Errorf("log after clear = %q", got)
	}
	if got := nstest.ReadFile(t, fs, "session/kept/agent/coder/plan"); got != "1. read\n2. fix\n" {
		t.Errorf("restored plan %q", got)
	}
	if got := nstest.ReadFile(t, fs, "session/kept/agent/coder/state"); got != "idle\n" {
		t.Errorf("restored state %q", got)
	}
	if _, err := os.Stat(filepath.Join(state, "killed", ids(t, state, "killed"))); err != nil {
		t.Errorf("the killed session's file was not kept aside: %v", err)
	}
}

// ids returns the one file name in dir/sub.
func ids(t *testing.T, dir, sub string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil || len(ents) != 1 {
		t.Fatalf("%s/%s: %v %v", dir, sub, ents, err)
	}
	return ents[0].Name()
}

// steps is a Backend that plays its replies in order.
type steps struct {
	mu      sync.Mutex
	replies []backend.Message
	seen    [][]backend.Message
}

func (b *steps) Name() string                              { return "steps" }
func (b *steps) DefaultModel() string                      { return "m" }
func (b *steps) Models(context.Context) ([]string, error)  { return nil, nil }
func (b *steps) ContextLength(context.Context, string) int { return 0 }
func (b *steps) Chat(ctx context.Context, msgs []backend.Message, tools []backend.Tool, p backend.Params, on func(backend.Delta)) (*backend.Reply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = append(b.seen, msgs)
	if len(b.replies) == 0 {
		return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, Content: "done"}}, nil
	}
	m := b.replies[0]
	b.replies = b.replies[1:]
	return &backend.Reply{Message: m}, nil
}

// TestBackgroundCall runs a call with background set: the model gets a
// process id at once, and the process's output later, as a
// system-proc-interrupt block.
func TestBackgroundCall(t *testing.T) {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "build.meta"), []byte(`{"description": "Build."}`), 0644)
	os.WriteFile(filepath.Join(tools, "build"), []byte("#!/bin/sh\necho compiling\necho 'error: missing semicolon'\nexit 2\n"), 0755)
	os.WriteFile(filepath.Join(tools, "wait.meta"), []byte(`{"description": "Wait a little.", "readOnly": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "wait"), []byte("#!/bin/sh\nsleep 0.5\necho waited\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	be := &steps{replies: []backend.Message{
		{Role: backend.RoleAssistant, ToolCalls: []backend.ToolCall{{ID: "b1", Name: "build", Args: json.RawMessage(`{"background": true}`)}}},
		{Role: backend.RoleAssistant, ToolCalls: []backend.ToolCall{{ID: "w1", Name: "wait", Args: json.RawMessage(`{}`)}}},
	}}
	d, fs := modelDaemon(t, be)
	nstest.RdWr(fs, "session/new", "name=s cwd=/tmp")
	nstest.RdWr(fs, "session/s/agent/new", "name=a")
	if err := nstest.WriteFile(fs, "session/s/agent/a/prompt", "build it"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sid := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id"))
	if !d.ns.agents.lookup(sid, "a").WaitTurns(ctx, 1) {
		t.Fatal("the turn did not end")
	}
	h := d.ns.agents.lookup(sid, "a").History()
	var started, interrupt string
	for _, m := range h {
		if m.Role == backend.RoleTool && m.ToolCallID == "b1" {
			started = m.Content
		}
		if m.Role == backend.RoleUser && strings.Contains(m.Content, "<system-proc-interrupt") {
			interrupt = m.Content
		}
	}
	if out := nstest.ReadFile(t, fs, "session/s/agent/a/proc/1/out"); !strings.HasPrefix(out, "compiling\nerror: missing semicolon\n") {
		t.Errorf("proc/1/out = %q", out)
	}
	if st := nstest.ReadFile(t, fs, "session/s/agent/a/proc/1/status"); st != "exit status 2\n" {
		t.Errorf("proc/1/status = %q", st)
	}
	if procs, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "proc"); err != nil || procs != "1\tbuild\texit status 2\n" {
		t.Errorf("proc = %q %v", procs, err)
	}
	if out, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "proc out 1"); err != nil || !strings.HasPrefix(out, "compiling\nerror: missing semicolon\n") {
		t.Errorf("proc out = %q %v", out, err)
	}
	// Another agent of the session sees none of a's processes through its
	// own ctl, and can neither read nor end them.
	nstest.RdWr(fs, "session/s/agent/new", "name=b")
	b := attachAgent(t, d, strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/b/id")))
	if procs, err := nstest.RdWr(b, "session/s/agent/b/ctl", "proc"); err != nil || procs != "" {
		t.Errorf("b's proc = %q %v", procs, err)
	}
	for _, req := range []string{"proc out 1", "proc kill 1", "proc dismiss 1"} {
		if got, err := nstest.RdWr(b, "session/s/agent/b/ctl", req); err == nil || !strings.Contains(err.Error(), "no background process 1") {
			t.Errorf("b's %s: %q %v", req, got, err)
		}
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "proc dismiss 1"); err != nil || got != "ok\n" {
		t.Errorf("proc dismiss = %q %v", got, err)
	}
	if !strings.Contains(started, "started in the background as process 1") {
		t.Errorf("the background call answered %q", started)
	}
	if !strings.Contains(interrupt, `tool="build" status="exit status 2"`) || !strings.Contains(interrupt, "error: missing semicolon") {
		t.Errorf("no process output reached the model; history: %+v", h)
	}
}

func sid0(t *testing.T, fs *client.Fsys) string {
	return strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id"))
}

// TestRefusedRequests checks the smaller holes of issue 10: names that
// are files beside the sessions or agents, and agent controls that used
// to succeed silently or to widen an agent from its own tool.
func TestRefusedRequests(t *testing.T) {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo.", "readOnly": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\ncat\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	d, fs := modelDaemon(t, &twoStep{})
	cwd := t.TempDir()
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd="+cwd); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=b profile=default"); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/a/id"))
	self := attachAgent(t, d, id)

	for _, c := range []struct {
		fs        *client.Fsys
		op        string // rdwr or write
		file, req string
		want      string // in the error
	}{
		{fs, "rdwr", "session/new", "name=new", "name of a file beside the sessions"},
		{fs, "rdwr", "session/new", "name=idx", "name of a file beside the sessions"},
		{fs, "write", "session/s/name", "new", "invalid"},
		{fs, "write", "session/s/name", "idx", "invalid"},
		{fs, "rdwr", "session/s/agent/new", "name=new", "name of a file beside the agents"},
		{fs, "rdwr", "session/s/agent/new", "name=idx", "name of a file beside the agents"},
		{fs, "write", "session/s/agent/a/name", "idx", "invalid name"},
		{fs, "rdwr", "session/s/agent/a/ctl", "name new", "invalid name"},
		{fs, "rdwr", "session/s/agent/a/ctl", "cwd /", "cwd cannot change"},
		{fs, "rdwr", "session/s/agent/a/ctl", "backend other", "backend cannot change"},
		{fs, "write", "session/s/agent/a/cfg", "cwd=/", "cannot change while the agent lives"},
		{fs, "rdwr", "session/s/agent/a/ctl", "tool_unload nosuch", "nosuch is not among this agent's tools"},
		{fs, "rdwr", "session/s/agent/a/ctl", "stop extra", `stop takes no argument, got "extra"`},
		{fs, "rdwr", "session/s/agent/a/ctl", "tools echo", "tools takes no argument"},
		{fs, "rdwr", "session/s/agent/a/ctl", "model nosuch", `backend twostep has no model "nosuch" (it has m`},
		{fs, "write", "session/s/agent/a/cfg", "model=nosuch", `has no model "nosuch"`},
		{self, "rdwr", "session/s/agent/a/ctl", "agent coding", "only olliesrv's own user may switch an agent's profile"},
		{self, "rdwr", "session/s/agent/a/ctl", "peeradd b", "only olliesrv's own user may link agents"},
	} {
		var err error
		if c.op == "rdwr" {
			_, err = nstest.RdWr(c.fs, c.file, c.req)
		} else {
			err = nstest.WriteFile(c.fs, c.file, c.req)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want an error saying %q", c.file, c.req, err, c.want)
		}
	}

	// Nothing changed, and what is allowed still works.
	if got := nstest.ReadFile(t, fs, "session/idx"); strings.Count(got, "\n") != 1 {
		t.Errorf("session/idx = %q", got)
	}
	if got := nstest.ReadFile(t, fs, "session/s/agent/idx"); strings.Count(got, "\n") != 2 || !strings.Contains(got, "\ta\t") {
		t.Errorf("agent/idx = %q", got)
	}
	var cfg map[string]string
	if err := json.Unmarshal([]byte(nstest.ReadFile(t, fs, "session/s/agent/a/cfg")), &cfg); err != nil {
		t.Fatal(err)
	}
	if real, _ := filepath.EvalSymlinks(cwd); cfg["cwd"] != real || cfg["profile"] != "default" || cfg["model"] != "" || cfg["backend"] != "twostep" {
		t.Errorf("cfg after the refusals: %v", cfg)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "model m"); err != nil || got != "m\n" {
		t.Errorf("model m: %q %v", got, err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "stop"); err != nil || got != "idle\n" {
		t.Errorf("stop: %q %v", got, err)
	}
	if got, err := nstest.RdWr(self, "session/s/agent/a/ctl", "agent default"); err != nil || got != "default\n" {
		t.Errorf("an agent's tool naming its own profile: %q %v", got, err)
	}
	if got, _ := nstest.RdWr(fs, "session/s/agent/a/ctl", "peers"); got != "" {
		t.Errorf("a's peers after its tool's peeradd: %q", got)
	}
	if got, err := nstest.RdWr(self, "session/s/agent/a/ctl", "peerdel b"); err != nil || got != "ok\n" {
		t.Errorf("an agent's tool unlinking a peer: %q %v", got, err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "peeradd b"); err != nil || got != "ok\n" {
		t.Errorf("the admin linking agents: %q %v", got, err)
	}
	if got, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "agent coding"); err != nil || got != "coding\n" {
		t.Errorf("the admin switching the profile: %q %v", got, err)
	}
}

// Two chats started at once in one directory both ask for the agent
// "chat": one gets it, the other is told it exists. Unnamed agents made at
// once get names of their own.
func TestAgentNewAtOnce(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, fs := modelDaemon(t, &twoStep{})
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	conns := make([]*client.Fsys, n)
	for i := range conns {
		conns[i] = nstest.Attach(t, d.Socket, "")
	}
	race := func(req string) (names []string, refused int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name, err := nstest.RdWr(c, "session/s/agent/new", req)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					names = append(names, strings.TrimSpace(name))
				case strings.Contains(err.Error(), "exists in this session"):
					refused++
				default:
					t.Errorf("agent/new %s: %v", req, err)
				}
			}()
		}
		wg.Wait()
		return names, refused
	}
	if names, refused := race("name=chat profile=default"); len(names) != 1 || refused != n-1 {
		t.Errorf("%d requests for the name chat at once: made %v, refused %d", n, names, refused)
	}
	names, _ := race("profile=default")
	slices.Sort(names)
	if len(slices.Compact(names)) != n {
		t.Errorf("%d unnamed agents made at once were named %v", n, names)
	}
	if got := len(d.ns.agents.of(d.ns.sessions.List()[0].ID)); got != n+1 {
		t.Errorf("the session has %d agents, want %d", got, n+1)
	}
}

// TestAgentVerbsDeclaredOnce: help lists each control of the table once,
// by its name, and the table names no control twice, so the ctl file's
// description, help and dispatch cannot disagree.
func TestAgentVerbsDeclaredOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range agentVerbs {
		if seen[v.name] {
			t.Errorf("%s declared twice", v.name)
		}
		seen[v.name] = true
		if v.run == nil && v.name != "help" {
			t.Errorf("%s does nothing", v.name)
		}
	}
	listed := map[string]bool{}
	for _, u := range agentUsage() {
		name, _, _ := strings.Cut(u, " ")
		if !seen[name] {
			t.Errorf("help lists %q, which no control is", u)
		}
		listed[name] = true
	}
	for name := range seen {
		if !listed[name] {
			t.Errorf("help does not list %s", name)
		}
	}
}

// awaitRead waits until the server has taken in a read of the file name
// (walked to last) in its 9P trace: a blocking read is then under way.
func awaitRead(t *testing.T, trace *nstest.SyncBuffer, name string) {
	t.Helper()
	walk := regexp.MustCompile(`<-- Twalk tag \d+ fid \d+ newfid (\d+) wname \[[^\]]*\b` + regexp.QuoteMeta(name) + `\]`)
	await.Until(t, 10*time.Second, "a read of "+name+" reaching the server", func() bool {
		s := trace.String()
		walks := walk.FindAllStringSubmatchIndex(s, -1)
		if walks == nil {
			return false
		}
		last := walks[len(walks)-1]
		read := regexp.MustCompile(`<-- Tread tag \d+ fid ` + s[last[2]:last[3]] + ` `)
		return read.MatchString(s[last[1]:])
	})
}
