package fakellm

// The scripted Ollama: its native API in the types of Ollama's own Go
// package, github.com/ollama/ollama/api, so that what the official client
// sends and reads is what a real server would take and answer.
//
//	GET  /api/tags   api.ListResponse: the models (SetModels)
//	POST /api/show   api.ShowResponse: the trained context length as
//	                 model_info["fake.context_length"], the Modelfile's
//	                 num_ctx in "parameters"; 404 for an unknown model
//	GET  /api/ps     api.ProcessResponse: the loaded models, each with the
//	                 context_length it runs with
//	POST /api/chat   api.ChatRequest in, api.ChatResponse lines out
//	                 (NDJSON), or one api.ChatResponse with "stream": false
//
// A chat loads its model, as Ollama does, with num_ctx: the request's
// options.num_ctx, else the Modelfile's, else the server's default
// (SetDefaultContext, as OLLAMA_CONTEXT_LENGTH sets it), capped at the
// trained length and at Model.LoadLimit. A model loaded with another
// num_ctx is loaded again (Loads counts it).
//
// A prompt larger than num_ctx is truncated as Ollama truncates it,
// silently: the oldest messages that are not system messages are dropped
// until it fits, the last one always kept. With "truncate": false it is
// refused instead, with Ollama's 400 "the input length exceeds the
// context length". Tokens are estimated at 4 bytes each (Tokens). What
// was dropped is recorded (OllamaChat.Dropped), so a test can tell
// whether its client avoided it.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"
)

// DefaultContext is the window the server runs a model with when neither
// the request nor the Modelfile sets num_ctx: Ollama's default on a host
// with less than 23 GiB of VRAM. SetDefaultContext changes it.
const DefaultContext = 4096

// Tokens is the server's estimate of the tokens in n bytes of prompt.
func Tokens(n int) int { return (n + 3) / 4 }

// messageOverhead is what a chat template adds around each message, in
// bytes ("<|im_start|>user\n…<|im_end|>\n").
const messageOverhead = 16

// An OllamaChat is a native chat request, as the server took it.
type OllamaChat struct {
	Request api.ChatRequest // as sent
	// NumCtx is the window the model ran with for it.
	NumCtx int
	// PromptTokens is the size of the prompt the model saw, after any
	// truncation, as reported in prompt_eval_count.
	PromptTokens int
	// Dropped are the messages cut from the front of the conversation to
	// fit NumCtx, silently, as Ollama does unless told "truncate": false.
	Dropped []api.Message
	// CutTokens is what was cut from the last message itself when even
	// it alone did not fit.
	CutTokens int
	// Refused says the prompt did not fit and "truncate": false asked for
	// an error, which the server answered.
	Refused bool
}

// Truncated reports whether the server cut anything from the prompt.
func (c *OllamaChat) Truncated() bool { return len(c.Dropped) > 0 || c.CutTokens > 0 }

// SetDefaultContext sets the window a model runs with when neither the
// request nor its Modelfile sets num_ctx, as OLLAMA_CONTEXT_LENGTH does;
// 0 restores DefaultContext.
func (s *Server) SetDefaultContext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.defaultCtx = n
}

// LoadModel loads a model with num_ctx n, as another client's request
// would have: /api/ps lists it.
func (s *Server) LoadModel(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.load(name, n)
}

// Loads is how many times the model was loaded, by a chat whose num_ctx
// differed from the one it ran with, or by LoadModel.
func (s *Server) Loads(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads[name]
}

// OllamaChats returns the native chat requests received, in order of
// arrival.
func (s *Server) OllamaChats() []*OllamaChat {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*OllamaChat
	for _, r := range s.requests {
		if r.Ollama != nil {
			out = append(out, r.Ollama)
		}
	}
	return out
}

func (s *Server) load(name string, n int) {
	if s.loaded == nil {
		s.loaded, s.loads = map[string]int{}, map[string]int{}
	}
	if cur, ok := s.loaded[name]; !ok || cur != n {
		s.loaded[name] = n
		s.loads[name]++
	}
}

// lookup finds a model as Ollama does, "name" meaning "name:latest".
func (s *Server) lookup(name string) (Model, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.models {
		if m.ID == name || !strings.Contains(name, ":") && m.ID == name+":latest" {
			return m, true
		}
	}
	return Model{}, false
}

// ollamaError answers as Ollama does: {"error": "..."}.
func ollamaError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// OllamaError is a reply that fails as Ollama's native API does, with
// status and {"error": message}.
func OllamaError(status int, message string) Response {
	b, _ := json.Marshal(map[string]string{"error": message})
	return Response{Status: status, Body: string(b)}
}

