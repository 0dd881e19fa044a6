package backend_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/internal/await"
)

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// sleeps records the waits a backend asked for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) get() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// connect returns a backend of type typ talking to s through openai-go,
// with the key "sk-test", the model "fake-model" and recorded sleeps.
func connect(t *testing.T, s *fakellm.Server, typ string, mod ...func(*backend.Config)) (*backend.OpenAI, *sleeps) {
	t.Helper()
	c := backend.Config{Name: "test", Type: typ, URL: s.URL + "/v1", Model: "fake-model"}
	if typ == backend.TypeOllama {
		c.URL = s.URL
	}
	for _, m := range mod {
		m(&c)
	}
	b, err := backend.NewOpenAI(c, "sk-test")
	if err != nil {
		t.Fatal(err)
	}
	sl := &sleeps{}
	b.Sleep = sl.sleep
	b.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	return b, sl
}

var (
	hello = []backend.Message{{Role: backend.RoleUser, Content: "hello"}}
	shell = backend.Tool{Name: "shell", Description: "run a command", Parameters: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}`)}
	read  = backend.Tool{Name: "file_read", Description: "read a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}
)

func chat(t *testing.T, b *backend.OpenAI, tools []backend.Tool) (*backend.Reply, []backend.Delta, error) {
	t.Helper()
	var deltas []backend.Delta
	r, err := b.Chat(context.Background(), hello, tools, backend.Params{}, func(d backend.Delta) { deltas = append(deltas, d) })
	return r, deltas, err
}

func TestTextStreaming(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Response{Reasoning: []string{"let me ", "think"}, Text: []string{"Hel", "lo", ", world"}})

	var got []string
	var reasoning string
	returned := false
	temp := 0.2
	r, err := b.Chat(context.Background(), hello, []backend.Tool{shell}, backend.Params{MaxTokens: 100, Temperature: &temp}, func(d backend.Delta) {
		if returned {
			t.Error("a delta arrived after Chat returned")
		}
		if d.Text != "" {
			got = append(got, d.Text)
		}
		reasoning += d.Reasoning
	})
	returned = true
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"Hel", "lo", ", world"}) || reasoning != "let me think" {
		t.Fatalf("deltas %q, reasoning %q", got, reasoning)
	}
	if r.Message.Role != backend.RoleAssistant || r.Message.Content != "Hello, world" || r.FinishReason != "stop" {
		t.Fatalf("reply %+v", r)
	}
	if r.Usage.PromptTokens == 0 || r.Usage.CompletionTokens == 0 || len(r.Warnings) != 0 {
		t.Fatalf("usage %+v warnings %q", r.Usage, r.Warnings)
	}

	req := s.ChatRequests()[0]
	if req.Model != "fake-model" || !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage {
		t.Fatalf("request %+v", req)
	}
	if req.MaxTokens == nil || *req.MaxTokens != 100 || req.Temperature == nil || *req.Temperature != 0.2 {
		t.Fatalf("max_tokens %v temperature %v", req.MaxTokens, req.Temperature)
	}
	if len(req.Tools) != 1 || req.Tools[0].Type != "function" || req.Tools[0].Function.Name != "shell" ||
		req.Tools[0].Function.Description != "run a command" {
		t.Fatalf("tools %+v", req.Tools)
	}
	var params map[string]any
	json.Unmarshal(req.Tools[0].Function.Parameters, &params)
	if params["required"].([]any)[0] != "cmd" {
		t.Fatalf("parameters %s", req.Tools[0].Function.Parameters)
	}
}

func TestMessagesMapBothWays(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Text("done"))
	msgs := []backend.Message{
		{Role: backend.RoleSystem, Content: "be brief"},
		{Role: backend.RoleUser, Content: "list /tmp"},
		{Role: backend.RoleAssistant, ToolCalls: []backend.ToolCall{
			{ID: "call_1", Name: "shell", Args: json.RawMessage(`{"cmd":"ls /tmp"}`)},
			{ID: "call_2", Name: "shell", Args: json.RawMessage(`"{\"cmd\": \"ls"`), ArgsError: "not valid JSON"},
		}},
		{Role: backend.RoleTool, ToolCallID: "call_1", Name: "shell", Content: "a\nb\n"},
		{Role: backend.RoleTool, ToolCallID: "call_2", Name: "shell", Content: "error: bad arguments"},
		{Role: backend.RoleAssistant, Content: ""},
	}
	if _, err := b.Chat(context.Background(), msgs, nil, backend.Params{Model: "other"}, nil); err != nil {
		t.Fatal(err)
	}
	req := s.ChatRequests()[0]
	if req.Model != "other" || len(req.Messages) != len(msgs) {
		t.Fatalf("model %q, %d messages", req.Model, len(req.Messages))
	}
	for i, m := range req.Messages {
		if m.Role != msgs[i].Role || m.Text() != msgs[i].Content || m.ToolCallID != msgs[i].ToolCallID {
			t.Errorf("message %d: %+v (content %q)", i, m, m.Text())
		}
	}
	a := req.Messages[2]
	if a.Content != nil || len(a.ToolCalls) != 2 || a.ToolCalls[0].ID != "call_1" || a.ToolCalls[0].Type != "function" ||
		a.ToolCalls[0].Function.Name != "shell" || a.ToolCalls[0].Function.Arguments != `{"cmd":"ls /tmp"}` {
		t.Fatalf("assistant tool calls: content %s, %+v", a.Content, a.ToolCalls)
	}
	if a.ToolCalls[1].Function.Arguments != "{}" {
		t.Fatalf("unusable arguments sent back as %q, want {}", a.ToolCalls[1].Function.Arguments)
	}
	if string(req.Messages[5].Content) != `""` {
		t.Fatalf("an empty assistant message is sent as %s, want \"\"", req.Messages[5].Content)
	}
	if len(req.Tools) != 0 {
		t.Fatalf("tools sent though none were offered: %+v", req.Tools)
	}

	_, err := b.Chat(context.Background(), []backend.Message{{Role: "robot"}}, nil, backend.Params{}, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, `unknown role "robot"`) || s.Served() != 1 {
		t.Fatalf("unknown role: %v", err)
	}
}

func TestOneToolCall(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.ToolCalls(fakellm.Call{ID: "call_abc", Name: "shell", Args: `{"cmd": "uname -a"}`}))
	r, deltas, err := chat(t, b, []backend.Tool{shell})
	if err != nil {
		t.Fatal(err)
	}
	tc := r.Message.ToolCalls
	if len(tc) != 1 || tc[0].ID != "call_abc" || tc[0].Name != "shell" || string(tc[0].Args) != `{"cmd": "uname -a"}` || tc[0].ArgsError != "" {
		t.Fatalf("tool calls %+v", tc)
	}
	if r.FinishReason != "tool_calls" || r.Message.Content != "" || len(deltas) != 0 || len(r.Warnings) != 0 {
		t.Fatalf("reply %+v, deltas %v", r, deltas)
	}
}

func TestParallelToolCalls(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Response{Text: []string{"Reading both."}, ToolCalls: []fakellm.Call{
		{Name: "file_read", Args: `{"path": "/etc/hosts"}`},
		{Name: "file_read", Args: `{"path": "/etc/hostname"}`},
		{Name: "shell", Args: `{"cmd": "echo é ü 中文"}`},
	}})
	r, _, err := chat(t, b, []backend.Tool{shell, read})
	if err != nil {
		t.Fatal(err)
	}
	tc := r.Message.ToolCalls
	want := []string{`{"path": "/etc/hosts"}`, `{"path": "/etc/hostname"}`, `{"cmd": "echo é ü 中文"}`}
	if len(tc) != 3 || r.Message.Content != "Reading both." {
		t.Fatalf("reply %+v", r)
	}
	ids := map[string]bool{}
	for i, c := range tc {
		if string(c.Args) != want[i] || c.ID == "" || ids[c.ID] {
			t.Errorf("call %d: %+v", i, c)
		}
		ids[c.ID] = true
	}
	if tc[2].Name != "shell" {
		t.Fatalf("third call %+v", tc[2])
	}
}

func TestMalformedToolArguments(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(
		fakellm.ToolCall("shell", `{"cmd": "ls /tm`),
		fakellm.ToolCall("shell", `"{\"cmd\": \"ls\"}"`), // encoded twice: recovered
		fakellm.ToolCall("shell", `[1, 2]`),
		fakellm.ToolCall("shell", ``), // no arguments: the empty object
	)
	r, _, err := chat(t, b, []backend.Tool{shell})
	if err != nil {
		t.Fatalf("malformed arguments are a reply, not an error: %v", err)
	}
	tc := r.Message.ToolCalls[0]
	if !json.Valid(tc.Args) || !strings.Contains(tc.ArgsError, "not valid JSON") {
		t.Fatalf("call %+v", tc)
	}
	var raw string
	if json.Unmarshal(tc.Args, &raw); raw != `{"cmd": "ls /tm` {
		t.Fatalf("the model's text is not kept: %s", tc.Args)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "fake-model") || !strings.Contains(r.Warnings[0], `{"cmd": "ls /tm`) {
		t.Fatalf("warnings %q", r.Warnings)
	}
	if _, err := json.Marshal(r.Message); err != nil {
		t.Fatalf("the reply cannot be stored: %v", err)
	}

	r, _, _ = chat(t, b, []backend.Tool{shell})
	if tc := r.Message.ToolCalls[0]; string(tc.Args) != `{"cmd": "ls"}` || tc.ArgsError != "" || len(r.Warnings) != 0 {
		t.Fatalf("double-encoded arguments: %+v %q", tc, r.Warnings)
	}
	r, _, _ = chat(t, b, []backend.Tool{shell})
	if tc := r.Message.ToolCalls[0]; string(tc.Args) != `[1, 2]` || !strings.Contains(tc.ArgsError, "array") {
		t.Fatalf("array arguments: %+v", tc)
	}
	r, _, _ = chat(t, b, []backend.Tool{shell})
	if tc := r.Message.ToolCalls[0]; string(tc.Args) != `{}` || tc.ArgsError != "" {
		t.Fatalf("empty arguments: %+v", tc)
	}
}

