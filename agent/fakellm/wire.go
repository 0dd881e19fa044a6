package fakellm

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// A ChatRequest is the decoded body of a chat completion request.
type ChatRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	Tools               []Tool         `json:"tools"`
	Stream              bool           `json:"stream"`
	StreamOptions       *StreamOptions `json:"stream_options"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Temperature         *float64       `json:"temperature"`
}

// StreamOptions is the request's "stream_options".
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// A Message is one message of a request.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"` // a string, an array of parts, or absent
	ToolCalls  []WireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

// Text is the message's content as text: the string, or the text parts
// joined.
func (m Message) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// A WireToolCall is a tool call as an assistant message carries it.
type WireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// A Tool is a tool offered in a request.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// chunk is one streamed chat.completion.chunk.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function toolCallDeltaFunc `json:"function"`
}

type toolCallDeltaFunc struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// play answers req with resp; n numbers the request.
func (s *Server) play(w http.ResponseWriter, r *http.Request, req *ChatRequest, bodyLen, n int, resp Response) {
	if resp.Status != 0 {
		writeVerbatim(w, resp)
		return
	}
	id := fmt.Sprintf("chatcmpl-fake%d", n)
	calls := withCallIDs(resp.ToolCalls, n)
	finish := resp.Finish
	if finish == "" {
		finish = "stop"
		if len(calls) > 0 {
			finish = "tool_calls"
		}
	}
	usage := resp.Usage
	if usage == nil {
		usage = estimateUsage(resp, calls, bodyLen)
	}
	if !req.Stream {
		if resp.Reset {
			reset(w)
			return
		}
		if resp.Hang {
			s.hang(r)
			return
		}
		s.writeCompletion(w, id, req.Model, resp, calls, finish, usage)
		return
	}
	s.stream(w, r, req, id, resp, calls, finish, usage)
}

// writeVerbatim answers with resp's Status, Header and Body as scripted,
// JSON unless the Header says otherwise.
func writeVerbatim(w http.ResponseWriter, resp Response) {
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(resp.Status)
	w.Write([]byte(resp.Body))
}

// withCallIDs is a copy of calls with an ID made up for each that has
// none; n numbers the request, so IDs differ across requests.
func withCallIDs(calls []Call, n int) []Call {
	calls = append([]Call(nil), calls...)
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("call_%d_%d", n, i)
		}
	}
	return calls
}

// estimateUsage counts a token for every 4 bytes of the request body and
// of the reply, as a reply without a scripted Usage reports.
func estimateUsage(resp Response, calls []Call, bodyLen int) *Usage {
	out := len(resp.contentOf())
	for _, c := range calls {
		out += len(c.Name) + len(c.Args)
	}
	usage := &Usage{PromptTokens: bodyLen/4 + 1, CompletionTokens: out/4 + 1}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	return usage
}

