package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/toolsrv/tool"
)

// ollamaBackend is an Ollama backend on s, whose chats go through the
// official client to the scripted Ollama.
func ollamaBackend(t *testing.T, s *fakellm.Server, mod func(*backend.Config)) backend.Backend {
	t.Helper()
	c := backend.Config{Name: "ollama", Type: backend.TypeOllama, URL: s.URL, Model: "qwen3:8b"}
	if mod != nil {
		mod(&c)
	}
	be, err := backend.NewOpenAI(c, "")
	if err != nil {
		t.Fatal(err)
	}
	be.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	return be
}

// TestOllamaLongConversationNotTruncated: a conversation that grows far
// past the window, on a server whose own default (512 tokens) would cut
// it from the third turn. ollie sets num_ctx (the backend's context,
// 2048) on every request and compacts when a prompt passes half of it,
// so the scripted Ollama, which truncates silently as the real one does,
// never cuts nor refuses anything; stats show the window and its fill.
func TestOllamaLongConversationNotTruncated(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960})
	s.SetDefaultContext(512)
	turn := 0
	s.Respond(func(r *fakellm.ChatRequest) fakellm.Response {
		turn++
		return fakellm.Text(fmt.Sprintf("answer %d: ", turn), strings.Repeat("words ", 64)) // about 100 tokens
	})
	a := New(Config{ID: "a", Backend: ollamaBackend(t, s, func(c *backend.Config) { c.Context = 2048 }), System: "You are terse."})
	defer a.Close()

	var chat string
	for i := range 14 {
		chat += runPrompt(t, a, fmt.Sprintf("question %d: %s", i, strings.Repeat("more ", 76))) // about 100 tokens
	}
	if !strings.Contains(chat, "[compacted: the last request used") {
		t.Fatalf("never compacted:\n%s", chat)
	}
	if strings.Contains(chat, "no longer fits") || strings.Contains(chat, "model error") {
		t.Fatalf("a request did not fit:\n%s", chat)
	}
	ocs := s.OllamaChats()
	if len(ocs) != 14 {
		t.Fatalf("%d requests, want 14", len(ocs))
	}
	biggest := 0
	for i, oc := range ocs {
		if oc.Request.Options["num_ctx"] != 2048.0 || oc.NumCtx != 2048 {
			t.Errorf("request %d: num_ctx %v, ran with %d", i, oc.Request.Options["num_ctx"], oc.NumCtx)
		}
		if oc.Truncated() || oc.Refused {
			t.Errorf("request %d: %d messages dropped silently, %d tokens cut, refused %v", i, len(oc.Dropped), oc.CutTokens, oc.Refused)
		}
		biggest = max(biggest, oc.PromptTokens)
		t.Logf("request %d: %d tokens, %d messages", i, oc.PromptTokens, len(oc.Request.Messages))
	}
	// Without compaction the last prompt would be about 2,800 tokens.
	if biggest > 2048 || biggest < 1024 {
		t.Errorf("the largest prompt took %d tokens of 2048", biggest)
	}
	if s.Loads("qwen3:8b") != 1 {
		t.Errorf("the model was loaded %d times", s.Loads("qwen3:8b"))
	}
	st := a.Stats()
	if st.ContextWindow != 2048 || st.PromptTokensLast != ocs[len(ocs)-1].PromptTokens || st.PromptTokensLast == 0 {
		t.Errorf("stats: window %d, last prompt %d (the server counted %d)", st.ContextWindow, st.PromptTokensLast, ocs[len(ocs)-1].PromptTokens)
	}
}

// TestOllamaToolCallAsTextNudged: on the native path, a model that writes
// its tool call as text is told, in its conversation, to call the tool
// through the tools API; its next reply does, and the tool runs.
func TestOllamaToolCallAsTextNudged(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960})
	var told string
	s.Respond(func(r *fakellm.ChatRequest) fakellm.Response {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "tool":
			return fakellm.Text("done: " + last.Text())
		case strings.Contains(last.Text(), "tools API"):
			told = last.Text()
			return fakellm.ToolCall("shell", `{"cmd": "ls"}`)
		}
		return fakellm.ToolCallAsText("shell", `{"cmd": "ls"}`)
	})
	tools := &fakeTools{decls: []tool.FunctionDecl{{Name: "shell", Scope: "global",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"cmd": {"type": "string"}}}`)}}}
	a := New(Config{ID: "a", Backend: ollamaBackend(t, s, nil), Tools: tools})
	defer a.Close()
	out := runPrompt(t, a, "list the files")
	if !strings.Contains(told, "a call to tool shell as plain text") || !strings.Contains(told, "Call the tool through the tools API (a tool call), not as text") {
		t.Fatalf("the model was told %q", told)
	}
	if !strings.Contains(out, "[warning: model qwen3:8b wrote a call to tool shell as plain text") || !strings.Contains(out, "[nudge: ") ||
		!strings.HasSuffix(out, "done: ran shell\n") {
		t.Fatalf("chat:\n%s", out)
	}
	if len(tools.order) != 1 || tools.order[0] != `shell {"cmd":"ls"}` {
		t.Fatalf("tools ran %q", tools.order)
	}
}
