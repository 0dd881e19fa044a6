package fakellm_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"ollie/agent/fakellm"
)

// post sends a chat request and returns the response.
func post(t *testing.T, s *fakellm.Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// events reads a stream's data lines up to [DONE], decoding each as a map.
func events(t *testing.T, res *http.Response) (out []map[string]any, done bool, err error) {
	t.Helper()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not a data line: %q", line)
		}
		if data == "[DONE]" {
			return out, true, nil
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		out = append(out, m)
	}
	return out, false, sc.Err()
}

func deltaOf(ev map[string]any) map[string]any {
	chs := ev["choices"].([]any)
	if len(chs) == 0 {
		return nil
	}
	return chs[0].(map[string]any)["delta"].(map[string]any)
}

const streamReq = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`

func TestTextStream(t *testing.T) {
	s := fakellm.Start(t)
	s.Push(fakellm.Text("Hel", "lo"))
	res := post(t, s, streamReq)
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	evs, done, err := events(t, res)
	if err != nil || !done {
		t.Fatalf("stream ended done=%v err=%v", done, err)
	}
	var text string
	var finish any
	var usage any
	for _, ev := range evs {
		if d := deltaOf(ev); d != nil {
			if c, ok := d["content"].(string); ok {
				text += c
			}
			finish = ev["choices"].([]any)[0].(map[string]any)["finish_reason"]
		}
		if u, ok := ev["usage"]; ok {
			usage = u
		}
		if ev["id"] != "chatcmpl-fake1" || ev["object"] != "chat.completion.chunk" {
			t.Errorf("chunk id/object: %v %v", ev["id"], ev["object"])
		}
	}
	if text != "Hello" || finish != "stop" || usage == nil {
		t.Fatalf("text %q finish %v usage %v", text, finish, usage)
	}
	reqs := s.ChatRequests()
	if len(reqs) != 1 || reqs[0].Model != "m" || reqs[0].Messages[0].Text() != "hi" || !reqs[0].Stream {
		t.Fatalf("recorded %+v", reqs)
	}
	if h := s.Requests()[0].Header.Get("Authorization"); h != "Bearer sk-test" {
		t.Fatalf("Authorization %q", h)
	}
}

func TestParallelToolCallsStreamInFragments(t *testing.T) {
	s := fakellm.Start(t)
	s.Push(fakellm.ToolCalls(
		fakellm.Call{Name: "file_read", Args: `{"path": "/etc/hosts"}`},
		fakellm.Call{ID: "call_x", Name: "shell", Args: `{"cmd": "uname -a"}`},
	))
	evs, _, err := events(t, post(t, s, streamReq))
	if err != nil {
		t.Fatal(err)
	}
	type call struct{ id, name, args string }
	calls := map[float64]*call{}
	fragments := 0
	for _, ev := range evs {
		d := deltaOf(ev)
		if d == nil {
			continue
		}
		tcs, _ := d["tool_calls"].([]any)
		for _, x := range tcs {
			tc := x.(map[string]any)
			i := tc["index"].(float64)
			if calls[i] == nil {
				calls[i] = &call{}
			}
			fn := tc["function"].(map[string]any)
			if id, ok := tc["id"].(string); ok {
				calls[i].id = id
				calls[i].name = fn["name"].(string)
				if fn["arguments"] != "" {
					t.Errorf("first fragment carries arguments %q", fn["arguments"])
				}
				continue
			}
			fragments++
			calls[i].args += fn["arguments"].(string)
		}
	}
	if len(calls) != 2 || calls[0].name != "file_read" || calls[0].args != `{"path": "/etc/hosts"}` ||
		calls[1].id != "call_x" || calls[1].args != `{"cmd": "uname -a"}` || fragments < 4 {
		t.Fatalf("calls %+v %+v, %d fragments", calls[0], calls[1], fragments)
	}
}

func TestNonStreaming(t *testing.T) {
	s := fakellm.Start(t)
	s.Push(fakellm.ToolCall("shell", `{"cmd":"ls"}`))
	res := post(t, s, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].FinishReason != "tool_calls" || c.Choices[0].Message.Content != nil ||
		c.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"cmd":"ls"}` {
		t.Fatalf("%+v", c)
	}
}