// stream answers as server-sent events: resp's Events verbatim, or its
// deltas, then the failure it scripts or the finish chunk, the usage
// chunk if asked for, and "[DONE]".
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req *ChatRequest, id string, resp Response, calls []Call, finish string, usage *Usage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if len(resp.Events) > 0 {
		for _, ev := range resp.Events {
			fmt.Fprintf(w, "data: %s\n\n", ev)
		}
		return
	}
	cs := &chunkStream{s: s, w: w, r: r, flusher: flusher, id: id, model: req.Model, delay: resp.Delay}
	if !cs.deltas(resp, calls) {
		return
	}
	switch {
	case resp.StreamError != "":
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": resp.StreamError, "type": "server_error", "code": 502}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		return
	case resp.Reset:
		reset(w)
		return
	case resp.Hang:
		if flusher != nil {
			flusher.Flush()
		}
		s.hang(r)
		return
	}
	if !cs.send(chunk{Choices: []chunkChoice{{Delta: delta{}, FinishReason: &finish}}}) {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		if !cs.send(chunk{Usage: usage}) {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// chunkStream sends the chunks of one streamed reply, each flushed as it
// is written.
type chunkStream struct {
	s         *Server
	w         http.ResponseWriter
	r         *http.Request
	flusher   http.Flusher // nil if w cannot flush
	id, model string
	delay     time.Duration // before each chunk
}

// send writes c, after the delay; it reports false once the client is
// gone or the server closed.
func (cs *chunkStream) send(c chunk) bool {
	if !cs.s.pause(cs.r, cs.delay) {
		return false
	}
	c.ID, c.Object, c.Created, c.Model = cs.id, "chat.completion.chunk", time.Now().Unix(), cs.model
	if c.Choices == nil {
		c.Choices = []chunkChoice{}
	}
	b, _ := json.Marshal(c)
	if _, err := fmt.Fprintf(cs.w, "data: %s\n\n", b); err != nil {
		return false
	}
	if cs.flusher != nil {
		cs.flusher.Flush()
	}
	return true
}

func (cs *chunkStream) delta(d delta) bool {
	return cs.send(chunk{Choices: []chunkChoice{{Delta: d}}})
}

// deltas sends the reply itself: the role, the reasoning, the text (the
// rest of it held back after its first chunk while resp.Hold is open),
// then each call, its name first and its arguments in fragments. It
// reports whether all of it went out.
func (cs *chunkStream) deltas(resp Response, calls []Call) bool {
	empty := ""
	if !cs.delta(delta{Role: "assistant", Content: &empty}) {
		return false
	}
	for _, t := range resp.Reasoning {
		if !cs.delta(delta{ReasoningContent: t}) {
			return false
		}
	}
	for i, t := range resp.Text {
		if i == 1 && resp.Hold != nil && !await(cs.s, cs.r, resp.Hold) {
			return false
		}
		if !cs.delta(delta{Content: &t}) {
			return false
		}
	}
	for i, c := range calls {
		first := toolCallDelta{Index: i, ID: c.ID, Type: "function", Function: toolCallDeltaFunc{Name: c.Name}}
		if !cs.delta(delta{ToolCalls: []toolCallDelta{first}}) {
			return false
		}
		for _, frag := range fragments(c.Args, 3) {
			if !cs.delta(delta{ToolCalls: []toolCallDelta{{Index: i, Function: toolCallDeltaFunc{Arguments: frag}}}}) {
				return false
			}
		}
	}
	return true
}

// pause waits d before a chunk; it reports false if the client went away
// or the server closed first.
func (s *Server) pause(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	return await(s, r, time.After(d))
}

// await waits for c; it reports false if the client went away or the
// server closed first.
func await[T any](s *Server, r *http.Request, c <-chan T) bool {
	select {
	case <-c:
		return true
	case <-r.Context().Done():
		return false
	case <-s.done:
		return false
	}
}

func (s *Server) writeCompletion(w http.ResponseWriter, id, model string, resp Response, calls []Call, finish string, usage *Usage) {
	msg := map[string]any{"role": "assistant", "content": resp.contentOf()}
	if len(resp.Reasoning) > 0 {
		msg["reasoning_content"] = strings.Join(resp.Reasoning, "")
	}
	if len(calls) > 0 {
		if len(resp.Text) == 0 {
			msg["content"] = nil
		}
		var tcs []map[string]any
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
		}
		msg["tool_calls"] = tcs
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":      id,
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   usage,
	})
}

// hang waits until the client goes away or the server closes.
func (s *Server) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
		s.mu.Lock()
		s.gone++
		s.mu.Unlock()
	case <-s.done:
	}
}

// reset flushes what was written and resets the connection, so the client
// sees "connection reset by peer" (or an unexpected EOF) mid-response.
func reset(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	rc.Flush()
	conn, buf, err := rc.Hijack()
	if err != nil {
		return
	}
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // close sends RST, not FIN
	}
	conn.Close()
}

// immediate holds the precomputed answers of immediate mode.
type immediate struct {
	stream, streamUsage, plain []byte
	ollamaStream, ollamaPlain  []byte // the native API's (ollama.go)
}

func newImmediate(text string) *immediate {
	stop := "stop"
	usage := &Usage{PromptTokens: 10, CompletionTokens: 1, TotalTokens: 11}
	c := func(ch chunk) string {
		ch.ID, ch.Object, ch.Created, ch.Model = "chatcmpl-immediate", "chat.completion.chunk", 1700000000, "fake-model"
		if ch.Choices == nil {
			ch.Choices = []chunkChoice{}
		}
		b, _ := json.Marshal(ch)
		return "data: " + string(b) + "\n\n"
	}
	body := c(chunk{Choices: []chunkChoice{{Delta: delta{Role: "assistant", Content: &text}}}}) +
		c(chunk{Choices: []chunkChoice{{Delta: delta{}, FinishReason: &stop}}})
	plain, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-immediate", "object": "chat.completion", "created": 1700000000, "model": "fake-model",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": stop}},
		"usage":   usage,
	})
	im := &immediate{
		stream:      []byte(body + "data: [DONE]\n\n"),
		streamUsage: []byte(body + c(chunk{Usage: usage}) + "data: [DONE]\n\n"),
		plain:       plain,
	}
	im.fillOllama(text)
	return im
}

func (im *immediate) serve(w http.ResponseWriter, body []byte) {
	var req struct {
		Stream        bool           `json:"stream"`
		StreamOptions *StreamOptions `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "fakellm: the request body is not JSON: "+err.Error())
		return
	}
	var out []byte
	switch {
	case !req.Stream:
		w.Header().Set("Content-Type", "application/json")
		out = im.plain
	case req.StreamOptions != nil && req.StreamOptions.IncludeUsage:
		w.Header().Set("Content-Type", "text/event-stream")
		out = im.streamUsage
	default:
		w.Header().Set("Content-Type", "text/event-stream")
		out = im.stream
	}
	w.Write(out)
}
