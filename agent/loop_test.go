package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/toolsrv/tool"
)

// script is a Backend that answers with canned replies, one per request.
type script struct {
	mu       sync.Mutex
	replies  []func(ctx context.Context, msgs []backend.Message) (*backend.Reply, error)
	requests [][]backend.Message
	repeat   bool // keep answering with the last reply
}

func (s *script) Name() string         { return "script" }
func (s *script) DefaultModel() string { return "m" }
func (s *script) Models(ctx context.Context) ([]string, error) {
	return []string{"m"}, nil
}
func (s *script) ContextLength(ctx context.Context, model string) int { return 1000 }

func (s *script) Chat(ctx context.Context, msgs []backend.Message, tools []backend.Tool, p backend.Params, onDelta func(backend.Delta)) (*backend.Reply, error) {
	s.mu.Lock()
	s.requests = append(s.requests, msgs)
	if len(s.replies) == 0 {
		s.mu.Unlock()
		return nil, errors.New("script exhausted")
	}
	f := s.replies[0]
	if len(s.replies) > 1 || !s.repeat {
		s.replies = s.replies[1:]
	}
	s.mu.Unlock()
	r, err := f(ctx, msgs)
	if r != nil && onDelta != nil && r.Message.Content != "" {
		onDelta(backend.Delta{Text: r.Message.Content})
	}
	return r, err
}

func text(s string) func(context.Context, []backend.Message) (*backend.Reply, error) {
	return func(context.Context, []backend.Message) (*backend.Reply, error) {
		return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, Content: s}, Usage: backend.Usage{PromptTokens: 10, CompletionTokens: 2}}, nil
	}
}

func calls(cs ...backend.ToolCall) func(context.Context, []backend.Message) (*backend.Reply, error) {
	return func(context.Context, []backend.Message) (*backend.Reply, error) {
		return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, ToolCalls: cs}}, nil
	}
}

func call(id, name, args string) backend.ToolCall {
	return backend.ToolCall{ID: id, Name: name, Args: json.RawMessage(args)}
}

// fakeTools records calls and how many ran at once.
type fakeTools struct {
	decls    []tool.FunctionDecl
	delay    time.Duration
	fail     bool
	mu       sync.Mutex
	order    []string
	inflight atomic.Int32
	maxSeen  atomic.Int32
}

func (f *fakeTools) Decls(ctx context.Context) ([]tool.FunctionDecl, error) { return f.decls, nil }

func (f *fakeTools) Call(ctx context.Context, name string, args json.RawMessage) (*tool.Result, error) {
	n := f.inflight.Add(1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	defer f.inflight.Add(-1)
	f.mu.Lock()
	f.order = append(f.order, name+" "+string(args))
	f.mu.Unlock()
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return &tool.Result{Tool: name, Failed: true, Output: "interrupted"}, nil
	}
	return &tool.Result{Tool: name, Output: "ran " + name, Failed: f.fail}, nil
}

var decls = []tool.FunctionDecl{
	{Name: "read", Scope: "read", Parameters: json.RawMessage(`{}`)},
	{Name: "write", Scope: "write", ScopeArg: "path", Parameters: json.RawMessage(`{}`)},
	{Name: "shell", Scope: "global", Parameters: json.RawMessage(`{}`)},
}

// journal records the order of entries.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) Entry(kind string, v any) error { j.add("entry " + kind); return nil }
func (j *journal) Intent(id, tool string, args json.RawMessage, replaySafe bool) error {
	j.add("intent " + id)
	return nil
}
func (j *journal) Settle(id string, result any) error { j.add("settle " + id); return nil }
func (j *journal) Chat(string)                        {}
func (j *journal) add(s string) {
	j.mu.Lock()
	j.log = append(j.log, s)
	j.mu.Unlock()
}