// authorizedNative is authorized for the native API: Ollama has no keys,
// but a proxy in front of it may, and answers in Ollama's shape.
func (s *Server) authorizedNative(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == "" || r.Header.Get("Authorization") == "Bearer "+key {
		return true
	}
	ollamaError(w, http.StatusUnauthorized, "unauthorized")
	return false
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request) {
	s.record(r, nil, nil)
	if !s.authorizedNative(w, r) {
		return
	}
	s.mu.Lock()
	models := s.models
	s.mu.Unlock()
	list := api.ListResponse{Models: []api.ListModelResponse{}}
	for _, m := range models {
		list.Models = append(list.Models, api.ListModelResponse{
			Name: m.ID, Model: m.ID,
			ModifiedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
			Size:       1 << 30,
			Digest:     digest(m.ID),
			Details:    details(),
		})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.record(r, body, nil)
	if !s.authorizedNative(w, r) {
		return
	}
	var req api.ShowRequest
	if err := json.Unmarshal(body, &req); err != nil {
		ollamaError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name // before Ollama 0.5
	}
	m, ok := s.lookup(name)
	if !ok {
		ollamaError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", name))
		return
	}
	info := map[string]any{"general.architecture": "fake", "general.parameter_count": 8_000_000_000}
	if m.ContextLength > 0 {
		info["fake.context_length"] = m.ContextLength
	}
	var params strings.Builder
	if m.NumCtx > 0 {
		fmt.Fprintf(&params, "num_ctx                        %d\n", m.NumCtx)
	}
	params.WriteString(`stop                           "<|im_end|>"`)
	writeJSON(w, http.StatusOK, api.ShowResponse{
		Modelfile:    "FROM " + m.ID + "\n",
		Parameters:   params.String(),
		Template:     "{{ .Prompt }}",
		Details:      details(),
		ModelInfo:    info,
		Capabilities: []model.Capability{model.CapabilityCompletion, model.CapabilityTools},
	})
}

func (s *Server) ps(w http.ResponseWriter, r *http.Request) {
	s.record(r, nil, nil)
	if !s.authorizedNative(w, r) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := api.ProcessResponse{Models: []api.ProcessModelResponse{}}
	for _, m := range s.models {
		n, ok := s.loaded[m.ID]
		if !ok {
			continue
		}
		ps.Models = append(ps.Models, api.ProcessModelResponse{
			Name: m.ID, Model: m.ID, Size: 1 << 30, SizeVRAM: 1 << 30,
			Digest: digest(m.ID), Details: details(),
			ExpiresAt:     time.Now().Add(5 * time.Minute),
			ContextLength: n,
		})
	}
	writeJSON(w, http.StatusOK, ps)
}

func digest(id string) string { return fmt.Sprintf("%064x", len(id)) }

func details() api.ModelDetails {
	return api.ModelDetails{Format: "gguf", Family: "fake", ParameterSize: "8B", QuantizationLevel: "Q4_K_M"}
}

// numCtx is the window model runs with for options, as Ollama picks it.
func (s *Server) numCtx(m Model, options map[string]any) int {
	n := m.NumCtx
	if v, ok := options["num_ctx"].(float64); ok && v > 0 {
		n = int(v)
	}
	if n == 0 {
		s.mu.Lock()
		n = s.defaultCtx
		s.mu.Unlock()
		if n == 0 {
			n = DefaultContext
		}
	}
	if m.ContextLength > 0 {
		n = min(n, m.ContextLength)
	}
	if m.LoadLimit > 0 {
		n = min(n, m.LoadLimit)
	}
	return n
}

// promptTokens estimates the prompt that msgs and tools make.
func promptTokens(msgs []api.Message, tools api.Tools) int {
	n := 0
	for _, m := range msgs {
		n += messageOverhead + len(m.Role) + len(m.Content) + len(m.Thinking) + len(m.ToolName)
		for _, c := range m.ToolCalls {
			n += len(c.Function.Name) + len(c.Function.Arguments.String())
		}
	}
	if len(tools) > 0 {
		b, _ := json.Marshal(tools)
		n += len(b)
	}
	return Tokens(n)
}

// fit does what Ollama's chatPrompt does: starting with every message, it
// drops them from the front, keeping the system messages, until the
// prompt fits numCtx or only the last message is left. Without truncate
// it keeps everything.
func fit(msgs []api.Message, tools api.Tools, numCtx int, truncate bool) (kept, dropped []api.Message, tokens int) {
	cur := 0
	for i := range msgs {
		cand := keep(msgs, i)
		tokens = promptTokens(cand, tools)
		cur = i
		if !truncate || tokens <= numCtx {
			break
		}
	}
	for _, m := range msgs[:cur] {
		if m.Role != "system" {
			dropped = append(dropped, m)
		}
	}
	return keep(msgs, cur), dropped, tokens
}

// keep is msgs from i on, after the system messages before i.
func keep(msgs []api.Message, i int) []api.Message {
	var out []api.Message
	for _, m := range msgs[:i] {
		if m.Role == "system" {
			out = append(out, m)
		}
	}
	return append(out, msgs[i:]...)
}

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if im := s.takeImmediate(); im != nil {
		im.serveOllama(w, body)
		return
	}

	var req api.ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.record(r, body, nil)
		ollamaError(w, http.StatusBadRequest, err.Error())
		return
	}
	oc := &OllamaChat{Request: req}
	s.recordOllama(r, body, oc)
	if !s.authorizedNative(w, r) {
		return
	}
	if req.Model == "" {
		ollamaError(w, http.StatusBadRequest, "model is required")
		return
	}
	m, ok := s.lookup(req.Model)
	if !ok {
		ollamaError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", req.Model))
		return
	}
	n := s.numCtx(m, req.Options)
	truncate := req.Truncate == nil || *req.Truncate
	kept, dropped, tokens := fit(req.Messages, req.Tools, n, truncate)
	s.mu.Lock()
	s.load(m.ID, n)
	oc.NumCtx, oc.Dropped, oc.PromptTokens = n, dropped, tokens
	if tokens > n {
		if truncate {
			// The runner cuts the tokens of the one message left.
			oc.CutTokens, oc.PromptTokens = tokens-n, n
		} else {
			oc.Refused = true
		}
	}
	s.mu.Unlock()
	if oc.Refused {
		ollamaError(w, http.StatusBadRequest, "the input length exceeds the context length")
		return
	}

	resp, seq, ok := s.next(asChatRequest(&req, kept))
	if !ok {
		ollamaError(w, http.StatusInternalServerError, fmt.Sprintf("fakellm: the script is empty (chat request %d)", seq))
		return
	}
	s.playOllama(w, r, &req, oc.PromptTokens, seq, resp)
}

