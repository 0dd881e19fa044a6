package fakellm

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// A Response is one entry of the script: the answer to one chat request.
//
// A successful reply streams Reasoning, then Text, then ToolCalls, then the
// finish chunk, the usage chunk (when the request asked for usage) and
// "data: [DONE]". Without "stream": true the same reply is one JSON object.
// Status, StreamError, Reset and Hang replace parts of that to fail.
type Response struct {
	Reasoning []string // reasoning deltas, sent as "reasoning_content" (vLLM, DeepSeek, llama.cpp)
	Text      []string // content deltas, one chunk each
	ToolCalls []Call   // streamed one after another: id and name first, then the arguments in fragments
	Finish    string   // finish_reason; "" means "tool_calls" with tool calls, else "stop"
	Usage     *Usage   // nil: estimated from the sizes of the request and the reply

	Delay time.Duration // pause before each chunk

	// Hold, if not nil, keeps the rest of Text back after its first
	// chunk until Hold is closed: a test sees the answer midway for as
	// long as it needs, however slow the machine.
	Hold <-chan struct{}

	// Status, if not zero, answers with this status, Header and Body
	// instead of a reply.
	Status int
	Body   string
	Header http.Header

	// StreamError, if not empty, ends the stream after its chunks with an
	// error event ("data: {"error": ...}") carrying this message, the way
	// vLLM and OpenRouter report a failure after the headers went out.
	StreamError string
	// Reset ends the stream after its chunks by resetting the connection
	// (TCP RST), before any finish chunk. Without streaming the connection
	// is reset before any response.
	Reset bool
	// Hang sends the chunks, then waits until the client goes away or the
	// server closes, without finishing.
	Hang bool

	// Events, if not empty, is the whole stream instead: each one is sent
	// as "data: <event>\n\n", verbatim, and nothing else ("[DONE]"
	// included). It reproduces a server's quirks.
	Events []string
}

// A Call is one tool call in a Response.
type Call struct {
	ID   string // "" means one is made up
	Name string
	Args string // the arguments exactly as the model writes them; need not be JSON
}

// Usage is the token count the server reports.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Text is a reply streamed as these content deltas.
func Text(chunks ...string) Response { return Response{Text: chunks} }

// ToolCall is a reply with one tool call; args may be malformed on purpose.
func ToolCall(name, args string) Response {
	return Response{ToolCalls: []Call{{Name: name, Args: args}}}
}

// ToolCalls is a reply with several parallel tool calls.
func ToolCalls(calls ...Call) Response { return Response{ToolCalls: calls} }

// ToolCallAsText is a reply whose content is a tool call written as plain
// JSON text, as models without native tool calling answer:
// {"name": "shell", "arguments": {...}}. args must be a JSON object.
func ToolCallAsText(name, args string) Response {
	return Text(`{"name": "`+name+`", `, `"arguments": `+args+`}`)
}

// HermesToolCallAsText is a reply whose content is a tool call in the
// Hermes/Qwen template's <tool_call> tags, which a server failed to parse.
func HermesToolCallAsText(name, args string) Response {
	return Text("<tool_call>\n", `{"name": "`+name+`", "arguments": `+args+`}`, "\n</tool_call>")
}

// Error is an HTTP error with an OpenAI-shaped body carrying message.
func Error(status int, message string) Response {
	typ := "server_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	return Response{Status: status, Body: fmt.Sprintf(`{"error":{"message":%q,"type":%q,"param":null,"code":null}}`, message, typ)}
}

// RateLimited is HTTP 429 with the given Retry-After header (seconds or an
// HTTP date; "" sends none), as OpenAI answers it.
func RateLimited(retryAfter string) Response {
	r := Response{
		Status: http.StatusTooManyRequests,
		Body:   `{"error":{"message":"Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
	}
	if retryAfter != "" {
		r.Header = http.Header{"Retry-After": {retryAfter}}
	}
	return r
}

// Reset is a reply that streams these content deltas, then resets the
// connection.
func Reset(chunks ...string) Response { return Response{Text: chunks, Reset: true} }

// Hang is a reply that streams these content deltas, then waits for the
// client to give up.
func Hang(chunks ...string) Response { return Response{Text: chunks, Hang: true} }

// A Flavor is a server whose wording of an error the script imitates.
type Flavor string

// Servers whose context-length errors ContextOverflow imitates.
const (
	OpenAI     Flavor = "openai"     // 400, code "context_length_exceeded"
	VLLM       Flavor = "vllm"       // 400, top-level message, numeric code
	LlamaCpp   Flavor = "llama.cpp"  // 400, type "exceed_context_size_error"
	Ollama     Flavor = "ollama"     // 500, "the input length exceeds the context length"
	OpenRouter Flavor = "openrouter" // 400, "This endpoint's maximum context length is ..."
)

// ContextOverflow is the error the flavor's server answers when the
// request does not fit the model's context window.
func ContextOverflow(f Flavor) Response {
	switch f {
	case OpenAI:
		return Response{Status: 400, Body: `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9120 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}
	case VLLM:
		return Response{Status: 400, Body: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5012 tokens (4012 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`}
	case LlamaCpp:
		return Response{Status: 400, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5012,"n_ctx":4096}}`}
	case Ollama:
		return Response{Status: 500, Body: `{"error":{"message":"the input length exceeds the context length","type":"api_error","param":null,"code":null}}`}
	case OpenRouter:
		return Response{Status: 400, Body: `{"error":{"message":"This endpoint's maximum context length is 8192 tokens. However, you requested about 9120 tokens (9120 of text input). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400,"metadata":{"provider_name":null}}}`}
	}
	panic("fakellm: unknown flavor " + string(f))
}

// fragments splits s into about n pieces at rune boundaries, the way a
// server streams a tool call's arguments.
func fragments(s string, n int) []string {
	if s == "" {
		return nil
	}
	size := (len(s) + n - 1) / n
	var out []string
	for len(s) > 0 {
		i := min(size, len(s))
		for i < len(s) && !utf8Start(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// contentOf is the whole text of a reply.
func (r *Response) contentOf() string { return strings.Join(r.Text, "") }