// runPrompt submits prompt and waits for the agent to be idle again.
func runPrompt(t *testing.T, a *Agent, prompt string) string {
	t.Helper()
	start := a.Chat.Size()
	turns := a.Stats().Turns
	if err := a.Submit(context.Background(), prompt); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !a.WaitTurns(ctx, turns+1) {
		t.Fatalf("the prompt did not finish; agent in %s", a.State())
	}
	buf := make([]byte, 1<<16)
	var out []byte
	for off := start; off < a.Chat.Size(); {
		n, _ := a.Chat.ReadAt(ctx, buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
	}
	return string(out)
}

func TestTextTurn(t *testing.T) {
	var states []string
	var mu sync.Mutex
	a := New(Config{ID: "a1", SessionID: "s1", Backend: &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){text("hello there")}},
		System: "be brief", Publish: func(topic, data string) {
			mu.Lock()
			states = append(states, topic+" "+data)
			mu.Unlock()
		}})
	defer a.Close()
	out := runPrompt(t, a, "hi")
	if out != "hi\nhello there\n" {
		t.Errorf("chat = %q", out)
	}
	h := a.History()
	if len(h) != 2 || h[0].Content != "hi" || h[1].Content != "hello there" {
		t.Errorf("history = %+v", h)
	}
	mu.Lock()
	got := strings.Join(states, "; ")
	mu.Unlock()
	if got != "session.s1.agent.a1.state thinking; session.s1.agent.a1.state idle" {
		t.Errorf("events = %s", got)
	}
	if st := a.Stats(); st.Turns != 1 || st.PromptTokens != 10 {
		t.Errorf("stats = %+v", st)
	}
}

func TestParallelByScope(t *testing.T) {
	be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
		calls(call("1", "read", `{}`), call("2", "read", `{}`), call("3", "write", `{"path": "/x/a"}`), call("4", "write", `{"path": "/x/b"}`)),
		calls(call("5", "write", `{"path": "/x/a"}`), call("6", "write", `{"path": "/x/a"}`)),
		calls(call("7", "shell", `{}`), call("8", "read", `{}`)),
		text("done"),
	}}
	tools := &fakeTools{decls: decls, delay: 100 * time.Millisecond}
	j := &journal{}
	a := New(Config{ID: "a1", Backend: be, Tools: tools, Cwd: "/x", Journal: j})
	defer a.Close()
	start := time.Now()
	out := runPrompt(t, a, "go")
	elapsed := time.Since(start)
	if tools.maxSeen.Load() != 4 {
		t.Errorf("at most %d calls ran at once; the first round's four should run together", tools.maxSeen.Load())
	}
	// Rounds: 1 wave + 2 waves (same path) + 2 waves (global alone) = 5 waves.
	if elapsed < 500*time.Millisecond {
		t.Errorf("took %s for five waves of 100ms", elapsed)
	}
	if !strings.Contains(out, "→ write {\"path\":\"/x/a\"}") || !strings.Contains(out, "← shell: ran shell") {
		t.Errorf("chat = %q", out)
	}
	h := a.History()
	var tool int
	for _, m := range h {
		if m.Role == backend.RoleTool {
			tool++
		}
	}
	if tool != 8 {
		t.Errorf("%d tool messages, want 8", tool)
	}
	// Four replies of the model, eight calls in them, none running now.
	if st := a.Stats(); st.Steps != 4 || st.ToolCalls != 8 || st.Running != "" {
		t.Errorf("stats: steps %d, tool calls %d, running %q; want 4, 8, none", st.Steps, st.ToolCalls, st.Running)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	intents, settles := 0, 0
	for i, e := range j.log {
		if strings.HasPrefix(e, "intent ") {
			intents++
			id := strings.TrimPrefix(e, "intent ")
			found := false
			for _, later := range j.log[i+1:] {
				if later == "settle "+id {
					found = true
				}
			}
			if !found {
				t.Errorf("intent %s never settled", id)
			}
		}
		if strings.HasPrefix(e, "settle ") {
			settles++
		}
	}
	if intents != 8 || settles != 8 {
		t.Errorf("%d intents, %d settlements", intents, settles)
	}
}