func TestToolCallWrittenAsText(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	for _, resp := range []fakellm.Response{
		fakellm.ToolCallAsText("shell", `{"cmd": "ls"}`),
		fakellm.HermesToolCallAsText("shell", `{"cmd": "ls"}`),
		fakellm.Text("Sure, I will run it:\n```json\n{\"name\": \"file_read\", \"parameters\": {\"path\": \"/x\"}}\n```"),
	} {
		s.Push(resp)
		r, _, err := chat(t, b, []backend.Tool{shell, read})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Message.ToolCalls) != 0 || len(r.Warnings) != 1 ||
			!strings.Contains(r.Warnings[0], "fake-model") || !strings.Contains(r.Warnings[0], "plain text") {
			t.Fatalf("content %q: calls %v, warnings %q", r.Message.Content, r.Message.ToolCalls, r.Warnings)
		}
	}
	// Without tools offered, or naming no offered tool, JSON is just text.
	s.Push(fakellm.ToolCallAsText("shell", `{"cmd": "ls"}`), fakellm.Text(`{"name": "Ada", "arguments": []}`))
	if r, _, _ := chat(t, b, nil); len(r.Warnings) != 0 {
		t.Fatalf("warned without tools: %q", r.Warnings)
	}
	if r, _, _ := chat(t, b, []backend.Tool{shell}); len(r.Warnings) != 0 {
		t.Fatalf("warned about a JSON answer: %q", r.Warnings)
	}
}

