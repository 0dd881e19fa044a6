// Package fakellm is a scripted model server for tests: OpenAI-compatible
// and Ollama.
//
// A Server listens on 127.0.0.1 and answers POST /v1/chat/completions
// (server-sent events when the request says "stream": true, one JSON object
// otherwise), GET /v1/models, and Ollama's native API (ollama.go):
// GET /api/tags, POST /api/show, GET /api/ps and POST /api/chat, which
// truncates a prompt beyond its window silently, as Ollama does, and
// records what it dropped. Each chat request, on either API, plays the
// next Response of the script:
// text in several deltas, tool calls streamed in fragments as real servers
// send them, errors with the status codes and bodies real servers send, a
// connection reset mid-stream, a stream that hangs until the client goes.
// Every request is recorded so a test can assert on what its client sent.
//
// In immediate mode (SetImmediate) every chat request is answered at once
// with a fixed short text and nothing is recorded: that is the peer for
// benchmarks.
//
// Besides the standard library, the package uses only the types of
// Ollama's own Go package, github.com/ollama/ollama/api, and it links no
// testing package. It trusts its clients completely and is meant for
// tests, benchmarks and the scripted model of ollie-remote demo, never
// for production.
package fakellm

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// A Server is a scripted model server on a loopback port.
type Server struct {
	// URL is the server's root, e.g. "http://127.0.0.1:43127". OpenAI
	// clients use URL + "/v1"; Ollama clients use URL itself.
	URL string

	ts   *httptest.Server
	done chan struct{} // closed by Close: ends hanging responses

	mu        sync.Mutex
	script    []Response
	requests  []Request
	models    []Model
	key       string
	immediate *immediate // non-nil in immediate mode
	respond   func(*ChatRequest) Response
	served    int // chat requests answered
	gone      int // hanging responses whose client went away
	closeOnce sync.Once

	// Ollama (ollama.go)
	defaultCtx int            // num_ctx when nothing sets it; 0 is DefaultContext
	loaded     map[string]int // model → the num_ctx it runs with
	loads      map[string]int // model → times loaded
}

// A Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	Chat   *ChatRequest // the decoded body of a /v1 chat request; nil otherwise
	Ollama *OllamaChat  // a native /api/chat request; nil otherwise
}

// TB is the part of testing.TB that Start uses; *testing.T and *testing.B
// satisfy it. The package declares it rather than import testing so that a
// program (ollie-remote demo) can link fakellm without the testing package.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start starts a server on 127.0.0.1 with one model, "fake-model", and an
// empty script; tb's cleanup closes it. A server that cannot start fails tb.
func Start(tb TB) *Server {
	tb.Helper()
	s, err := New()
	if err != nil {
		tb.Fatalf("fakellm: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// New starts a server as Start does, for a program rather than a test: it
// returns the error of a server that cannot start, and the caller closes
// the server.
func New() (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return NewListener(l), nil
}

// NewListener starts a server on l, which it closes with the server: for
// a listener made elsewhere, e.g. on Ollama's own 127.0.0.1:11434 in a
// test's network namespace. URL is "http://" and l's address.
func NewListener(l net.Listener) *Server {
	s := &Server{
		done:   make(chan struct{}),
		models: []Model{{ID: "fake-model"}},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("GET /api/tags", s.tags)
	mux.HandleFunc("POST /api/show", s.show)
	mux.HandleFunc("GET /api/ps", s.ps)
	mux.HandleFunc("POST /api/chat", s.ollamaChat)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.record(r, nil, nil)
		writeError(w, http.StatusNotFound, "fakellm: no route for "+r.Method+" "+r.URL.Path)
	})
	// What httptest.NewServer does, on a listener whose error is ours to
	// return (NewServer panics).
	s.ts = &httptest.Server{Listener: l, Config: &http.Server{Handler: mux}}
	s.ts.Start()
	s.URL = s.ts.URL
	return s
}

// Close releases hanging responses and shuts the server down, waiting for
// requests in flight. It may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.ts.CloseClientConnections()
		s.ts.Close()
	})
}

// Push appends responses to the script; each chat request plays the next.
// A chat request that finds the script empty gets HTTP 500 saying so.
func (s *Server) Push(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, rs...)
}

// Pending is the number of responses not yet played.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// Requests returns a copy of every request received, in order of arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ChatRequests returns the /v1 chat requests received, in order of
// arrival.
func (s *Server) ChatRequests() []*ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*ChatRequest
	for _, r := range s.requests {
		if r.Chat != nil {
			out = append(out, r.Chat)
		}
	}
	return out
}