func (s *Server) recordOllama(r *http.Request, body []byte, oc *OllamaChat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{
		Method: r.Method,
		Path:   r.URL.Path,
		Header: r.Header.Clone(),
		Body:   body,
		Ollama: oc,
	})
}

// asChatRequest is a native request in the shape a responder reads,
// with the messages the model sees after truncation.
func asChatRequest(req *api.ChatRequest, msgs []api.Message) *ChatRequest {
	out := &ChatRequest{Model: req.Model, Stream: req.Stream == nil || *req.Stream}
	for _, m := range msgs {
		content, _ := json.Marshal(m.Content)
		wm := Message{Role: m.Role, Content: content, ToolCallID: m.ToolCallID, Name: m.ToolName}
		for _, c := range m.ToolCalls {
			var tc WireToolCall
			tc.ID, tc.Type = c.ID, "function"
			tc.Function.Name, tc.Function.Arguments = c.Function.Name, c.Function.Arguments.String()
			wm.ToolCalls = append(wm.ToolCalls, tc)
		}
		out.Messages = append(out.Messages, wm)
	}
	for _, t := range req.Tools {
		var wt Tool
		wt.Type = t.Type
		wt.Function.Name, wt.Function.Description = t.Function.Name, t.Function.Description
		wt.Function.Parameters, _ = json.Marshal(t.Function.Parameters)
		out.Tools = append(out.Tools, wt)
	}
	if v, ok := req.Options["temperature"].(float64); ok {
		out.Temperature = &v
	}
	if v, ok := req.Options["num_predict"].(float64); ok {
		n := int(v)
		out.MaxTokens = &n
	}
	return out
}

// playOllama answers req with resp as Ollama streams a reply: a line per
// reasoning delta (message.thinking), per text delta (message.content)
// and per tool call (message.tool_calls, whole, with its arguments as an
// object), then the last line with done, done_reason and the counts. A
// call whose arguments are not a JSON object cannot be a native tool
// call: it arrives as text, as Ollama's parser leaves it.
func (s *Server) playOllama(w http.ResponseWriter, r *http.Request, req *api.ChatRequest, promptTokens, n int, resp Response) {
	if resp.Status != 0 {
		writeVerbatim(w, resp)
		return
	}
	text, calls := nativeCalls(resp, n)
	last := doneLine(req.Model, resp, text, calls, promptTokens)
	if req.Stream != nil && !*req.Stream {
		switch {
		case resp.Reset:
			reset(w)
		case resp.Hang:
			s.hang(r)
		default:
			whole := last
			whole.Message.Content = strings.Join(text, "")
			whole.Message.Thinking = strings.Join(resp.Reasoning, "")
			whole.Message.ToolCalls = calls
			writeJSON(w, http.StatusOK, whole)
		}
		return
	}
	s.streamOllama(w, r, req.Model, resp, text, calls, last)
}