func TestSafetyLimits(t *testing.T) {
	t.Run("consecutive errors", func(t *testing.T) {
		n := 0
		be := &script{repeat: true, replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
			func(ctx context.Context, m []backend.Message) (*backend.Reply, error) {
				n++
				return calls(call(fmt.Sprint(n), "read", fmt.Sprintf(`{"n": %d}`, n)))(ctx, m)
			},
		}}
		a := New(Config{ID: "a", Backend: be, Tools: &fakeTools{decls: decls, fail: true}})
		defer a.Close()
		out := runPrompt(t, a, "go")
		if !strings.Contains(out, "[nudge: The last 5 tool calls failed") || !strings.Contains(out, "[stopped: 10 tool calls in a row failed]") {
			t.Errorf("chat = %q", out)
		}
		if n != 10 {
			t.Errorf("%d model requests, want 10", n)
		}
	})
	t.Run("repeated call", func(t *testing.T) {
		be := &script{repeat: true, replies: []func(context.Context, []backend.Message) (*backend.Reply, error){calls(call("x", "read", `{"a": 1}`))}}
		tools := &fakeTools{decls: decls}
		a := New(Config{ID: "a", Backend: be, Tools: tools})
		defer a.Close()
		out := runPrompt(t, a, "go")
		if !strings.Contains(out, "[stopped: the model made the same tool call 3 times in a row]") || len(tools.order) != 2 {
			t.Errorf("chat = %q, %d calls ran", out, len(tools.order))
		}
	})
	t.Run("max steps", func(t *testing.T) {
		n := 0
		be := &script{repeat: true, replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
			func(ctx context.Context, m []backend.Message) (*backend.Reply, error) {
				n++
				return calls(call(fmt.Sprint(n), "read", fmt.Sprintf(`{"n": %d}`, n)))(ctx, m)
			},
		}}
		a := New(Config{ID: "a", Backend: be, Tools: &fakeTools{decls: decls}, MaxSteps: 4})
		defer a.Close()
		if out := runPrompt(t, a, "go"); !strings.Contains(out, "[stopped: 4 model requests for one prompt is the limit (max steps)]") {
			t.Errorf("chat = %q", out)
		}
	})
	t.Run("unknown tool and bad JSON", func(t *testing.T) {
		be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
			calls(call("1", "nosuch", `{}`), call("2", "read", `{"a": `)), text("ok"),
		}}
		a := New(Config{ID: "a", Backend: be, Tools: &fakeTools{decls: decls}})
		defer a.Close()
		runPrompt(t, a, "go")
		h := a.History()
		if !strings.Contains(h[2].Content, `no tool "nosuch"`) || !strings.Contains(h[3].Content, "malformed (not valid JSON)") {
			t.Errorf("tool messages: %q / %q", h[2].Content, h[3].Content)
		}
	})
}

