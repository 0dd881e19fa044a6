package backend

// Chat with Ollama through its native /api/chat and the official client:
// the only path on which Ollama honours num_ctx (its /v1 API ignores it)
// and refuses, rather than cuts, a prompt that does not fit (truncate:
// false). Retries, error classes and the checks of a reply are Chat's,
// shared with the OpenAI path; this file maps the request and reads the
// NDJSON stream. Ollama sends each tool call whole, with its arguments as
// a JSON object, so there is no assembling of fragments here.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ollama/ollama/api"
)

// ollamaRequest maps a request to Ollama's native one, with numCtx as its
// window.
func ollamaRequest(model string, msgs []Message, tools []Tool, p Params, numCtx int) (*api.ChatRequest, error) {
	stream, no := true, false
	req := &api.ChatRequest{
		Model:    model,
		Stream:   &stream,
		Truncate: &no, // a prompt that does not fit is an error, not a silent cut
		Shift:    &no, // a reply that fills the window stops; the context is not shifted
		Options:  map[string]any{"num_ctx": numCtx},
	}
	if p.MaxTokens > 0 {
		req.Options["num_predict"] = p.MaxTokens
	}
	if p.Temperature != nil {
		req.Options["temperature"] = *p.Temperature
	}
	for i, m := range msgs {
		om, err := toOllama(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %v", i, err)
		}
		req.Messages = append(req.Messages, om)
	}
	for _, t := range tools {
		fn := api.ToolFunction{Name: t.Name, Description: t.Description}
		// Ollama's server decodes a schema into these types, so what
		// they do not hold (a nested "required", "default") never
		// reaches the model, sent as raw JSON or not.
		if len(bytes.TrimSpace(t.Parameters)) > 0 {
			if err := json.Unmarshal(t.Parameters, &fn.Parameters); err != nil {
				return nil, fmt.Errorf("tool %s: parameters: %v", t.Name, err)
			}
		}
		if fn.Parameters.Type == "" {
			fn.Parameters.Type = "object"
		}
		if fn.Parameters.Properties == nil {
			fn.Parameters.Properties = api.NewToolPropertiesMap()
		}
		req.Tools = append(req.Tools, api.Tool{Type: "function", Function: fn})
	}
	return req, nil
}

func toOllama(m Message) (api.Message, error) {
	switch m.Role {
	case RoleSystem, RoleUser:
		return api.Message{Role: m.Role, Content: m.Content}, nil
	case RoleTool:
		return api.Message{Role: RoleTool, Content: m.Content, ToolName: m.Name, ToolCallID: m.ToolCallID}, nil
	case RoleAssistant:
		am := api.Message{Role: RoleAssistant, Content: m.Content}
		for i, tc := range m.ToolCalls {
			args := api.NewToolCallFunctionArguments()
			if tc.ArgsError == "" && len(bytes.TrimSpace(tc.Args)) > 0 {
				// Arguments that are not an object go as {}, as on /v1:
				// Ollama rejects a history that carries them.
				if err := json.Unmarshal(tc.Args, &args); err != nil {
					args = api.NewToolCallFunctionArguments()
				}
			}
			am.ToolCalls = append(am.ToolCalls, api.ToolCall{ID: tc.ID, Function: api.ToolCallFunction{Index: i, Name: tc.Name, Arguments: args}})
		}
		return am, nil
	}
	return api.Message{}, fmt.Errorf("unknown role %q", m.Role)
}

// ollamaStream makes one attempt. delivered says whether onDelta got
// anything.
func (b *OpenAI) ollamaStream(ctx context.Context, req *api.ChatRequest, onDelta func(Delta)) (_ *Reply, delivered bool, _ *attemptError) {
	rec := &capture{}
	var acc ollamaAccumulator
	err := b.ollama.Chat(context.WithValue(ctx, captureKey{}, rec), req, func(r api.ChatResponse) error {
		return acc.add(r, onDelta)
	})
	if err != nil {
		return nil, acc.delivered, b.ollamaClassify(err, rec, req.Model)
	}
	if !acc.done {
		// The client stops quietly at the end of the body, cut short
		// or not, so an answer without its last line is found here.
		return nil, acc.delivered, &attemptError{
			api:        &APIError{Backend: b.cfg.Name, Status: rec.status, Message: "the stream ended before the reply was complete", Err: io.ErrUnexpectedEOF},
			transient:  true,
			retryAfter: -1,
		}
	}
	return acc.reply(), acc.delivered, nil
}

// ollamaAccumulator builds the reply from the stream's lines.
type ollamaAccumulator struct {
	text      strings.Builder
	calls     []ToolCall
	done      bool
	reason    string
	usage     Usage
	delivered bool
}

func (a *ollamaAccumulator) add(r api.ChatResponse, onDelta func(Delta)) error {
	if a.done {
		return nil // nothing follows the last line
	}
	d := Delta{Text: r.Message.Content, Reasoning: r.Message.Thinking}
	a.text.WriteString(d.Text)
	if onDelta != nil && (d.Text != "" || d.Reasoning != "") {
		a.delivered = true
		onDelta(d)
	}
	for _, tc := range r.Message.ToolCalls {
		args, problem := normalizeArgs(tc.Function.Arguments.String())
		id := tc.ID
		if id == "" {
			id = newCallID() // Ollama before 0.12 sent none
		}
		a.calls = append(a.calls, ToolCall{ID: id, Name: tc.Function.Name, Args: args, ArgsError: problem})
	}
	if r.Done {
		a.done = true
		a.reason = r.DoneReason
		a.usage = Usage{PromptTokens: r.PromptEvalCount, CompletionTokens: r.EvalCount}
	}
	return nil
}

func (a *ollamaAccumulator) reply() *Reply {
	finish := a.reason
	switch {
	case len(a.calls) > 0 && finish != "length":
		finish = "tool_calls" // Ollama says "stop"
	case finish == "":
		finish = "stop"
	}
	return &Reply{
		Message:      Message{Role: RoleAssistant, Content: a.text.String(), ToolCalls: a.calls},
		FinishReason: finish,
		Usage:        a.usage,
	}
}
