package backend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/api"

	"ollie/agent/backend/config"
)

// OpenAI is a Backend for a server speaking OpenAI's Chat Completions API,
// with the wire types of chatapi.go and openai-go's stream decoder, or, with TypeOllama, for Ollama
// through its native API and github.com/ollama/ollama/api: the only path
// on which Ollama honours num_ctx (see ollama.go). Both share Chat's
// retries, error classes and checks of a reply. An OpenAI is safe for
// concurrent use.
type OpenAI struct {
	// Sleep waits between retries; nil means a timer that ends early,
	// with ctx's error, when ctx ends. Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for Retry-After dates; nil means time.Now.
	Now func() time.Time
	// Log gets retries and warnings; nil means slog.Default().
	Log *slog.Logger

	cfg    Config
	key    string
	base   string // the OpenAI API base, ending in /v1 for Ollama
	root   string // Ollama: the server root for /api/...
	client *http.Client
	ollama *api.Client // TypeOllama only

	mu     sync.Mutex
	window map[string]ollamaWindow // Ollama: model → context window
	ctxLen map[string]int          // OpenAI type: model → context length from /v1/models
}

// NewOpenAI returns a backend for c, sending key (may be empty) as the
// bearer token. c.Name, c.Type and c.URL must be set; see Config.
func NewOpenAI(c Config, key string) (*OpenAI, error) {
	if c.Type != TypeOpenAI && c.Type != TypeOllama {
		return nil, fmt.Errorf("backend %s: unknown type %q (want %q or %q)", c.Name, c.Type, TypeOpenAI, TypeOllama)
	}
	if err := config.CheckURL(c.URL); err != nil {
		return nil, fmt.Errorf("backend %s: url: %v", c.Name, err)
	}
	b := &OpenAI{cfg: c, key: key, base: strings.TrimRight(c.URL, "/")}
	if c.Type == TypeOllama {
		b.root = strings.TrimSuffix(b.base, "/v1")
		b.base = b.root + "/v1"
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   64, // many agents talk to one server
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	var rt http.RoundTripper = tr
	if c.Socket != "" {
		tr.Proxy = nil
		tr.DialContext = socketDialer(c.Socket)
		rt = socketTransport{path: c.Socket, rt: tr}
	}
	b.client = &http.Client{Transport: rt}
	if c.Type == TypeOllama {
		var err error
		if b.ollama, err = newOllamaClient(b.root, b.client.Transport, key); err != nil {
			return nil, fmt.Errorf("backend %s: url: %v", c.Name, err)
		}
	}
	return b, nil
}

// Name is the backend's name.
func (b *OpenAI) Name() string { return b.cfg.Name }

// DefaultModel is the configured model, possibly empty.
func (b *OpenAI) DefaultModel() string { return b.cfg.Model }

// Config returns the backend's configuration.
func (b *OpenAI) Config() Config { return b.cfg }

func (b *OpenAI) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.Default()
}

