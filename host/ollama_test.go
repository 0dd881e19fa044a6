package host

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/internal/nstest"
)

// TestOllamaWindowShown: with the host's Ollama (OLLAMA_HOST, here the
// scripted one), models lists each model with the window an agent gets,
// and an agent's stats show the window in use and how full the last
// prompt was.
func TestOllamaWindowShown(t *testing.T) {
	llm := fakellm.Start(t)
	llm.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960}, fakellm.Model{ID: "tiny:1b", ContextLength: 2048})
	llm.Respond(func(*fakellm.ChatRequest) fakellm.Response { return fakellm.Text("hello") })
	env := map[string]string{"OLLAMA_HOST": llm.URL, "OLLAMA_MODEL": "qwen3:8b", "XDG_CONFIG_HOME": t.TempDir()}
	reg, err := backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_DATA", data)
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	d, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	fs := nstest.Attach(t, d.Socket, "")

	want := "ollama\tqwen3:8b\tctx=32768 (num_ctx set by ollie)\n" +
		"ollama\ttiny:1b\tctx=2048 (num_ctx set by ollie, capped at the trained length)\n"
	if got := nstest.ReadFile(t, fs, "models"); got != want {
		t.Fatalf("models = %q, want %q", got, want)
	}

	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=coder profile=default"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "session/s/agent/coder/prompt", "hi"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !d.ns.agents.lookup(strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id")), "coder").WaitTurns(ctx, 1) {
		t.Fatal("the turn did not end")
	}
	var st struct {
		ContextWindow    *int `json:"context_window"`
		PromptTokensLast *int `json:"prompt_tokens_last"`
	}
	if err := json.Unmarshal([]byte(nstest.ReadFile(t, fs, "session/s/agent/coder/stats")), &st); err != nil {
		t.Fatal(err)
	}
	chats := llm.OllamaChats()
	if len(chats) != 1 || st.ContextWindow == nil || *st.ContextWindow != 32768 || st.PromptTokensLast == nil || *st.PromptTokensLast != chats[0].PromptTokens ||
		chats[0].NumCtx != 32768 {
		t.Fatalf("stats window %v, last prompt %v; %d requests", st.ContextWindow, st.PromptTokensLast, len(chats))
	}
}