func TestInterruptAndErrors(t *testing.T) {
	t.Run("interrupt while thinking", func(t *testing.T) {
		be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
			func(ctx context.Context, m []backend.Message) (*backend.Reply, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			text("after"),
		}}
		a := New(Config{ID: "a", Backend: be})
		defer a.Close()
		a.Submit(context.Background(), "slow")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s, _ := a.WaitChange(ctx, StateIdle); s != StateThinking {
			t.Fatalf("state %s", s)
		}
		if !a.Interrupt(ErrStopped) {
			t.Fatal("nothing to interrupt")
		}
		if s, _ := a.WaitChange(ctx, StateThinking); s != StateIdle {
			t.Fatalf("state after interrupt %s", s)
		}
		if out := runPrompt(t, a, "next"); out != "next\nafter\n" {
			t.Errorf("the next prompt: %q", out)
		}
		if a.Interrupt(ErrStopped) {
			t.Error("interrupted an idle agent")
		}
		all, _ := readAll(a)
		if !strings.Contains(all, "[interrupted: agent: stopped]") {
			t.Errorf("chat = %q", all)
		}
	})
	t.Run("context overflow compacts once", func(t *testing.T) {
		overflow := func(ctx context.Context, m []backend.Message) (*backend.Reply, error) {
			return nil, fmt.Errorf("too long: %w", backend.ErrContextOverflow)
		}
		var history []backend.Message
		for i := range 20 {
			history = append(history, backend.Message{Role: backend.RoleUser, Content: fmt.Sprint("old ", i)},
				backend.Message{Role: backend.RoleAssistant, Content: "ok"})
		}
		be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){overflow, text("fits now")}}
		a := New(Config{ID: "a", Backend: be, History: history})
		defer a.Close()
		out := runPrompt(t, a, "new")
		if !strings.Contains(out, "compacting and retrying") || !strings.HasSuffix(out, "fits now\n") {
			t.Errorf("chat = %q", out)
		}
		if n := len(be.requests[1]); n > 11 { // system, note, 8 kept, the prompt
			t.Errorf("the retry sent %d messages", n)
		}
		if !strings.Contains(a.History()[0].Content, "earlier messages were removed") {
			t.Errorf("history starts with %q", a.History()[0].Content)
		}
	})
	t.Run("backend error reaches chat and stats", func(t *testing.T) {
		be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
			func(context.Context, []backend.Message) (*backend.Reply, error) {
				return nil, &backend.APIError{Backend: "x", Status: 401, Message: "invalid api key"}
			},
		}}
		a := New(Config{ID: "a", Backend: be})
		defer a.Close()
		out := runPrompt(t, a, "hi")
		if !strings.Contains(out, "[model error: backend x: HTTP 401: invalid api key]") || a.Stats().LastError == "" {
			t.Errorf("chat = %q", out)
		}
	})
}

func readAll(a *Agent) (string, error) {
	buf := make([]byte, a.Chat.Size())
	n, err := a.Chat.ReadAt(context.Background(), buf, 0)
	return string(buf[:n]), err
}

func TestHooksInLoop(t *testing.T) {
	dir := t.TempDir()
	be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
		calls(call("1", "shell", `{"cmd": "rm -rf /"}`), call("2", "read", `{}`)), text("ok"),
	}}
	tools := &fakeTools{decls: decls}
	hooks := &Hooks{Dir: dir, Commands: map[string]string{
		HookPreTool:  `grep -q '"tool":"shell"' && { echo "shell is not allowed here" >&2; exit 2; }; exit 0`,
		HookPostTool: `echo "(checked)"`,
		HookPreTurn:  `echo "remember: be careful"`,
	}}
	a := New(Config{ID: "a", Backend: be, Tools: tools, Hooks: hooks, Cwd: dir})
	defer a.Close()
	runPrompt(t, a, "go")
	if len(tools.order) != 1 || !strings.HasPrefix(tools.order[0], "read") {
		t.Fatalf("ran %v; the preTool hook should have stopped shell", tools.order)
	}
	h := a.History()
	if !strings.Contains(h[0].Content, "remember: be careful") {
		t.Errorf("preTurn did not inject: %q", h[0].Content)
	}
	if !strings.Contains(h[2].Content, "not run: tool call blocked by the preTool hook: shell is not allowed here") {
		t.Errorf("shell result %q", h[2].Content)
	}
	if h[3].Content != "ran read\n(checked)" && h[3].Content != "ran read\n(checked)\n" {
		t.Errorf("read result %q", h[3].Content)
	}
}