// Chat streams one completion. See Backend.Chat; the retry rules are in
// retry.go and the README. Cancelling ctx ends the request at once with an
// *APIError wrapping ctx's error.
func (b *OpenAI) Chat(ctx context.Context, msgs []Message, tools []Tool, p Params, onDelta func(Delta)) (*Reply, error) {
	model := p.Model
	if model == "" {
		model = b.cfg.Model
	}
	if model == "" {
		return nil, &APIError{Backend: b.cfg.Name, Message: `no model given: set "model" for this backend (backends.json, OPENAI_MODEL or OLLAMA_MODEL)`}
	}
	// send makes one attempt.
	var send func() (*Reply, bool, *attemptError)
	var win ollamaWindow
	if b.cfg.Type == TypeOllama {
		win = b.ollamaWindowOf(ctx, model)
		req, err := ollamaRequest(model, msgs, tools, p, win.size)
		if err != nil {
			return nil, &APIError{Backend: b.cfg.Name, Message: err.Error()}
		}
		send = func() (*Reply, bool, *attemptError) { return b.ollamaStream(ctx, req, onDelta) }
	} else {
		req, err := b.request(model, msgs, tools, p)
		if err != nil {
			return nil, &APIError{Backend: b.cfg.Name, Message: err.Error()}
		}
		send = func() (*Reply, bool, *attemptError) { return b.stream(ctx, req, onDelta) }
	}

	if b.cfg.Socket != "" && p.Run != "" {
		ctx = context.WithValue(ctx, runKey{}, p.Run)
	}
	var warnings []string
	var reply *Reply
	for attempt := 0; ; attempt++ {
		r, delivered, err := send()
		if err == nil {
			reply = r
			break
		}
		if ctx.Err() != nil {
			return nil, b.canceled(ctx)
		}
		wait, retry := b.retryAfter(err, attempt)
		if !retry {
			return nil, err.api
		}
		b.log().Warn("backend: retrying", "backend", b.cfg.Name, "model", model, "attempt", attempt+1, "wait", wait, "error", err.api.Error())
		if delivered {
			warnings = append(warnings, fmt.Sprintf("the reply from %s broke off (%s) and was requested again", model, err.api.Message))
			if onDelta != nil {
				onDelta(Delta{Restart: true})
			}
		}
		if err := b.sleep(ctx, wait); err != nil {
			return nil, b.canceled(ctx)
		}
	}

	reply.Warnings = append(warnings, reply.Warnings...)
	if len(tools) > 0 && len(reply.Message.ToolCalls) == 0 {
		if w := textToolCall(reply.Message.Content, tools); w != "" {
			reply.TextToolCall = w
			msg := fmt.Sprintf("model %s wrote %s as plain text instead of calling it; it was not run: a tool is called through the tools API, not as text", model, w)
			b.log().Warn("backend: tool call as text", "backend", b.cfg.Name, "model", model, "call", w)
			reply.Warnings = append(reply.Warnings, msg)
		}
	}
	for _, tc := range reply.Message.ToolCalls {
		if tc.ArgsError != "" {
			reply.Warnings = append(reply.Warnings, fmt.Sprintf("model %s called %s with arguments that cannot be used (%s): %s", model, tc.Name, tc.ArgsError, clip(argsText(tc), 200)))
		}
	}
	if b.cfg.Type == TypeOllama {
		reply.Warnings = append(reply.Warnings, b.ollamaAfter(ctx, model, win, reply)...)
	}
	return reply, nil
}

func (b *OpenAI) canceled(ctx context.Context) *APIError {
	return &APIError{Backend: b.cfg.Name, Message: "request abandoned: " + context.Cause(ctx).Error(), Err: ctx.Err()}
}