func TestErrorsAndEmptyScript(t *testing.T) {
	s := fakellm.Start(t)
	s.Push(fakellm.RateLimited("7"), fakellm.ContextOverflow(fakellm.VLLM))
	res := post(t, s, streamReq)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "7" {
		t.Fatalf("status %d Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	res = post(t, s, streamReq)
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 400 || !strings.Contains(string(b), "maximum context length") {
		t.Fatalf("status %d body %s", res.StatusCode, b)
	}
	res = post(t, s, streamReq)
	b, _ = io.ReadAll(res.Body)
	if res.StatusCode != 500 || !strings.Contains(string(b), "script is empty (chat request 3)") {
		t.Fatalf("status %d body %s", res.StatusCode, b)
	}
}

func TestResetMidStream(t *testing.T) {
	s := fakellm.Start(t)
	s.Push(fakellm.Reset("partial"))
	evs, done, err := events(t, post(t, s, streamReq))
	if done || err == nil {
		t.Fatalf("stream finished: done=%v err=%v", done, err)
	}
	if len(evs) == 0 {
		t.Fatal("no chunk arrived before the reset")
	}
}

func TestRequireKey(t *testing.T) {
	s := fakellm.Start(t)
	s.RequireKey("sk-other")
	s.Push(fakellm.Text("x"))
	if res := post(t, s, streamReq); res.StatusCode != 401 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if s.Pending() != 1 {
		t.Fatal("a refused request consumed the script")
	}
}

func TestModelsTagsShow(t *testing.T) {
	s := fakellm.Start(t)
	s.SetModels(
		fakellm.Model{ID: "qwen3:8b", ContextLength: 40960, NumCtx: 8192, Extra: map[string]any{"max_model_len": 40960}},
		fakellm.Model{ID: "llama3.2:3b", ContextLength: 131072},
	)
	get := func(path string) map[string]any {
		res, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		return m
	}
	data := get("/v1/models")["data"].([]any)
	if len(data) != 2 || data[0].(map[string]any)["id"] != "qwen3:8b" || data[0].(map[string]any)["max_model_len"] != 40960.0 {
		t.Fatalf("/v1/models %v", data)
	}
	tags := get("/api/tags")["models"].([]any)
	if len(tags) != 2 || tags[1].(map[string]any)["name"] != "llama3.2:3b" {
		t.Fatalf("/api/tags %v", tags)
	}
	res, err := http.Post(s.URL+"/api/show", "application/json", strings.NewReader(`{"model":"qwen3:8b"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var show struct {
		Parameters string         `json:"parameters"`
		ModelInfo  map[string]any `json:"model_info"`
	}
	json.NewDecoder(res.Body).Decode(&show)
	if show.ModelInfo["fake.context_length"] != 40960.0 || !strings.Contains(show.Parameters, "num_ctx") {
		t.Fatalf("/api/show %+v", show)
	}
	res, _ = http.Post(s.URL+"/api/show", "application/json", strings.NewReader(`{"model":"nope"}`))
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("unknown model: status %d", res.StatusCode)
	}
}

func TestImmediate(t *testing.T) {
	s := fakellm.Start(t)
	s.SetImmediate("ok")
	for range 3 {
		evs, done, err := events(t, post(t, s, streamReq))
		if err != nil || !done || deltaOf(evs[0])["content"] != "ok" {
			t.Fatalf("done=%v err=%v evs=%v", done, err, evs)
		}
	}
	if s.Served() != 3 || len(s.Requests()) != 0 {
		t.Fatalf("served %d, recorded %d", s.Served(), len(s.Requests()))
	}
}

// TestRespond: with a responder, each request is answered from its own
// messages, whatever the script holds, until it is taken away.
func TestRespond(t *testing.T) {
	s := fakellm.Start(t)
	s.Push(fakellm.Text("scripted"))
	s.Respond(func(r *fakellm.ChatRequest) fakellm.Response {
		return fakellm.Text("you said " + r.Messages[len(r.Messages)-1].Text())
	})
	answer := func(said string) string {
		res := post(t, s, `{"model":"m","messages":[{"role":"user","content":"`+said+`"}]}`)
		var c struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
			t.Fatal(err)
		}
		return c.Choices[0].Message.Content
	}
	for _, said := range []string{"one", "two"} {
		if got := answer(said); got != "you said "+said {
			t.Errorf("answer to %q = %q", said, got)
		}
	}
	s.Respond(nil)
	if got := answer("three"); got != "scripted" {
		t.Errorf("after Respond(nil) the script answered %q, want its reply", got)
	}
}

// TestNewListener: a server on a listener made elsewhere answers there and
// closes it.
func TestNewListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := fakellm.NewListener(l)
	if s.URL != "http://"+l.Addr().String() {
		t.Fatalf("URL %q for %s", s.URL, l.Addr())
	}
	res, err := http.Get(s.URL + "/api/tags")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	s.Close()
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the listener is still open after Close")
	}
}