func TestRateLimitHonoursRetryAfter(t *testing.T) {
	s := fakellm.Start(t)
	b, sl := connect(t, s, backend.TypeOpenAI)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	b.Now = func() time.Time { return now }
	date := fakellm.RateLimited(now.Add(30 * time.Second).Format(http.TimeFormat))
	s.Push(fakellm.RateLimited("7"), date, fakellm.RateLimited(""), fakellm.Text("ok"))
	r, _, err := chat(t, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Message.Content != "ok" || s.Served() != 4 {
		t.Fatalf("reply %q after %d requests", r.Message.Content, s.Served())
	}
	// Seconds, an HTTP date, then none: the backoff for the third retry.
	if got, want := sl.get(), []time.Duration{7 * time.Second, 30 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

func TestRetryAfterTooLongIsNotWaited(t *testing.T) {
	s := fakellm.Start(t)
	b, sl := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.RateLimited("3600"), fakellm.Text("never"))
	_, _, err := chat(t, b, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || ae.Status != 429 || !strings.Contains(ae.Message, "Rate limit reached") || !strings.Contains(ae.Message, "1h0m0s") {
		t.Fatalf("error %v", err)
	}
	if s.Served() != 1 || len(sl.get()) != 0 {
		t.Fatalf("%d requests, waits %v", s.Served(), sl.get())
	}
}

func TestServerErrorsRetriedThreeTimes(t *testing.T) {
	for _, status := range []int{500, 502, 503} {
		s := fakellm.Start(t)
		b, sl := connect(t, s, backend.TypeOpenAI)
		s.Push(fakellm.Error(status, "busy 1"), fakellm.Error(status, "busy 2"), fakellm.Error(status, "busy 3"), fakellm.Text("ok"))
		r, _, err := chat(t, b, nil)
		if err != nil || r.Message.Content != "ok" {
			t.Fatalf("%d: %v", status, err)
		}
		if s.Served() != 4 {
			t.Fatalf("%d: %d requests, want 4", status, s.Served())
		}
		if got, want := sl.get(), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("%d: waits %v, want %v", status, got, want)
		}
	}
}

func TestServerErrorsGiveUpAfterFourRequests(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Error(500, "a"), fakellm.Error(500, "b"), fakellm.Error(503, "c"),
		fakellm.Error(500, "The server had an error while processing your request."), fakellm.Text("too late"))
	_, _, err := chat(t, b, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || ae.Status != 500 || ae.Backend != "test" || ae.Message != "The server had an error while processing your request." {
		t.Fatalf("error %#v", err)
	}
	if s.Served() != 4 || s.Pending() != 1 {
		t.Fatalf("%d requests, want exactly 4", s.Served())
	}
	if errors.Is(err, backend.ErrContextOverflow) {
		t.Fatal("a 500 is not an overflow")
	}
}

func TestOtherErrorsNotRetried(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Error(400, "Invalid value for 'temperature'"), fakellm.Error(501, "no"), fakellm.Response{Status: 404, Body: `{"error":"model 'nope' not found"}`})
	for _, want := range []struct {
		status int
		msg    string
	}{{400, "Invalid value for 'temperature'"}, {501, "no"}, {404, "model 'nope' not found"}} {
		_, _, err := chat(t, b, nil)
		var ae *backend.APIError
		if !errors.As(err, &ae) || ae.Status != want.status || ae.Message != want.msg {
			t.Fatalf("error %#v, want %d %q", err, want.status, want.msg)
		}
	}
	if s.Served() != 3 {
		t.Fatalf("%d requests, want 3", s.Served())
	}
}

func TestResetMidStreamRetried(t *testing.T) {
	s := fakellm.Start(t)
	b, sl := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Reset("I was say"), fakellm.Text("I was saying: ", "hi"))
	r, deltas, err := chat(t, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Message.Content != "I was saying: hi" || s.Served() != 2 || len(sl.get()) != 1 {
		t.Fatalf("reply %q after %d requests", r.Message.Content, s.Served())
	}
	want := []backend.Delta{{Text: "I was say"}, {Restart: true}, {Text: "I was saying: "}, {Text: "hi"}}
	if !slices.Equal(deltas, want) {
		t.Fatalf("deltas %+v, want %+v", deltas, want)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "broke off") {
		t.Fatalf("warnings %q", r.Warnings)
	}
}

func TestResetBeforeAnswerAndStreamErrorRetried(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Reset(), fakellm.Response{Text: []string{"x"}, StreamError: "upstream provider returned 502"}, fakellm.Text("ok"))
	r, _, err := chat(t, b, nil)
	if err != nil || r.Message.Content != "ok" || s.Served() != 3 {
		t.Fatalf("reply %v err %v after %d requests", r, err, s.Served())
	}
}

