package fakellm_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"ollie/agent/fakellm"
)

// ollamaClient is Ollama's own client for s.
func ollamaClient(t *testing.T, s *fakellm.Server) *api.Client {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewClient(u, http.DefaultClient)
}

// chatAll sends req and gathers the streamed reply.
func chatAll(t *testing.T, c *api.Client, req *api.ChatRequest) ([]api.ChatResponse, error) {
	t.Helper()
	var out []api.ChatResponse
	err := c.Chat(context.Background(), req, func(r api.ChatResponse) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// long is a conversation of n exchanges of two messages of about 230
// bytes (58 tokens) each, between a system message and a last question.
func long(n int) []api.Message {
	msgs := []api.Message{{Role: "system", Content: "You are terse."}}
	for i := range n {
		msgs = append(msgs,
			api.Message{Role: "user", Content: "question " + string(rune('a'+i)) + " " + strings.Repeat("q", 200)},
			api.Message{Role: "assistant", Content: "answer " + strings.Repeat("a", 200)})
	}
	return append(msgs, api.Message{Role: "user", Content: "and now?"})
}

// TestOllamaTruncatesSilently: a prompt beyond num_ctx is cut as Ollama
// cuts it, without an error: the oldest messages that are not system
// messages go, the last stays, and the server records what it dropped.
// With "truncate": false it is refused; with a large enough num_ctx,
// nothing is cut.
func TestOllamaTruncatesSilently(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960})
	s.SetDefaultContext(512) // OLLAMA_CONTEXT_LENGTH=512
	c := ollamaClient(t, s)
	s.Push(fakellm.Text("fine"))

	msgs := long(10) // about 1,180 tokens
	out, err := chatAll(t, c, &api.ChatRequest{Model: "qwen3:8b", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	last := out[len(out)-1]
	if !last.Done || last.DoneReason != "stop" || last.PromptEvalCount > 512 || last.PromptEvalCount == 0 {
		t.Fatalf("last line %+v", last)
	}
	oc := s.OllamaChats()[0]
	if oc.NumCtx != 512 || !oc.Truncated() || oc.PromptTokens > 512 || oc.PromptTokens != last.PromptEvalCount {
		t.Fatalf("ran with %d, %d tokens, dropped %d", oc.NumCtx, oc.PromptTokens, len(oc.Dropped))
	}
	if len(oc.Dropped) == 0 || oc.Dropped[0].Content != msgs[1].Content || len(oc.Dropped) >= len(msgs)-2 || oc.CutTokens != 0 {
		t.Fatalf("dropped %d messages, cut %d tokens", len(oc.Dropped), oc.CutTokens)
	}
	for _, m := range oc.Dropped {
		if m.Role == "system" {
			t.Fatal("a system message was dropped")
		}
	}

	// The responder sees the conversation as the model did: what was
	// dropped is gone, the system message and the last one are there.
	var seen *fakellm.ChatRequest
	s.Respond(func(r *fakellm.ChatRequest) fakellm.Response { seen = r; return fakellm.Text("ok") })
	if _, err := chatAll(t, c, &api.ChatRequest{Model: "qwen3:8b", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	s.Respond(nil)
	if n := len(seen.Messages); seen.Messages[0].Text() != "You are terse." || seen.Messages[n-1].Text() != "and now?" || n != len(msgs)-len(oc.Dropped) {
		t.Fatalf("the responder saw %d messages", n)
	}

	no := false
	_, err = chatAll(t, c, &api.ChatRequest{Model: "qwen3:8b", Messages: msgs, Truncate: &no})
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != 400 || se.ErrorMessage != "the input length exceeds the context length" {
		t.Fatalf("truncate false: %v", err)
	}

	s.Push(fakellm.Text("fine"))
	if _, err := chatAll(t, c, &api.ChatRequest{Model: "qwen3:8b", Messages: msgs, Options: map[string]any{"num_ctx": 4096}}); err != nil {
		t.Fatal(err)
	}
	oc = s.OllamaChats()[3]
	if oc.NumCtx != 4096 || oc.Truncated() {
		t.Fatalf("num_ctx 4096: ran with %d, dropped %d", oc.NumCtx, len(oc.Dropped))
	}
	if s.Loads("qwen3:8b") != 2 {
		t.Fatalf("loads %d: want 2 (512, then 4096)", s.Loads("qwen3:8b"))
	}
}

// TestOllamaNativeAPI: tags, show, ps and a chat, read with Ollama's own
// client and types.
func TestOllamaNativeAPI(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960, NumCtx: 8192}, fakellm.Model{ID: "llama3.2:latest", ContextLength: 131072, LoadLimit: 16384})
	c := ollamaClient(t, s)
	ctx := context.Background()

	list, err := c.List(ctx)
	if err != nil || len(list.Models) != 2 || list.Models[1].Name != "llama3.2:latest" {
		t.Fatalf("tags %+v %v", list, err)
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: "qwen3:8b"})
	if err != nil || show.ModelInfo["fake.context_length"] != 40960.0 || !strings.Contains(show.Parameters, "num_ctx                        8192") ||
		len(show.Capabilities) != 2 || show.Capabilities[1] != "tools" {
		t.Fatalf("show %+v %v", show, err)
	}
	var se api.StatusError
	if _, err := c.Show(ctx, &api.ShowRequest{Model: "nope"}); !errors.As(err, &se) || se.StatusCode != 404 || se.ErrorMessage != "model 'nope' not found" {
		t.Fatalf("show nope: %v", err)
	}
	if ps, err := c.ListRunning(ctx); err != nil || len(ps.Models) != 0 {
		t.Fatalf("ps before any chat: %+v %v", ps, err)
	}

	s.Push(fakellm.Response{Reasoning: []string{"hm"}, Text: []string{"a", "b"}, ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"cmd": "ls", "n": 2}`}}})
	out, err := chatAll(t, c, &api.ChatRequest{Model: "qwen3:8b", Messages: []api.Message{{Role: "user", Content: "hi"}}})
	if err != nil || len(out) != 5 {
		t.Fatalf("%d lines, %v", len(out), err)
	}
	if out[0].Message.Thinking != "hm" || out[1].Message.Content != "a" || out[2].Message.Content != "b" || out[0].Done {
		t.Fatalf("lines %+v", out[:3])
	}
	tc := out[3].Message.ToolCalls
	if len(tc) != 1 || tc[0].ID == "" || tc[0].Function.Name != "shell" || tc[0].Function.Arguments.String() != `{"cmd":"ls","n":2}` {
		t.Fatalf("tool call %+v", tc)
	}
	if !out[4].Done || out[4].DoneReason != "stop" || out[4].EvalCount == 0 {
		t.Fatalf("last line %+v", out[4])
	}

	// "llama3.2" is "llama3.2:latest"; its memory caps its window.
	s.Push(fakellm.Text("x"))
	if _, err := chatAll(t, c, &api.ChatRequest{Model: "llama3.2", Messages: []api.Message{{Role: "user", Content: "hi"}}, Options: map[string]any{"num_ctx": 32768}}); err != nil {
		t.Fatal(err)
	}
	ps, err := c.ListRunning(ctx)
	if err != nil || len(ps.Models) != 2 || ps.Models[0].ContextLength != 8192 || ps.Models[1].ContextLength != 16384 {
		t.Fatalf("ps %+v %v", ps, err)
	}

	// Without streaming, one object.
	s.Push(fakellm.Text("whole", " reply"))
	f := false
	out, err = chatAll(t, c, &api.ChatRequest{Model: "qwen3:8b", Stream: &f, Messages: []api.Message{{Role: "user", Content: "hi"}}})
	if err != nil || len(out) != 1 || out[0].Message.Content != "whole reply" || !out[0].Done {
		t.Fatalf("stream false: %+v %v", out, err)
	}
	if _, err := chatAll(t, c, &api.ChatRequest{Model: "nope", Messages: []api.Message{{Role: "user", Content: "hi"}}}); !errors.As(err, &se) || se.StatusCode != 404 {
		t.Fatalf("chat with nope: %v", err)
	}
}

// TestOllamaImmediate: immediate mode answers the native API too.
func TestOllamaImmediate(t *testing.T) {
	s := fakellm.Start(t)
	s.SetImmediate("ok")
	res, err := http.Post(s.URL+"/api/chat", "application/json", strings.NewReader(`{"model":"fake-model","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 2 || !strings.Contains(lines[0], `"content":"ok"`) || !strings.Contains(lines[1], `"done":true`) || s.Served() != 1 {
		t.Fatalf("lines %q", lines)
	}
}
