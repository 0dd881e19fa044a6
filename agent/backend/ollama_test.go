package backend_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
)

// paths lists the method and path of every request s received.
func paths(s *fakellm.Server) []string {
	var out []string
	for _, r := range s.Requests() {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

// TestOllamaContextWindow: the window is read from /api/show (trained
// length, Modelfile num_ctx) and /api/ps (what a loaded model runs with),
// once per model, and is what ollie will send as num_ctx.
func TestOllamaContextWindow(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(
		fakellm.Model{ID: "plain", ContextLength: 40960},
		fakellm.Model{ID: "small", ContextLength: 2048},
		fakellm.Model{ID: "pinned-big", ContextLength: 131072, NumCtx: 65536},
		fakellm.Model{ID: "pinned-small", ContextLength: 40960, NumCtx: 2048},
		fakellm.Model{ID: "loaded-big", ContextLength: 262144},
		fakellm.Model{ID: "loaded-small", ContextLength: 40960},
		fakellm.Model{ID: "untold"}, // no trained length in model_info
	)
	s.LoadModel("loaded-big", 131072) // OLLAMA_CONTEXT_LENGTH=131072, or a big GPU's default
	s.LoadModel("loaded-small", 4096)
	plain, _ := connect(t, s, backend.TypeOllama)
	configured, _ := connect(t, s, backend.TypeOllama, func(c *backend.Config) { c.Context = 8192 })
	for _, tc := range []struct {
		b     *backend.OpenAI
		model string
		want  int
	}{
		{plain, "plain", backend.OllamaContext},        // raised above Ollama's default
		{plain, "small", 2048},                         // capped at the trained length
		{plain, "pinned-big", 65536},                   // the Modelfile asks for more: kept
		{plain, "pinned-small", backend.OllamaContext}, // the Modelfile's is raised
		{plain, "loaded-big", 131072},                  // loaded with more: kept, no reload
		{plain, "loaded-small", backend.OllamaContext}, // loaded with the default: raised
		{plain, "untold", backend.OllamaContext},
		{plain, "unknown", backend.OllamaContext}, // /api/show fails: what would be sent
		{configured, "plain", 8192},               // the backend's "context" is the word
		{configured, "pinned-big", 8192},
		{configured, "loaded-big", 8192},
		{configured, "small", 2048},
		{configured, "unknown", 8192},
	} {
		if got := tc.b.ContextLength(context.Background(), tc.model); got != tc.want {
			t.Errorf("%s (context %d): %d, want %d", tc.model, tc.b.Config().Context, got, tc.want)
		}
	}
	n := len(s.Requests())
	plain.ContextLength(context.Background(), "plain")
	if len(s.Requests()) != n {
		t.Errorf("the window of a model is asked again: %q", paths(s)[n:])
	}
	if got := paths(s)[:2]; !slices.Equal(got, []string{"POST /api/show", "GET /api/ps"}) {
		t.Errorf("requests %q", got)
	}
}

// TestOllamaChatSetsNumCtx: a chat goes through the native /api/chat with
// the window as options.num_ctx, truncate and shift off; the scripted
// Ollama, whose own default is 4096, runs the model with it. Messages,
// tools and the reply map both ways.
func TestOllamaChatSetsNumCtx(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960})
	b, _ := connect(t, s, backend.TypeOllama, func(c *backend.Config) { c.Model = "qwen3:8b" })
	s.Push(fakellm.Response{
		Reasoning: []string{"let me ", "look"},
		Text:      []string{"Look", "ing."},
		ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"cmd": "ls /tmp"}`}, {Name: "file_read", Args: `{"path": "/etc/hosts"}`}},
	})
	msgs := []backend.Message{
		{Role: backend.RoleSystem, Content: "be brief"},
		{Role: backend.RoleUser, Content: "what is in /tmp?"},
		{Role: backend.RoleAssistant, ToolCalls: []backend.ToolCall{
			{ID: "call_1", Name: "shell", Args: json.RawMessage(`{"cmd":"ls"}`)},
			{ID: "call_2", Name: "shell", Args: json.RawMessage(`"{\"cmd\": \"ls"`), ArgsError: "not valid JSON"},
		}},
		{Role: backend.RoleTool, ToolCallID: "call_1", Name: "shell", Content: "a\nb\n"},
		{Role: backend.RoleTool, ToolCallID: "call_2", Name: "shell", Content: "error: bad arguments"},
	}
	temp := 0.2
	var text, reasoning string
	r, err := b.Chat(context.Background(), msgs, []backend.Tool{shell, read}, backend.Params{MaxTokens: 100, Temperature: &temp}, func(d backend.Delta) {
		text += d.Text
		reasoning += d.Reasoning
	})
	if err != nil {
		t.Fatal(err)
	}
	if text != "Looking." || reasoning != "let me look" || r.Message.Content != "Looking." || r.FinishReason != "tool_calls" {
		t.Fatalf("text %q reasoning %q reply %+v", text, reasoning, r)
	}
	if len(r.Message.ToolCalls) != 2 || r.Message.ToolCalls[0].Name != "shell" || string(r.Message.ToolCalls[0].Args) != `{"cmd":"ls /tmp"}` ||
		r.Message.ToolCalls[0].ID == "" || r.Message.ToolCalls[1].Name != "file_read" || r.Message.ToolCalls[0].ID == r.Message.ToolCalls[1].ID {
		t.Fatalf("calls %s", mustJSON(r.Message.ToolCalls))
	}
	if len(r.Warnings) != 0 || r.Usage.PromptTokens == 0 || r.Usage.CompletionTokens == 0 {
		t.Fatalf("warnings %q usage %+v", r.Warnings, r.Usage)
	}

	oc := s.OllamaChats()[0]
	req := oc.Request
	if req.Options["num_ctx"] != float64(backend.OllamaContext) || oc.NumCtx != backend.OllamaContext || oc.Truncated() {
		t.Fatalf("options %v: ran with %d, truncated %v", req.Options, oc.NumCtx, oc.Truncated())
	}
	if req.Truncate == nil || *req.Truncate || req.Shift == nil || *req.Shift || req.Stream == nil || !*req.Stream {
		t.Fatalf("truncate %v shift %v stream %v", req.Truncate, req.Shift, req.Stream)
	}
	if req.Options["num_predict"] != 100.0 || req.Options["temperature"] != 0.2 {
		t.Fatalf("options %v", req.Options)
	}
	if len(req.Messages) != 5 || req.Messages[0].Role != "system" || req.Messages[2].ToolCalls[0].Function.Arguments.String() != `{"cmd":"ls"}` ||
		req.Messages[2].ToolCalls[1].Function.Arguments.String() != `{}` || req.Messages[2].ToolCalls[1].Function.Index != 1 ||
		req.Messages[3].ToolName != "shell" || req.Messages[3].ToolCallID != "call_1" {
		t.Fatalf("messages %s", mustJSON(req.Messages))
	}
	if len(req.Tools) != 2 || req.Tools[0].Function.Name != "shell" || req.Tools[0].Function.Parameters.Required[0] != "cmd" {
		t.Fatalf("tools %s", mustJSON(req.Tools))
	}
	if p, ok := req.Tools[1].Function.Parameters.Properties.Get("path"); !ok || p.Type[0] != "string" {
		t.Fatalf("tool parameters %s", mustJSON(req.Tools[1]))
	}
	want := []string{"POST /api/show", "GET /api/ps", "POST /api/chat", "GET /api/ps"}
	if got := paths(s); !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	s.Push(fakellm.Text("again"))
	if _, _, err := chat(t, b, nil); err != nil {
		t.Fatal(err)
	}
	if got := paths(s)[4:]; !slices.Equal(got, []string{"POST /api/chat"}) {
		t.Fatalf("the second chat asked again: %q", got)
	}
	if s.Loads("qwen3:8b") != 1 {
		t.Fatalf("the model was loaded %d times, want once", s.Loads("qwen3:8b"))
	}
}

// TestOllamaRunsSmallerThanAsked: when /api/ps shows Ollama runs the
// model with less than ollie asked for (memory), that window is used
// from then on, with a warning.
func TestOllamaRunsSmallerThanAsked(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "m", ContextLength: 40960, LoadLimit: 16384})
	b, _ := connect(t, s, backend.TypeOllama, func(c *backend.Config) { c.Model = "m" })
	s.Push(fakellm.Text("one"), fakellm.Text("two"))
	r, _, err := chat(t, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "16384 tokens, not the 32768") {
		t.Fatalf("warnings %q", r.Warnings)
	}
	if got := b.ContextLength(context.Background(), "m"); got != 16384 {
		t.Fatalf("ContextLength %d, want 16384", got)
	}
	if r, _, _ = chat(t, b, nil); len(r.Warnings) != 0 {
		t.Fatalf("second reply's warnings %q", r.Warnings)
	}
	if oc := s.OllamaChats(); oc[1].Request.Options["num_ctx"] != 16384.0 || s.Loads("m") != 1 {
		t.Fatalf("second request's num_ctx %v, %d loads", oc[1].Request.Options["num_ctx"], s.Loads("m"))
	}
}

// TestOllamaOverflowRefusedNotCut: a prompt beyond the window is refused
// by Ollama (truncate: false), and Chat says so with
// ErrContextOverflow, on which the loop compacts; nothing is cut
// silently, nothing is retried.
func TestOllamaOverflowRefusedNotCut(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "m", ContextLength: 40960})
	b, sl := connect(t, s, backend.TypeOllama, func(c *backend.Config) { c.Model = "m"; c.Context = 1024 })
	s.Push(fakellm.Text("never"))
	long := []backend.Message{{Role: backend.RoleUser, Content: "old " + strings.Repeat("x", 5000)}, {Role: backend.RoleUser, Content: "new"}}
	_, err := b.Chat(context.Background(), long, nil, backend.Params{}, nil)
	var ae *backend.APIError
	if !errors.Is(err, backend.ErrContextOverflow) || !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("error %v", err)
	}
	oc := s.OllamaChats()
	if len(oc) != 1 || oc[0].Truncated() || !oc[0].Refused || len(sl.get()) != 0 {
		t.Fatalf("%d requests, truncated %v, waits %v", len(oc), oc[0].Truncated(), sl.get())
	}
}

// TestOllamaNearlyFullWindowWarns: a prompt of 90% of the window or more
// is worth a warning.
func TestOllamaNearlyFullWindowWarns(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "m", ContextLength: 8192})
	b, _ := connect(t, s, backend.TypeOllama, func(c *backend.Config) { c.Model = "m" })
	full := fakellm.Text("ok")
	full.Usage = &fakellm.Usage{PromptTokens: 8000, CompletionTokens: 2}
	s.Push(full)
	r, _, err := chat(t, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.PromptTokens != 8000 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "8000 tokens of the 8192-token") {
		t.Fatalf("usage %+v warnings %q", r.Usage, r.Warnings)
	}
}

// TestOllamaToolCallAsText: on the native path too, a call written as
// text is found, not run, and the warning says how to recover.
func TestOllamaToolCallAsText(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "fake-model", ContextLength: 40960})
	b, _ := connect(t, s, backend.TypeOllama)
	for _, resp := range []fakellm.Response{
		fakellm.ToolCallAsText("shell", `{"cmd": "ls"}`),
		fakellm.HermesToolCallAsText("shell", `{"cmd": "ls"}`),
		fakellm.ToolCall("shell", `["ls"]`), // not an object: Ollama leaves it as text
	} {
		s.Push(resp)
		r, _, err := chat(t, b, []backend.Tool{shell, read})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Message.ToolCalls) != 0 || r.TextToolCall == "" || len(r.Warnings) != 1 ||
			!strings.Contains(r.Warnings[0], "through the tools API, not as text") {
			t.Fatalf("content %q: calls %v, text call %q, warnings %q", r.Message.Content, r.Message.ToolCalls, r.TextToolCall, r.Warnings)
		}
	}
}

// TestOllamaErrors: the native API's failures are clear: a model Ollama
// does not have, a server that is not there, an error in the stream, a
// refused key; transient ones are retried.
func TestOllamaErrors(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "fake-model", ContextLength: 40960})
	b, sl := connect(t, s, backend.TypeOllama)

	_, err := b.Chat(context.Background(), hello, nil, backend.Params{Model: "nope"}, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || !strings.Contains(ae.Message, "model 'nope' not found") || !strings.Contains(ae.Message, "ollama pull nope") {
		t.Fatalf("unknown model: %v", err)
	}

	s.Push(fakellm.Response{Text: []string{"par"}, StreamError: "an error was encountered while running the model"})
	if _, _, err = chat(t, b, nil); !errors.As(err, &ae) || ae.Message != "an error was encountered while running the model" {
		t.Fatalf("error in the stream: %v", err)
	}

	busy := fakellm.OllamaError(503, "server busy, please try again.  maximum pending requests exceeded")
	busy.Header = http.Header{"Retry-After": {"3"}} // from a proxy in front of Ollama
	s.Push(busy, fakellm.Reset("I was say"), fakellm.Text("ok"))
	var deltas []backend.Delta
	r, err := b.Chat(context.Background(), hello, nil, backend.Params{}, func(d backend.Delta) { deltas = append(deltas, d) })
	if err != nil || r.Message.Content != "ok" || !slices.Equal(sl.get(), []time.Duration{3 * time.Second, 2 * time.Second}) {
		t.Fatalf("retries: reply %v err %v waits %v", r, err, sl.get())
	}
	if !slices.Equal(deltas, []backend.Delta{{Text: "I was say"}, {Restart: true}, {Text: "ok"}}) {
		t.Fatalf("deltas %+v", deltas)
	}

	s.RequireKey("sk-test") // a proxy in front of Ollama; connect's key passes
	s.Push(fakellm.Text("ok"))
	if _, _, err := chat(t, b, nil); err != nil {
		t.Fatalf("with the key: %v", err)
	}
	if h := s.Requests()[len(s.Requests())-1].Header.Get("Authorization"); h != "Bearer sk-test" {
		t.Fatalf("Authorization %q", h)
	}
	s.RequireKey("sk-other")
	if _, _, err := chat(t, b, nil); !errors.As(err, &ae) || ae.Status != 401 || !strings.Contains(ae.Message, "unauthorized") {
		t.Fatalf("refused key: %v", err)
	}
	s.RequireKey("")

	s.Close()
	start := len(sl.get())
	_, _, err = chat(t, b, nil)
	if !errors.As(err, &ae) || ae.Status != 0 || !strings.Contains(ae.Message, "does not answer") || !strings.Contains(ae.Message, s.URL) ||
		!strings.Contains(ae.Message, "connection refused") {
		t.Fatalf("no server: %v", err)
	}
	if got := sl.get()[start:]; !slices.Equal(got, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}) {
		t.Fatalf("no server: waits %v", got)
	}
	if _, err := b.Models(context.Background()); !errors.As(err, &ae) || !strings.Contains(ae.Message, "does not answer") {
		t.Fatalf("Models with no server: %v", err)
	}
}

// TestModelInfos: the models with the window each gets, from Ollama's
// own API or from /v1/models.
func TestModelInfos(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(
		fakellm.Model{ID: "qwen3:8b", ContextLength: 40960, Extra: map[string]any{"max_model_len": 40960}},
		fakellm.Model{ID: "tiny", ContextLength: 2048},
	)
	ollama, _ := connect(t, s, backend.TypeOllama)
	got, err := backend.ListModels(context.Background(), ollama)
	want := []backend.ModelInfo{
		{Name: "qwen3:8b", Context: 32768, Source: "num_ctx set by ollie"},
		{Name: "tiny", Context: 2048, Source: "num_ctx set by ollie, capped at the trained length"},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ollama: %+v %v", got, err)
	}
	openai, _ := connect(t, s, backend.TypeOpenAI)
	got, err = backend.ListModels(context.Background(), openai)
	want = []backend.ModelInfo{{Name: "qwen3:8b", Context: 40960, Source: "/v1/models"}, {Name: "tiny"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("openai: %+v %v", got, err)
	}
}