// Served is the number of chat requests answered, in any mode.
func (s *Server) Served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Abandoned is the number of hanging responses (Hang) whose client went
// away before the server closed.
func (s *Server) Abandoned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// SetModels replaces the models the server lists and describes.
func (s *Server) SetModels(ms ...Model) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]Model(nil), ms...)
}

// RequireKey makes every /v1 request without "Authorization: Bearer key"
// fail with HTTP 401 as OpenAI answers it. An empty key accepts anything.
func (s *Server) RequireKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// SetImmediate switches immediate mode on: every chat request is answered
// at once with text, streamed or not as asked, the script is ignored and
// nothing is recorded (only Served counts). An empty text switches it off.
func (s *Server) SetImmediate(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if text == "" {
		s.immediate = nil
		return
	}
	s.immediate = newImmediate(text)
}

// Respond answers every chat request with what f makes of it, in place
// of the script: for many agents talking at once (a fleet), whose
// requests come in no set order, each answer can follow from its own
// conversation. A native Ollama request reaches f in the same shape, with
// the messages left after truncation. f runs concurrently. nil goes back
// to the script.
func (s *Server) Respond(f func(*ChatRequest) Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = f
}

func (s *Server) record(r *http.Request, body []byte, chat *ChatRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{
		Method: r.Method,
		Path:   r.URL.Path,
		Header: r.Header.Clone(),
		Body:   body,
		Chat:   chat,
	})
}

// authorized reports whether r carries the key, answering 401 if not.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == "" || r.Header.Get("Authorization") == "Bearer "+key {
		return true
	}
	writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
		"message": "Incorrect API key provided.",
		"type":    "invalid_request_error",
		"param":   nil,
		"code":    "invalid_api_key",
	}})
	return false
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if im := s.takeImmediate(); im != nil {
		im.serve(w, body)
		return
	}

	var req ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.record(r, body, nil)
		writeError(w, http.StatusBadRequest, "fakellm: the request body is not JSON: "+err.Error())
		return
	}
	s.record(r, body, &req)
	if !s.authorized(w, r) {
		return
	}

	resp, n, ok := s.next(&req)
	if !ok {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("fakellm: the script is empty (chat request %d)", n))
		return
	}
	s.play(w, r, &req, len(body), n, resp)
}

// takeImmediate is the canned answer SetImmediate set, counted as
// served, or nil.
func (s *Server) takeImmediate() *immediate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.immediate != nil {
		s.served++
	}
	return s.immediate
}

// next counts a chat request in (n is its number, from 1) and takes its
// answer: Respond's, else the script's next; ok is false when the script
// is empty.
func (s *Server) next(req *ChatRequest) (resp Response, n int, ok bool) {
	s.mu.Lock()
	s.served++
	n = s.served
	respond := s.respond
	if respond == nil {
		defer s.mu.Unlock()
		if len(s.script) == 0 {
			return Response{}, n, false
		}
		resp, s.script = s.script[0], s.script[1:]
		return resp, n, true
	}
	s.mu.Unlock()
	return respond(req), n, true
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	s.record(r, nil, nil)
	if !s.authorized(w, r) {
		return
	}
	s.mu.Lock()
	models := s.models
	s.mu.Unlock()
	data := []map[string]any{}
	for _, m := range models {
		e := map[string]any{"id": m.ID, "object": "model", "created": 1700000000, "owned_by": "fakellm"}
		for k, v := range m.Extra {
			e[k] = v
		}
		data = append(data, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// A Model is one model the server offers.
type Model struct {
	ID string
	// ContextLength is the model's trained context, reported by /api/show
	// as model_info["fake.context_length"]; 0 leaves it out. The native
	// chat caps num_ctx at it, as Ollama does.
	ContextLength int
	// NumCtx is the num_ctx parameter of the model's Modelfile, reported by
	// /api/show in "parameters"; 0 leaves it out.
	NumCtx int
	// LoadLimit, if not 0, caps the num_ctx the model is loaded with
	// further, as a lack of memory would; /api/show does not say so,
	// /api/ps does.
	LoadLimit int
	// Extra fields of the model's /v1/models entry, e.g. "max_model_len"
	// as vLLM sends it or "context_length" as OpenRouter does.
	Extra map[string]any
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// writeError answers with an OpenAI-shaped error.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": "fakellm_error", "param": nil, "code": nil,
	}})
}
