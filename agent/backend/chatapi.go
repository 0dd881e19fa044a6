package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3/packages/ssestream"
)

// The Chat Completions wire format, only the fields ollie sends and reads.
//
// These are not openai-go's ChatCompletionNewParams and ChatCompletionChunk
// because importing openai-go's root package runs its init, which
// registers every union and validator of the whole OpenAI API and so links
// all of it: 7 MB of olliesrv for the one endpoint used. The stream is
// still decoded by openai-go's ssestream, and openai_test.go's
// TestWireMatchesOpenAIGo checks that these types marshal to what
// openai-go's own would send and read what it would read.

type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []chatMessage  `json:"messages"`
	Tools               []chatTool     `json:"tools,omitempty"`
	MaxTokens           *int64         `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64         `json:"max_completion_tokens,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// chatChunk is one streamed event. Fields a server may fill with the
// wrong type (reasoning, some servers' null index) are raw so that an odd
// field costs that field, not the reply.
type chatChunk struct {
	Choices []chunkChoice `json:"choices"`
	Usage   *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

type chunkChoice struct {
	Index        int64      `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason nullString `json:"finish_reason"`
}

type chunkDelta struct {
	Content          nullString      `json:"content"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ToolCalls        []chunkToolCall `json:"tool_calls"`
}

type chunkToolCall struct {
	Index    *int64     `json:"index"`
	ID       nullString `json:"id"`
	Function struct {
		Name      nullString `json:"name"`
		Arguments nullString `json:"arguments"`
	} `json:"function"`
}

// nullString reads a JSON string, and null or a missing field as "".
type nullString string

func (s *nullString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = ""
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = nullString(v)
	return nil
}

// post sends one request to path under the API base and returns the
// response when its status is below 400. Otherwise rec holds the status,
// headers and up to 64 KiB of the error body, and the error says so.
func (b *OpenAI) post(ctx context.Context, method, path string, body any, rec *capture) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+"/"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if b.key != "" {
		req.Header.Set("Authorization", "Bearer "+b.key)
	}
	res, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	rec.status, rec.header = res.StatusCode, res.Header
	if res.StatusCode >= 400 {
		rec.body, _ = io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		return nil, fmt.Errorf("%s %s: %s", method, path, res.Status)
	}
	return res, nil
}

// capture keeps the status, headers and error body of the last response:
// servers' error bodies differ (vLLM's top-level message, numeric codes,
// Ollama's plain string), and retry.go reads them.
type capture struct {
	status int
	header http.Header
	body   []byte
}

// openStream starts a streamed completion.
func (b *OpenAI) openStream(ctx context.Context, req *chatRequest, rec *capture) *ssestream.Stream[chatChunk] {
	res, err := b.post(ctx, http.MethodPost, "chat/completions", req, rec)
	if err != nil {
		return ssestream.NewStream[chatChunk](nil, err)
	}
	return ssestream.NewStream[chatChunk](ssestream.NewDecoder(res), nil)
}

// modelEntry is one model of GET /models, with its raw JSON for the
// fields servers add (see contextFromModel).
type modelEntry struct {
	ID  string
	Raw json.RawMessage
}

// maxModelsBody bounds what a server's model list may make us read.
const maxModelsBody = 8 << 20

// listModels is GET /models.
func (b *OpenAI) listModels(ctx context.Context, rec *capture) ([]modelEntry, error) {
	res, err := b.post(ctx, http.MethodGet, "models", nil, rec)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, maxModelsBody+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxModelsBody {
		return nil, errors.New("the model list is larger than 8 MiB")
	}
	if err := json.Unmarshal(data, &page); err != nil {
		return nil, fmt.Errorf("the model list is not a list of models: %v", err)
	}
	out := make([]modelEntry, 0, len(page.Data))
	for _, raw := range page.Data {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		out = append(out, modelEntry{ID: m.ID, Raw: raw})
	}
	return out, nil
}