func TestContextOverflowNotRetried(t *testing.T) {
	for _, f := range []fakellm.Flavor{fakellm.OpenAI, fakellm.VLLM, fakellm.LlamaCpp, fakellm.Ollama, fakellm.OpenRouter} {
		t.Run(string(f), func(t *testing.T) {
			s := fakellm.Start(t)
			b, sl := connect(t, s, backend.TypeOpenAI)
			s.Push(fakellm.ContextOverflow(f), fakellm.Text("never"))
			_, _, err := chat(t, b, nil)
			if !errors.Is(err, backend.ErrContextOverflow) {
				t.Fatalf("error %v does not wrap ErrContextOverflow", err)
			}
			var ae *backend.APIError
			if !errors.As(err, &ae) || ae.Status == 0 || ae.Message == "" {
				t.Fatalf("error %#v", err)
			}
			if s.Served() != 1 || len(sl.get()) != 0 {
				t.Fatalf("%d requests, waits %v", s.Served(), sl.get())
			}
		})
	}
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Response{StreamError: "This model's maximum context length is 4096 tokens."})
	if _, _, err := chat(t, b, nil); !errors.Is(err, backend.ErrContextOverflow) {
		t.Fatalf("overflow as a stream error: %v", err)
	}
}

func TestAuthorization(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.RequireKey("sk-test")
	s.Push(fakellm.Text("ok"))
	if _, _, err := chat(t, b, nil); err != nil {
		t.Fatal(err)
	}
	if h := s.Requests()[0].Header.Get("Authorization"); h != "Bearer sk-test" {
		t.Fatalf("Authorization %q", h)
	}

	s.RequireKey("sk-other")
	_, _, err := chat(t, b, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || ae.Status != 401 || ae.Message != "Incorrect API key provided." {
		t.Fatalf("error %v", err)
	}

	nokey, err := backend.NewOpenAI(backend.Config{Name: "local", Type: backend.TypeOpenAI, URL: s.URL + "/v1", Model: "m"}, "")
	if err != nil {
		t.Fatal(err)
	}
	s.RequireKey("")
	s.Push(fakellm.Text("ok"))
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-leak")
	if _, err := nokey.Chat(context.Background(), hello, nil, backend.Params{}, nil); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	h := reqs[len(reqs)-1].Header
	if h.Get("Authorization") != "" || h.Get("OpenAI-Organization") != "" {
		t.Fatalf("a backend without a key sent %q, %q from the environment", h.Get("Authorization"), h.Get("OpenAI-Organization"))
	}
}

func TestNoModel(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI, func(c *backend.Config) { c.Model = "" })
	_, _, err := chat(t, b, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "no model") || s.Served() != 0 {
		t.Fatalf("error %v", err)
	}
}

