package backend

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

// chatapi.go's types stand in for openai-go's so that olliesrv does not
// link all of openai-go. These tests hold them to openai-go: the same
// conversation sent through openai-go's own client and through the
// backend must reach the server as the same JSON, and every chunk must
// read the same through openai-go's ChatCompletionChunk as through ours.

// wireConversation exercises every field the backend sends.
func wireConversation() ([]Message, []Tool, Params) {
	temp := 0.25
	msgs := []Message{
		{Role: RoleSystem, Content: "be brief"},
		{Role: RoleUser, Content: "list /tmp"},
		{Role: RoleAssistant, Content: "", ToolCalls: []ToolCall{
			{ID: "call_1", Name: "shell", Args: json.RawMessage(`{"cmd":"ls /tmp"}`)},
			{ID: "call_2", Name: "read", Args: json.RawMessage(`"not an object"`), ArgsError: "a JSON string"},
		}},
		{Role: RoleTool, Content: "a\nb", ToolCallID: "call_1"},
		{Role: RoleTool, Content: "", ToolCallID: "call_2"},
		{Role: RoleAssistant, Content: "two files"},
		{Role: RoleAssistant, Content: ""},
		{Role: RoleUser, Content: `quote " and \ and é`},
	}
	tools := []Tool{
		{Name: "shell", Description: "run a command", Parameters: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string","description":"the command"}},"required":["cmd"],"additionalProperties":false}`)},
		{Name: "noargs"},
		{Name: "nullargs", Description: "", Parameters: json.RawMessage(`null`)},
	}
	return msgs, tools, Params{MaxTokens: 512, Temperature: &temp}
}

// openaiParams maps the conversation with openai-go's own types, the way
// the backend did before chatapi.go.
func openaiParams(t *testing.T, model string, msgs []Message, tools []Tool, p Params, official bool) openai.ChatCompletionNewParams {
	t.Helper()
	params := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	for _, m := range msgs {
		switch m.Role {
		case RoleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case RoleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Args)
				if tc.ArgsError != "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	for _, tl := range tools {
		fd := shared.FunctionDefinitionParam{Name: tl.Name}
		if tl.Description != "" {
			fd.Description = param.NewOpt(tl.Description)
		}
		fd.Parameters = shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
		if len(tl.Parameters) > 0 {
			var top map[string]json.RawMessage
			if err := json.Unmarshal(tl.Parameters, &top); err != nil {
				t.Fatal(err)
			}
			fd.Parameters = shared.FunctionParameters{}
			for k, v := range top {
				fd.Parameters[k] = v
			}
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if official {
		params.MaxCompletionTokens = param.NewOpt(int64(p.MaxTokens))
	} else {
		params.MaxTokens = param.NewOpt(int64(p.MaxTokens))
	}
	params.Temperature = param.NewOpt(*p.Temperature)
	return params
}

// bodies is a server that records request bodies and answers with sse.
type bodies struct {
	mu   sync.Mutex
	got  [][]byte
	auth []string
}

func (b *bodies) serve(sse string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.got = append(b.got, body)
		b.auth = append(b.auth, r.Header.Get("Authorization"))
		b.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sse)
	}
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

func TestWireMatchesOpenAIGo(t *testing.T) {
	sse := "data: " + `{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	var rec bodies
	srv := httptest.NewServer(rec.serve(sse))
	defer srv.Close()

	msgs, tools, p := wireConversation()
	b, err := NewOpenAI(Config{Name: "t", Type: TypeOpenAI, URL: srv.URL + "/v1", Model: "m1"}, "sk-wire")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Chat(context.Background(), msgs, tools, p, nil); err != nil {
		t.Fatal(err)
	}
	chat := openai.NewChatCompletionService(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-wire"), option.WithMaxRetries(0))
	st := chat.NewStreaming(context.Background(), openaiParams(t, "m1", msgs, tools, p, false))
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	st.Close()

	if len(rec.got) != 2 {
		t.Fatalf("%d requests, want 2", len(rec.got))
	}
	ours, theirs := jsonValue(t, rec.got[0]), jsonValue(t, rec.got[1])
	if !reflect.DeepEqual(ours, theirs) {
		t.Errorf("the backend sent\n%s\nopenai-go sends\n%s", rec.got[0], rec.got[1])
	}
	if rec.auth[0] != rec.auth[1] {
		t.Errorf("Authorization %q, openai-go sends %q", rec.auth[0], rec.auth[1])
	}
	// Mapped the old way, max_completion_tokens goes to api.openai.com only.
	req, err := (&OpenAI{base: "https://api.openai.com/v1"}).request("m1", msgs, tools, p)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(req)
	want, _ := json.Marshal(openaiParams(t, "m1", msgs, tools, p, true))
	got := jsonValue(t, data).(map[string]any)
	delete(got, "stream") // openai-go adds it as it sends
	if w := jsonValue(t, want); !reflect.DeepEqual(got, w) {
		t.Errorf("for api.openai.com the backend sends\n%s\nopenai-go\n%s", data, want)
	}
}

// wireChunks are chunks as servers send them, odd ones included.
var wireChunks = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"thinking"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":"also"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":42}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"shell","arguments":""}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"cmd\":"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_b","function":{"name":"read","arguments":"{}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":null,"id":null,"function":{"name":null,"arguments":null}}]}}]}`,
	`{"choices":[{"index":1,"delta":{"content":"other choice"}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}`,
	`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`,
	`{"choices":[{"index":0,"delta":{"content":"é\u00e9 \"q\""},"logprobs":null}],"system_fingerprint":"x"}`,
}

// readTheirs is what the backend read from a chunk when it used
// openai-go's type.
func readTheirs(c openai.ChatCompletionChunk) map[string]any {
	out := map[string]any{"usage": nil}
	if c.JSON.Usage.Valid() {
		out["usage"] = [2]int64{c.Usage.PromptTokens, c.Usage.CompletionTokens}
	}
	var choices []any
	for _, ch := range c.Choices {
		reasoning := ""
		for _, k := range [...]string{"reasoning_content", "reasoning"} {
			if f, ok := ch.Delta.JSON.ExtraFields[k]; ok {
				var s string
				if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
					reasoning = s
					break
				}
			}
		}
		var calls []any
		for _, tc := range ch.Delta.ToolCalls {
			calls = append(calls, []any{tc.JSON.Index.Valid(), tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		choices = append(choices, []any{ch.Index, ch.Delta.Content, reasoning, calls, ch.FinishReason})
	}
	out["choices"] = choices
	return out
}

func readOurs(c chatChunk) map[string]any {
	out := map[string]any{"usage": nil}
	if c.Usage != nil {
		out["usage"] = [2]int64{c.Usage.PromptTokens, c.Usage.CompletionTokens}
	}
	var choices []any
	for _, ch := range c.Choices {
		var calls []any
		for _, tc := range ch.Delta.ToolCalls {
			var index int64
			if tc.Index != nil {
				index = *tc.Index
			}
			calls = append(calls, []any{tc.Index != nil, index, string(tc.ID), string(tc.Function.Name), string(tc.Function.Arguments)})
		}
		choices = append(choices, []any{ch.Index, string(ch.Delta.Content), reasoningOf(ch.Delta), calls, string(ch.FinishReason)})
	}
	out["choices"] = choices
	return out
}

func TestChunksReadAsOpenAIGoReadsThem(t *testing.T) {
	for _, raw := range wireChunks {
		var theirs openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(raw), &theirs); err != nil {
			t.Fatalf("openai-go: %v: %s", err, raw)
		}
		var ours chatChunk
		if err := json.Unmarshal([]byte(raw), &ours); err != nil {
			t.Fatalf("ours: %v: %s", err, raw)
		}
		if a, b := readOurs(ours), readTheirs(theirs); !reflect.DeepEqual(a, b) {
			t.Errorf("%s\nread as %v\nopenai-go reads %v", raw, a, b)
		}
	}

	// The whole stream, through both clients, gives one reply.
	var sse strings.Builder
	for _, c := range wireChunks {
		sse.WriteString("data: " + c + "\n\n")
	}
	sse.WriteString("data: [DONE]\n\n")
	var rec bodies
	srv := httptest.NewServer(rec.serve(sse.String()))
	defer srv.Close()
	b, err := NewOpenAI(Config{Name: "t", Type: TypeOpenAI, URL: srv.URL + "/v1", Model: "m1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	reply, err := b.Chat(context.Background(), []Message{{Role: RoleUser, Content: "hi"}}, nil, Params{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Message.Content != `Hel`+`é`+`é "q"` || reply.FinishReason != "tool_calls" || reply.Usage != (Usage{PromptTokens: 12, CompletionTokens: 7}) {
		t.Errorf("reply %+v", reply)
	}
	if n := len(reply.Message.ToolCalls); n != 2 || reply.Message.ToolCalls[0].Name != "shell" || reply.Message.ToolCalls[1].ID != "call_b" {
		t.Errorf("tool calls %+v", reply.Message.ToolCalls)
	}
}