// nativeCalls is resp's text and its calls as Ollama's, each with an ID
// (n numbers the request); a call whose arguments are not a JSON object
// is written at the end of the text instead.
func nativeCalls(resp Response, n int) (text []string, calls []api.ToolCall) {
	text = append([]string(nil), resp.Text...)
	for i, c := range resp.ToolCalls {
		args := api.NewToolCallFunctionArguments()
		if err := json.Unmarshal([]byte(c.Args), &args); err != nil || !strings.HasPrefix(strings.TrimSpace(c.Args), "{") {
			text = append(text, fmt.Sprintf(`{"name": %q, "arguments": %s}`, c.Name, c.Args))
			continue
		}
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", n, i)
		}
		calls = append(calls, api.ToolCall{ID: id, Function: api.ToolCallFunction{Index: len(calls), Name: c.Name, Arguments: args}})
	}
	return text, calls
}

// ollamaMessage is a line of the reply carrying m.
func ollamaMessage(model string, m api.Message) api.ChatResponse {
	m.Role = "assistant"
	return api.ChatResponse{Model: model, CreatedAt: time.Now().UTC(), Message: m}
}

// doneLine is the reply's last line: done, its reason and the counts,
// resp's Usage or else estimated from the prompt and the reply.
func doneLine(model string, resp Response, text []string, calls []api.ToolCall, promptTokens int) api.ChatResponse {
	finish := resp.Finish
	if finish == "" || finish == "tool_calls" {
		finish = "stop" // Ollama's, with or without tool calls
	}
	prompt, eval := promptTokens, 0
	if resp.Usage != nil {
		prompt, eval = resp.Usage.PromptTokens, resp.Usage.CompletionTokens
	} else {
		out := len(strings.Join(text, "")) + len(strings.Join(resp.Reasoning, ""))
		for _, c := range calls {
			out += len(c.Function.Name) + len(c.Function.Arguments.String())
		}
		eval = Tokens(out) + 1
	}
	last := ollamaMessage(model, api.Message{})
	last.Done, last.DoneReason = true, finish
	last.Metrics = api.Metrics{
		TotalDuration: time.Millisecond, LoadDuration: time.Microsecond,
		PromptEvalCount: prompt, PromptEvalDuration: time.Microsecond,
		EvalCount: eval, EvalDuration: time.Microsecond,
	}
	return last
}

// streamOllama answers as NDJSON: resp's Events verbatim, or a line per
// reasoning delta, text delta and call, then the failure resp scripts or
// last.
func (s *Server) streamOllama(w http.ResponseWriter, r *http.Request, model string, resp Response, text []string, calls []api.ToolCall, last api.ChatResponse) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	line := func(b []byte) bool {
		if _, err := w.Write(append(b, '\n')); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if len(resp.Events) > 0 {
		for _, ev := range resp.Events {
			line([]byte(ev))
		}
		return
	}
	send := func(c api.ChatResponse) bool {
		if !s.pause(r, resp.Delay) {
			return false
		}
		b, _ := json.Marshal(c)
		return line(b)
	}
	for _, t := range resp.Reasoning {
		if !send(ollamaMessage(model, api.Message{Thinking: t})) {
			return
		}
	}
	for _, t := range text {
		if !send(ollamaMessage(model, api.Message{Content: t})) {
			return
		}
	}
	for _, c := range calls {
		if !send(ollamaMessage(model, api.Message{ToolCalls: []api.ToolCall{c}})) {
			return
		}
	}
	switch {
	case resp.StreamError != "":
		b, _ := json.Marshal(map[string]string{"error": resp.StreamError})
		line(b)
		return
	case resp.Reset:
		reset(w)
		return
	case resp.Hang:
		s.hang(r)
		return
	}
	send(last)
}

// serveOllama is immediate mode on /api/chat.
func (im *immediate) serveOllama(w http.ResponseWriter, body []byte) {
	var req struct {
		Model  string `json:"model"`
		Stream *bool  `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		ollamaError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Stream != nil && !*req.Stream {
		w.Header().Set("Content-Type", "application/json")
		w.Write(im.ollamaPlain)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Write(im.ollamaStream)
}

// fillOllama fills the native answers of immediate mode.
func (im *immediate) fillOllama(text string) {
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	first := api.ChatResponse{Model: "fake-model", CreatedAt: at, Message: api.Message{Role: "assistant", Content: text}}
	last := api.ChatResponse{Model: "fake-model", CreatedAt: at, Message: api.Message{Role: "assistant"}, Done: true, DoneReason: "stop",
		Metrics: api.Metrics{PromptEvalCount: 10, EvalCount: 1}}
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(last)
	im.ollamaStream = append(append(append(a, '\n'), b...), '\n')
	whole := last
	whole.Message.Content = text
	im.ollamaPlain, _ = json.Marshal(whole)
}