func (b *OpenAI) sleep(ctx context.Context, d time.Duration) error {
	if b.Sleep != nil {
		return b.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stream makes one attempt. delivered says whether onDelta got anything.
func (b *OpenAI) stream(ctx context.Context, req *chatRequest, onDelta func(Delta)) (_ *Reply, delivered bool, _ *attemptError) {
	var rec capture
	st := b.openStream(ctx, req, &rec)
	defer st.Close()
	var acc accumulator
	for st.Next() {
		acc.add(st.Current(), onDelta)
	}
	if err := st.Err(); err != nil {
		return nil, acc.delivered, b.classify(err, &rec)
	}
	if acc.finish == "" {
		// A stream cut short between events ends like a finished one.
		return nil, acc.delivered, &attemptError{
			api:       &APIError{Backend: b.cfg.Name, Status: rec.status, Message: "the stream ended before the reply was complete", Err: io.ErrUnexpectedEOF},
			transient: true,
		}
	}
	return acc.reply(), acc.delivered, nil
}

// request builds the body of one streamed completion.
func (b *OpenAI) request(model string, msgs []Message, tools []Tool, p Params) (*chatRequest, error) {
	req := &chatRequest{Model: model, Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}}
	for i, m := range msgs {
		cm, err := toWire(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %v", i, err)
		}
		req.Messages = append(req.Messages, cm)
	}
	for _, t := range tools {
		params := json.RawMessage(`{"properties":{},"type":"object"}`)
		if len(bytes.TrimSpace(t.Parameters)) > 0 {
			// Nested schemas pass through byte for byte; the top must be an object.
			var top map[string]json.RawMessage
			if err := json.Unmarshal(t.Parameters, &top); err != nil {
				return nil, fmt.Errorf("tool %s: parameters are not a JSON object: %v", t.Name, err)
			}
			if top != nil {
				params = t.Parameters
			} else {
				params = json.RawMessage(`{}`)
			}
		}
		req.Tools = append(req.Tools, chatTool{Type: "function", Function: functionDef{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	if p.MaxTokens > 0 {
		// OpenAI's own API refuses max_tokens for its reasoning models;
		// Ollama and older servers know only max_tokens.
		n := int64(p.MaxTokens)
		if b.official() {
			req.MaxCompletionTokens = &n
		} else {
			req.MaxTokens = &n
		}
	}
	req.Temperature = p.Temperature
	return req, nil
}

// official reports whether the backend is OpenAI's own API.
func (b *OpenAI) official() bool {
	u, err := url.Parse(b.base)
	return err == nil && u.Hostname() == "api.openai.com"
}

func toWire(m Message) (chatMessage, error) {
	content := m.Content
	switch m.Role {
	case RoleSystem, RoleUser:
		return chatMessage{Role: string(m.Role), Content: &content}, nil
	case RoleTool:
		return chatMessage{Role: string(m.Role), Content: &content, ToolCallID: m.ToolCallID}, nil
	case RoleAssistant:
		a := chatMessage{Role: string(m.Role)}
		// Ollama refuses an assistant message with neither content nor
		// tool calls, so the content is sent even when empty.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content = &content
		}
		for _, tc := range m.ToolCalls {
			args := string(tc.Args)
			if tc.ArgsError != "" || len(bytes.TrimSpace(tc.Args)) == 0 {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, chatToolCall{ID: tc.ID, Type: "function", Function: chatFunction{Name: tc.Name, Arguments: args}})
		}
		return a, nil
	}
	return chatMessage{}, fmt.Errorf("unknown role %q", m.Role)
}

// accumulator builds the reply from the chunks.
type accumulator struct {
	text      strings.Builder
	calls     []*partialCall
	finish    string
	usage     Usage
	delivered bool
}

type partialCall struct {
	index    int64
	id, name string
	args     strings.Builder
}

func (a *accumulator) add(c chatChunk, onDelta func(Delta)) {
	if c.Usage != nil {
		a.usage = Usage{PromptTokens: int(c.Usage.PromptTokens), CompletionTokens: int(c.Usage.CompletionTokens)}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // one choice is asked for
		}
		d := ch.Delta
		var delta Delta
		if d.Content != "" {
			a.text.WriteString(string(d.Content))
			delta.Text = string(d.Content)
		}
		delta.Reasoning = reasoningOf(d)
		if onDelta != nil && (delta.Text != "" || delta.Reasoning != "") {
			a.delivered = true
			onDelta(delta)
		}
		for _, tc := range d.ToolCalls {
			a.toolDelta(tc)
		}
		if ch.FinishReason != "" {
			a.finish = string(ch.FinishReason)
		}
	}
}

// toolDelta adds a tool-call fragment. Servers differ: OpenAI sends the id
// and name once, then argument fragments under the same index; Ollama sends
// each call whole; some servers leave out the index or reuse it for every
// call, so a new id always starts a new call.
func (a *accumulator) toolDelta(tc chunkToolCall) {
	id := string(tc.ID)
	var index int64
	if tc.Index != nil {
		index = *tc.Index
	}
	var c *partialCall
	if n := len(a.calls); n > 0 {
		last := a.calls[n-1]
		switch {
		case id != "" && last.id != "" && id != last.id:
			// a new call
		case tc.Index == nil || index == last.index:
			c = last
		default:
			for _, p := range a.calls {
				if p.index == index && (id == "" || p.id == "" || p.id == id) {
					c = p
				}
			}
		}
	}
	if c == nil {
		c = &partialCall{index: index}
		a.calls = append(a.calls, c)
	}
	if id != "" {
		c.id = id
	}
	// Some servers repeat the whole name in every fragment.
	if n := string(tc.Function.Name); n != "" && n != c.name {
		c.name += n
	}
	c.args.WriteString(string(tc.Function.Arguments))
}

func (a *accumulator) reply() *Reply {
	r := &Reply{
		Message:      Message{Role: RoleAssistant, Content: a.text.String()},
		FinishReason: a.finish,
		Usage:        a.usage,
	}
	for _, c := range a.calls {
		id := c.id
		if id == "" {
			id = newCallID()
		}
		args, problem := normalizeArgs(c.args.String())
		r.Message.ToolCalls = append(r.Message.ToolCalls, ToolCall{ID: id, Name: c.name, Args: args, ArgsError: problem})
	}
	return r
}

// reasoningOf is the delta's reasoning text: "reasoning_content" (vLLM,
// DeepSeek, llama.cpp) or "reasoning" (Ollama, OpenRouter).
func reasoningOf(d chunkDelta) string {
	for _, raw := range [...]json.RawMessage{d.ReasoningContent, d.Reasoning} {
		var s string
		if len(raw) > 0 && json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// normalizeArgs turns the model's argument text into valid JSON, with a
// problem when it is not a JSON object.
func normalizeArgs(raw string) (json.RawMessage, string) {
	t := strings.TrimSpace(raw)
	if t == "" || t == "null" {
		return json.RawMessage("{}"), ""
	}
	var v any
	if err := json.Unmarshal([]byte(t), &v); err != nil {
		quoted, _ := json.Marshal(raw)
		return quoted, "not valid JSON: " + err.Error()
	}
	switch v := v.(type) {
	case map[string]any:
		return json.RawMessage(t), ""
	case string:
		// Some models encode the object twice.
		inner := strings.TrimSpace(v)
		var obj map[string]any
		if json.Unmarshal([]byte(inner), &obj) == nil {
			return json.RawMessage(inner), ""
		}
		return json.RawMessage(t), "a JSON string, not an object"
	default:
		return json.RawMessage(t), fmt.Sprintf("JSON %s, not an object", jsonKind(v))
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case float64:
		return "number"
	case bool:
		return "boolean"
	}
	return "value"
}

// argsText is a call's arguments as the model wrote them.
func argsText(tc ToolCall) string {
	var s string
	if json.Unmarshal(tc.Args, &s) == nil {
		return s
	}
	return string(tc.Args)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func newCallID() string {
	var b [12]byte
	rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// ModelInfos lists the models the server offers with the context window
// an agent gets with each: for Ollama the num_ctx ollie sends (see
// ollama.go), for others the backend's "context", else what /v1/models
// says. It is not retried.
func (b *OpenAI) ModelInfos(ctx context.Context) ([]ModelInfo, error) {
	if b.cfg.Type == TypeOllama {
		return b.ollamaModelInfos(ctx)
	}
	var rec capture
	models, err := b.listModels(ctx, &rec)
	if err != nil {
		return nil, b.classify(err, &rec).api
	}
	var out []ModelInfo
	for _, m := range models {
		mi := ModelInfo{Name: m.ID}
		switch n := contextFromModel(m); {
		case b.cfg.Context > 0:
			mi.Context, mi.Source = b.cfg.Context, `the backend's "context"`
		case n > 0:
			mi.Context, mi.Source = n, "/v1/models"
		}
		out = append(out, mi)
	}
	return out, nil
}

// Models lists the models the server offers: Ollama's from /api/tags,
// others' from /v1/models. It is not retried.
func (b *OpenAI) Models(ctx context.Context) ([]string, error) {
	if b.cfg.Type == TypeOllama {
		return b.ollamaModels(ctx)
	}
	var rec capture
	models, err := b.listModels(ctx, &rec)
	if err != nil {
		return nil, b.classify(err, &rec).api
	}
	var names []string
	for _, m := range models {
		names = append(names, m.ID)
	}
	return names, nil
}

// ContextLength is the model's context window ("" means the default
// model), or 0 if unknown. For Ollama it is the num_ctx ollie sends with
// every chat, or the smaller window /api/ps showed Ollama runs the model
// with (see ollama.go); for others it is the configured "context", else
// what /v1/models says (vLLM's max_model_len, OpenRouter's
// context_length, llama.cpp's meta.n_ctx_train).
func (b *OpenAI) ContextLength(ctx context.Context, model string) int {
	if model == "" {
		model = b.cfg.Model
	}
	if b.cfg.Type == TypeOllama {
		return b.ollamaWindowOf(ctx, model).size
	}
	if b.cfg.Context > 0 {
		return b.cfg.Context
	}
	b.mu.Lock()
	n, ok := b.ctxLen[model]
	b.mu.Unlock()
	if ok {
		return n
	}
	models, err := b.listModels(ctx, &capture{})
	if err != nil {
		b.log().Debug("backend: no context length", "backend", b.cfg.Name, "model", model, "error", err)
		return 0
	}
	for _, m := range models {
		if m.ID == model {
			n = contextFromModel(m)
			break
		}
	}
	b.mu.Lock()
	if b.ctxLen == nil {
		b.ctxLen = map[string]int{}
	}
	b.ctxLen[model] = n
	b.mu.Unlock()
	return n
}

// contextFromModel reads the extra fields servers add to /v1/models.
func contextFromModel(m modelEntry) int {
	var v struct {
		ContextLength int `json:"context_length"` // OpenRouter, LM Studio
		MaxModelLen   int `json:"max_model_len"`  // vLLM
		Meta          struct {
			NCtxTrain int `json:"n_ctx_train"` // llama.cpp
		} `json:"meta"`
	}
	if json.Unmarshal(m.Raw, &v) != nil {
		return 0
	}
	switch {
	case v.MaxModelLen > 0:
		return v.MaxModelLen
	case v.ContextLength > 0:
		return v.ContextLength
	}
	return v.Meta.NCtxTrain
}