func TestReplanAndStall(t *testing.T) {
	n := 0
	be := &script{repeat: true, replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
		func(ctx context.Context, m []backend.Message) (*backend.Reply, error) {
			n++
			if n > 9 {
				return text("enough")(ctx, m)
			}
			// The same read with a changing first call: not a repeat, but
			// the last action stays the same.
			return calls(call(fmt.Sprint(n), "write", fmt.Sprintf(`{"path": "/x/%d"}`, n)), call("r"+fmt.Sprint(n), "read", `{"same": true}`))(ctx, m)
		},
	}}
	a := New(Config{ID: "a", Backend: be, Tools: &fakeTools{decls: decls}, Cwd: "/x", System: "sys"})
	defer a.Close()
	out := runPrompt(t, a, "fix everything\nin detail")
	if !strings.Contains(out, "[stall: Your last 5 rounds ended with the same action (read {\"same\":true})") {
		t.Errorf("no stall nudge: %q", out)
	}
	if !strings.Contains(out, "[replan: You have made 8 rounds of tool calls without a plan.") {
		t.Errorf("no replan nudge: %q", out)
	}
	last := be.requests[len(be.requests)-1][0]
	if last.Role != backend.RoleSystem || !strings.Contains(last.Content, `<task-state>{"objective":"fix everything","last_action":"read {\"same\":true}"}</task-state>`) {
		t.Errorf("system message = %q", last.Content)
	}
	// With a plan, no replan nudge.
	n = 0
	a2 := New(Config{ID: "b", Backend: be, Tools: &fakeTools{decls: decls}, Cwd: "/x"})
	defer a2.Close()
	a2.SetPlan("1. look\n2. fix")
	if out := runPrompt(t, a2, "again"); strings.Contains(out, "[replan:") {
		t.Errorf("replan nudge despite a plan: %q", out)
	}
}

// halfFull reports a context window that the replies fill past half.
type halfFull struct{ script }

func (h *halfFull) ContextLength(ctx context.Context, model string) int { return 16 }

func TestCompactionAndTiers(t *testing.T) {
	var history []backend.Message
	for i := range 20 {
		history = append(history, backend.Message{Role: backend.RoleUser, Content: fmt.Sprint("old question ", i)},
			backend.Message{Role: backend.RoleAssistant, Content: fmt.Sprint("old answer ", i)})
	}
	be := &halfFull{script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
		calls(call("1", "logs", `{}`)), text("done"), // text reports 10 prompt tokens: past half of 16
	}}}
	cold := append(append([]tool.FunctionDecl(nil), decls...), tool.FunctionDecl{Name: "logs", Scope: "read", Tier: tool.TierCold})
	tools := &fakeTools{decls: cold}
	a := New(Config{ID: "a", Backend: be, Tools: tools, History: history})
	defer a.Close()
	out := runPrompt(t, a, "new question")
	if !strings.Contains(out, "[compacted: the last request used 10 of 16 tokens of context, more than half]") {
		t.Errorf("chat = %q", out)
	}
	h := a.History()
	if !strings.Contains(h[0].Content, "earlier messages were removed") || !strings.Contains(h[0].Content, "Decision index") ||
		!strings.Contains(h[0].Content, "- assistant: old answer") {
		t.Errorf("compaction note = %q", h[0].Content)
	}
	if len(h) > 1+keepOnCompact+1 {
		t.Errorf("%d messages after compaction", len(h))
	}
	var logs string
	for _, m := range h {
		if m.Name == "logs" {
			logs = m.Content
		}
	}
	if !strings.Contains(logs, "collapsed: this tool's results are cold") {
		t.Errorf("cold result kept verbatim: %q", logs)
	}
}

// TestTurnEndWaitsForItsEvent holds the idle event in its subscriber:
// a waiter for the turn's end must not return before every subscriber
// has seen the agent go idle (CI once read "thinking" alone).
func TestTurnEndWaitsForItsEvent(t *testing.T) {
	inPublish, release := make(chan struct{}), make(chan struct{})
	a := New(Config{ID: "a1", SessionID: "s1", Backend: &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){text("hello")}},
		Publish: func(topic, data string) {
			if data == StateIdle {
				close(inPublish)
				<-release
			}
		}})
	defer a.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	if err := a.Submit(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	<-inPublish
	if a.Stats().Turns != 1 {
		t.Fatalf("the turn is not counted while its event goes out: %+v", a.Stats())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if a.WaitTurns(ctx, 1) {
		t.Fatal("a waiter for the turn's end returned before the idle event was out")
	}
	unblock()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if !a.WaitTurns(ctx2, 1) {
		t.Fatal("the turn's end never came")
	}
}
