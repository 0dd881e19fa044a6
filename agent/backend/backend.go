// Package backend talks to language models. Every OpenAI-compatible server
// (OpenAI, OpenRouter, vLLM, llama.cpp) is one Backend, built on
// github.com/openai/openai-go/v3; Ollama is reached through its native
// API with its official client, github.com/ollama/ollama/api, the one way
// to set its context window. The loop sees only this package's types.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
)

// Roles of a Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// A Message is one entry of a conversation.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`   // assistant messages
	ToolCallID string     `json:"tool_call_id,omitempty"` // tool messages: the call answered
	Name       string     `json:"name,omitempty"`         // tool messages: the tool's name
}

// A ToolCall is the model's request to run a tool.
//
// Args is always valid JSON. When the model's arguments are not a JSON
// object, ArgsError says why, Args holds the model's text as a JSON string
// (so a tool expecting an object refuses it), and the call is sent back to
// the server as "{}" in later requests, since some servers reject a
// conversation that carries invalid arguments.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args"`
	ArgsError string          `json:"args_error,omitempty"`
}

// A Tool is a function the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Params tune one request.
type Params struct {
	Model       string   // "" means the backend's default model
	Run         string   // the session's name: the desktop's model counts usage and budgets by it
	MaxTokens   int      // 0 means the server's default
	Temperature *float64 // nil means the server's default
}

// A Delta is a streamed piece of the reply, delivered as it arrives.
type Delta struct {
	Text      string
	Reasoning string
	// Restart says the stream broke and the request is being sent again:
	// the text delivered since the last Restart (or the start) belongs to a
	// failed attempt, and the Reply holds only the new attempt's text.
	Restart bool
}

// Usage counts the tokens of one request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// A Reply is the whole answer to one request.
type Reply struct {
	Message      Message // role assistant: text and/or tool calls
	FinishReason string  // "stop", "tool_calls", "length", ...
	Usage        Usage
	Warnings     []string // e.g. a tool call the model wrote as plain text
	// TextToolCall, when tools were offered and the reply calls none,
	// describes the tool call its text seems to make instead ("a call
	// to tool shell"), which was not run; "" otherwise. The loop tells
	// the model to call the tool through the tools API.
	TextToolCall string
}

// A Backend is one model server.
type Backend interface {
	// Name is the backend's name in the backends file (or "openai",
	// "ollama" when configured from the environment).
	Name() string
	// DefaultModel is the model used when Params.Model is empty.
	DefaultModel() string
	// Chat streams one completion: onDelta (may be nil) gets text as it
	// arrives; the Reply holds the whole message. Transient failures
	// (429, 5xx, connection reset) are retried as documented; a context
	// overflow returns an error wrapping ErrContextOverflow; every other
	// failure is an *APIError carrying the server's own message.
	Chat(ctx context.Context, msgs []Message, tools []Tool, p Params, onDelta func(Delta)) (*Reply, error)
	// Models lists the models the server offers.
	Models(ctx context.Context) ([]string, error)
	// ContextLength is the model's context window in tokens, or 0 if unknown.
	ContextLength(ctx context.Context, model string) int
}

// ErrContextOverflow is wrapped by Chat's error when the request does not
// fit the model's context window.
var ErrContextOverflow = errors.New("backend: context window exceeded")

// An APIError is a failure reported by the model server, with its message.
type APIError struct {
	Backend string
	Status  int // HTTP status, 0 when the request never got an answer
	Message string
	Err     error // the cause, if any: ErrContextOverflow, a network error, the context's error
}

// Unwrap returns the cause.
func (e *APIError) Unwrap() error { return e.Err }

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("backend %s: %s", e.Backend, e.Message)
	}
	return fmt.Sprintf("backend %s: HTTP %d: %s", e.Backend, e.Status, e.Message)
}

// Unanswered reports whether err is a backend's failure to get any
// answer from its server (nothing listening there, a timeout), rather
// than an answer that was an error.
func Unanswered(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 0 {
		return false
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne)
}

// A ModelInfo is a model a server offers and the context window an agent
// gets with it.
type ModelInfo struct {
	Name    string
	Context int    // tokens; 0 if unknown
	Source  string // where Context comes from, e.g. "num_ctx set by ollie"
}

// ListModels lists be's models, with their context windows when be can
// tell (an *OpenAI can), else with their names only.
func ListModels(ctx context.Context, be Backend) ([]ModelInfo, error) {
	if l, ok := be.(interface {
		ModelInfos(context.Context) ([]ModelInfo, error)
	}); ok {
		return l.ModelInfos(ctx)
	}
	names, err := be.Models(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ModelInfo, len(names))
	for i, n := range names {
		out[i] = ModelInfo{Name: n}
	}
	return out, nil
}
