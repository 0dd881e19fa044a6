package backend

import (
	"encoding/json"
	"fmt"
	"strings"
)

// textMarkers are the tags chat templates wrap tool calls in; in a reply's
// content they mean the server did not parse the model's call.
var textMarkers = []string{
	"<tool_call>",      // Hermes, Qwen
	"<|tool_call|>",    // Phi
	"<tool_calls>",     // several fine-tunes
	"<function=",       // Llama 3.1 custom format
	"<|python_tag|>",   // Llama 3.1 built-in tools
	"[TOOL_CALLS]",     // Mistral
	"<|tool▁call",      // DeepSeek
	"functools[",       // FireFunction
	"<|action_start|>", // InternLM
}

// textToolCall describes the tool call a reply's text seems to make
// instead of a real one, or returns "". It finds a tag from textMarkers,
// or a JSON object naming one of the offered tools:
// {"name": "shell", "arguments": {...}}, {"function": {"name": ...}},
// {"tool": "shell", ...}.
func textToolCall(content string, tools []Tool) string {
	if len(content) > 64<<10 {
		content = content[:64<<10]
	}
	offered := map[string]bool{}
	for _, t := range tools {
		offered[t.Name] = true
	}
	if name := jsonToolCall(content, offered); name != "" {
		return fmt.Sprintf("a call to tool %s", name)
	}
	for _, m := range textMarkers {
		if strings.Contains(content, m) {
			return fmt.Sprintf("what looks like a tool call (%s)", m)
		}
	}
	return ""
}

// jsonToolCall returns the offered tool named by the first JSON object in
// s that looks like a call, or "".
func jsonToolCall(s string, offered map[string]bool) string {
	for tries := 0; tries < 32; tries++ {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			return ""
		}
		s = s[i:]
		var obj map[string]json.RawMessage
		if json.NewDecoder(strings.NewReader(s)).Decode(&obj) == nil {
			if name := callName(obj); offered[name] {
				return name
			}
		}
		s = s[1:]
	}
	return ""
}

func callName(obj map[string]json.RawMessage) string {
	for _, k := range [...]string{"name", "tool", "tool_name", "function"} {
		raw, ok := obj[k]
		if !ok {
			continue
		}
		var name string
		if json.Unmarshal(raw, &name) == nil {
			return name
		}
		var fn struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &fn) == nil && fn.Name != "" {
			return fn.Name
		}
	}
	return ""
}
