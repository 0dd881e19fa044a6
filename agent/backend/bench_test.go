package backend_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
)

// BenchmarkChat measures turns per second of Chat (streaming, the mapping
// both ways) against fakellm answering at once, beside a bare net/http
// client POSTing the same bytes to the same server and reading the whole
// stream, in the same run: with openai-go on /v1, and with Ollama's
// official client on the native /api/chat. chat/bare is how many times
// longer a Chat takes than the bare request.
func BenchmarkChat(b *testing.B) {
	b.Run("openai", func(b *testing.B) { benchChat(b, backend.TypeOpenAI) })
	b.Run("ollama", func(b *testing.B) { benchChat(b, backend.TypeOllama) })
}

func benchChat(b *testing.B, typ string) {
	s := fakellm.Start(b)
	c := backend.Config{Name: "bench", Type: typ, URL: s.URL + "/v1", Model: "fake-model"}
	path := "/v1/chat/completions"
	if typ == backend.TypeOllama {
		c.URL, path = s.URL, "/api/chat"
	}
	be, err := backend.NewOpenAI(c, "sk-bench")
	if err != nil {
		b.Fatal(err)
	}
	msgs := []backend.Message{
		{Role: backend.RoleSystem, Content: "You are a careful operator of Linux hosts. Answer briefly."},
		{Role: backend.RoleUser, Content: "How full is /var?"},
		{Role: backend.RoleAssistant, ToolCalls: []backend.ToolCall{{ID: "call_1", Name: "shell", Args: []byte(`{"cmd":"df -h /var"}`)}}},
		{Role: backend.RoleTool, ToolCallID: "call_1", Name: "shell", Content: "Filesystem Size Used Avail Use% Mounted on\n/dev/sda2 40G 31G 7.1G 82% /var\n"},
	}
	tools := []backend.Tool{shell, read}
	ctx := context.Background()

	// The bare client sends exactly what Chat sends.
	s.Push(fakellm.Text("ok"))
	if _, err := be.Chat(ctx, msgs, tools, backend.Params{}, nil); err != nil {
		b.Fatal(err)
	}
	var body []byte
	for _, r := range s.Requests() {
		if r.Path == path {
			body = r.Body
		}
	}
	s.SetImmediate("ok")
	bare := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-bench")
		res, err := bare.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, res.Body); err != nil {
			b.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("bare: status %d", res.StatusCode)
		}
	}
	post() // warm the connection

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		r, err := be.Chat(ctx, msgs, tools, backend.Params{}, nil)
		if err != nil || r.Message.Content != "ok" {
			b.Fatalf("reply %v, error %v", r, err)
		}
	}
	chat := time.Since(start)
	b.StopTimer()

	start = time.Now()
	for range b.N {
		post()
	}
	bareTime := time.Since(start)

	b.ReportMetric(float64(b.N)/chat.Seconds(), "turns/s")
	b.ReportMetric(float64(b.N)/bareTime.Seconds(), "bare-req/s")
	b.ReportMetric(chat.Seconds()/bareTime.Seconds(), "chat/bare")
}
