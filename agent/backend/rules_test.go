package backend

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseErrorBody(t *testing.T) {
	for _, tc := range []struct {
		body     string
		message  string
		overflow bool
	}{
		{`{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, "This model's maximum context length is 8192 tokens.", true},
		{`{"error":{"message":"Request too large","code":"context_length_exceeded"}}`, "Request too large", true},
		{`{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5012 tokens","type":"BadRequestError","param":null,"code":400}`, "This model's maximum context length is 4096 tokens. However, you requested 5012 tokens", true},
		{`{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5012,"n_ctx":4096}}`, "the request exceeds the available context size, try increasing it", true},
		{`{"error":{"code":500,"message":"input is too large to process. increase the physical batch size","type":"server_error"}}`, "input is too large to process. increase the physical batch size", true},
		{`{"error":"the input length exceeds the context length"}`, "the input length exceeds the context length", true},
		{`{"error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, "prompt is too long: 210000 tokens > 200000 maximum", true},
		{`{"error":"Input validation error: ` + "`inputs` tokens + `max_new_tokens` must be <= 8192" + `"}`, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192", true},
		{`{"detail":"Not Found"}`, "Not Found", false},
		{`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "Rate limit reached", false},
		{"<html><body>502 Bad Gateway</body></html>", "<html><body>502 Bad Gateway</body></html>", false},
		{``, ``, false},
		{`{"error":null}`, `{"error":null}`, false},
		{`[1,2]`, `[1,2]`, false},
	} {
		se := parseErrorBody([]byte(tc.body))
		if se.message != tc.message || se.overflow() != tc.overflow {
			t.Errorf("%s:\n got %q overflow=%v\nwant %q overflow=%v", tc.body, se.message, se.overflow(), tc.message, tc.overflow)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"0"}}, 0},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, 1500 * time.Millisecond},
		{http.Header{"Retry-After": {"soon"}}, -1},
		{http.Header{"Retry-After": {"-3"}}, -1},
		{http.Header{}, -1},
	} {
		if got := parseRetryAfter(tc.h, now); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestTransientStatus(t *testing.T) {
	for s, want := range map[int]bool{408: true, 429: true, 500: true, 502: true, 503: true, 504: true, 529: true,
		400: false, 401: false, 403: false, 404: false, 413: false, 422: false, 501: false, 505: false} {
		if transientStatus(s) != want {
			t.Errorf("%d: transient %v", s, !want)
		}
	}
}

func TestTextToolCall(t *testing.T) {
	tools := []Tool{{Name: "shell"}, {Name: "file_read"}}
	for _, tc := range []struct {
		content string
		want    string // "" for none
	}{
		{`{"name": "shell", "arguments": {"cmd": "ls"}}`, "shell"},
		{"I'll check.\n```json\n{\"name\": \"file_read\", \"parameters\": {\"path\": \"/etc/hosts\"}}\n```", "file_read"},
		{`[{"name": "shell", "arguments": {"cmd": "ls"}}]`, "shell"},
		{`{"function": {"name": "shell", "arguments": "{}"}}`, "shell"},
		{`{"tool": "shell", "cmd": "ls"}`, "shell"},
		{"<tool_call>\n{\"name\": \"unknown_tool\", \"arguments\": {}}\n</tool_call>", "<tool_call>"},
		{"[TOOL_CALLS] [{\"name\": \"x\"}]", "[TOOL_CALLS]"},
		{"<|python_tag|>shell.call(cmd=\"ls\")", "<|python_tag|>"},
		{`The answer is {"name": "Ada", "age": 36}.`, ""},
		{`Use {"name": "shell"} braces {{ and } carefully {`, "shell"},
		{`plain text with a { brace`, ""},
		{"", ""},
	} {
		got := textToolCall(tc.content, tools)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want one naming %q", tc.content, got, tc.want)
		}
	}
}

func TestNormalizeArgs(t *testing.T) {
	for _, tc := range []struct {
		raw, args, problem string
	}{
		{`{"a": 1}`, `{"a": 1}`, ""},
		{`  {"a": 1}  `, `{"a": 1}`, ""},
		{``, `{}`, ""},
		{`null`, `{}`, ""},
		{`"{\"a\": 1}"`, `{"a": 1}`, ""},
		{`{"a": 1`, `"{\"a\": 1"`, "not valid JSON"},
		{`{'a': 1}`, `"{'a': 1}"`, "not valid JSON"},
		{`[1]`, `[1]`, "JSON array, not an object"},
		{`"ls"`, `"ls"`, "a JSON string, not an object"},
		{`42`, `42`, "JSON number, not an object"},
	} {
		args, problem := normalizeArgs(tc.raw)
		if string(args) != tc.args || !strings.Contains(problem, tc.problem) || (tc.problem == "") != (problem == "") || !json.Valid(args) {
			t.Errorf("%q: %s %q, want %s %q", tc.raw, args, problem, tc.args, tc.problem)
		}
	}
}

func FuzzParseErrorBody(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"m","code":"context_length_exceeded"}}`))
	f.Add([]byte(`{"object":"error","message":"m","code":400}`))
	f.Add([]byte(`{"error":"x"}`))
	f.Add([]byte(`<html>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		se := parseErrorBody(body)
		se.overflow()
		if len(se.message) > 1010 && !json.Valid(body) {
			t.Fatalf("message of %d bytes", len(se.message))
		}
	})
}