func TestCancelStopsStream(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	s.Push(fakellm.Hang("thinking"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.Chat(ctx, hello, nil, backend.Params{}, func(d backend.Delta) {
			if d.Text == "thinking" {
				cancel()
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		var ae *backend.APIError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &ae) {
			t.Fatalf("error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Chat still running 10s after its context was cancelled")
	}
	await.Until(t, 10*time.Second, "the server seeing the client go", func() bool { return s.Abandoned() == 1 })
	if s.Served() != 1 {
		t.Fatalf("%d requests, want 1", s.Served())
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	b.Sleep = nil // the real timer, which must end with ctx
	s.Push(fakellm.RateLimited("50"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Chat(ctx, hello, nil, backend.Params{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	// The bound is the point, and generous: a backoff that outlived the
	// context would end after Retry-After's 50 s (and then fail with the
	// same context error), so only the clock tells.
	if time.Since(start) > 10*time.Second {
		t.Fatal("the backoff outlived the context")
	}
}

func TestModels(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "qwen3:8b"}, fakellm.Model{ID: "llama3.2:3b"})
	for _, typ := range []string{backend.TypeOpenAI, backend.TypeOllama} {
		b, _ := connect(t, s, typ)
		got, err := b.Models(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"qwen3:8b", "llama3.2:3b"}) {
			t.Fatalf("%s: models %q", typ, got)
		}
	}
	var paths []string
	for _, r := range s.Requests() {
		paths = append(paths, r.Method+" "+r.Path)
	}
	if !slices.Equal(paths, []string{"GET /v1/models", "GET /api/tags"}) {
		t.Fatalf("requests %q", paths)
	}

	s.RequireKey("sk-other")
	b, _ := connect(t, s, backend.TypeOpenAI)
	_, err := b.Models(context.Background())
	var ae *backend.APIError
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("error %v", err)
	}
	s.Close()
	b, _ = connect(t, s, backend.TypeOllama)
	if _, err := b.Models(context.Background()); !errors.As(err, &ae) || ae.Status != 0 || !strings.Contains(ae.Message, "127.0.0.1") {
		t.Fatalf("error with no server: %v", err)
	}
}

func TestContextLengthOpenAI(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(
		fakellm.Model{ID: "vllm-model", Extra: map[string]any{"max_model_len": 32768}},
		fakellm.Model{ID: "router-model", Extra: map[string]any{"context_length": 200000}},
		fakellm.Model{ID: "llamacpp-model", Extra: map[string]any{"meta": map[string]any{"n_ctx_train": 131072}}},
		fakellm.Model{ID: "plain"},
	)
	b, _ := connect(t, s, backend.TypeOpenAI)
	for model, want := range map[string]int{"vllm-model": 32768, "router-model": 200000, "llamacpp-model": 131072, "plain": 0, "absent": 0} {
		if got := b.ContextLength(context.Background(), model); got != want {
			t.Errorf("%s: %d, want %d", model, got, want)
		}
	}
	n := len(s.Requests())
	b.ContextLength(context.Background(), "vllm-model")
	if len(s.Requests()) != n {
		t.Error("the context length is asked again")
	}
	configured, _ := connect(t, s, backend.TypeOpenAI, func(c *backend.Config) { c.Context = 8192 })
	if got := configured.ContextLength(context.Background(), "vllm-model"); got != 8192 {
		t.Errorf("configured: %d", got)
	}
}

// chunk is one streamed chunk with the given choice delta and finish.
func chunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-q","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

func TestServerQuirks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		want   []backend.ToolCall
	}{
		{
			name: "Ollama: each call whole, in one chunk",
			events: []string{
				chunk(`{"role":"assistant","content":"","tool_calls":[{"id":"call_a","index":0,"type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"ls\"}"}}]}`, ""),
				chunk(`{"role":"assistant","content":"","tool_calls":[{"id":"call_b","index":1,"type":"function","function":{"name":"file_read","arguments":"{\"path\":\"/x\"}"}}]}`, ""),
				chunk(`{"role":"assistant","content":""}`, "tool_calls"), "[DONE]",
			},
			want: []backend.ToolCall{{ID: "call_a", Name: "shell", Args: []byte(`{"cmd":"ls"}`)}, {ID: "call_b", Name: "file_read", Args: []byte(`{"path":"/x"}`)}},
		},
		{
			name: "no index, a new id starts a new call",
			events: []string{
				chunk(`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{\"cmd\":"}}]}`, ""),
				chunk(`{"tool_calls":[{"function":{"arguments":"\"a\"}"}}]}`, ""),
				chunk(`{"tool_calls":[{"id":"c2","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"b\"}"}}]}`, ""),
				chunk(`{}`, "tool_calls"), "[DONE]",
			},
			want: []backend.ToolCall{{ID: "c1", Name: "shell", Args: []byte(`{"cmd":"a"}`)}, {ID: "c2", Name: "shell", Args: []byte(`{"cmd":"b"}`)}},
		},
		{
			name: "the name repeated in every fragment, finish stop with tool calls",
			events: []string{
				chunk(`{"tool_calls":[{"index":0,"id":"c1","function":{"name":"shell","arguments":"{\"cmd\""}}]}`, ""),
				chunk(`{"tool_calls":[{"index":0,"function":{"name":"shell","arguments":":\"ls\"}"}}]}`, "stop"), "[DONE]",
			},
			want: []backend.ToolCall{{ID: "c1", Name: "shell", Args: []byte(`{"cmd":"ls"}`)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fakellm.Start(t)
			b, _ := connect(t, s, backend.TypeOpenAI)
			s.Push(fakellm.Response{Events: tc.events})
			r, _, err := chat(t, b, []backend.Tool{shell, read})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Message.ToolCalls, tc.want) {
				t.Fatalf("calls %s", mustJSON(r.Message.ToolCalls))
			}
		})
	}
}

func TestBrokenStreams(t *testing.T) {
	s := fakellm.Start(t)
	b, _ := connect(t, s, backend.TypeOpenAI)
	// No finish reason before the stream ends: retried, then reported.
	cut := fakellm.Response{Events: []string{chunk(`{"content":"Hel"}`, "")}}
	s.Push(cut, cut, cut, cut)
	_, _, err := chat(t, b, nil)
	var ae *backend.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "ended before the reply was complete") || s.Served() != 4 {
		t.Fatalf("error %v after %d requests", err, s.Served())
	}
	// A chunk that is not JSON: reported, not retried.
	s.Push(fakellm.Response{Events: []string{"<html>oops</html>"}})
	_, _, err = chat(t, b, nil)
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "not a chat completion chunk") || s.Served() != 5 {
		t.Fatalf("error %v after %d requests", err, s.Served())
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
