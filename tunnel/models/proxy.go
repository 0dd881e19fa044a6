// Package models is the desktop's model endpoint for hosts that cannot
// reach a model themselves: an OpenAI-compatible HTTP proxy that the
// keeper serves on a socket forwarded from each host over its SSH
// connection (as it does the approval socket). It forwards a host's
// requests to one of the desktop's backends (OpenAI, OpenRouter, a vLLM or
// llama.cpp server on the desktop's network, the desktop's own Ollama),
// adding the API key here: the key never reaches a host.
//
// It passes a streamed reply through as it comes, cancels the upstream
// request when the host's goes away (a cancelled turn, a dropped tunnel),
// caps what each host may spend (requests at once per host, tokens per
// run), and counts usage per host and per run.
//
// What it trusts: the host only as the SSH connection its requests come
// over (Handler is given the host's name by the keeper), and within the
// host only its olliesrv, which proves itself with the key the keeper gave
// it for that connection (Authorization: Bearer, hex). The socket on the
// host is sshd's, so no peer credentials say who connects, and Landlock
// does not stop a sandboxed tool connecting to it: without the key a
// request is refused before it costs the upstream anything. The run a request
// names (X-Ollie-Run) is the host's word, good for accounting and for a
// run's budget, never for another host's: a host that lies about its run
// still meets its own per-host cap. Requests are bounded in size; only the
// chat and models endpoints pass.
package models

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Upstream is the desktop's backend that hosts' requests go to.
type Upstream struct {
	Name string // the desktop's name for it, for messages
	// URL is its OpenAI-compatible API base, ending in /v1.
	URL string
	// Key is the bearer token added here. It is never logged, never
	// sent to a host, and a host's own Authorization is dropped.
	Key string
}

// Limits cap what a host spends.
type Limits struct {
	// Concurrent is how many requests one host may have upstream at
	// once; 0 means DefaultConcurrent.
	Concurrent int
	// RunTokens caps the tokens (prompt and completion) of one run, as
	// the requests' X-Ollie-Run names it, across its hosts; 0: no cap.
	RunTokens int
}

// DefaultConcurrent is a host's requests at once when Limits says nothing.
const DefaultConcurrent = 4

// MaxRequest bounds a request's body: a conversation and its tools.
const MaxRequest = 32 << 20

// RunHeader names the run a request is for: the session's name.
const RunHeader = "X-Ollie-Run"

// Usage counts requests and tokens.
type Usage struct {
	Requests         int `json:"requests"`          // chat requests sent upstream
	Refused          int `json:"refused,omitempty"` // by a cap
	Failed           int `json:"failed,omitempty"`  // the upstream failed or the host went away
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// Denied counts requests without the key of the host's olliesrv: a
	// daemon that has not been given it yet, or another process on the
	// host (a tool) trying the socket. Counted for the host only, never
	// for the run the request names.
	Denied int `json:"denied,omitempty"`
}

// Tokens is prompt and completion tokens together.
func (u Usage) Tokens() int { return u.PromptTokens + u.CompletionTokens }

// A Proxy forwards hosts' requests to one upstream.
type Proxy struct {
	Upstream Upstream
	Limits   Limits
	Log      *slog.Logger
	// Client reaches the upstream; nil means a transport of its own
	// that takes proxies from the desktop's environment.
	Client *http.Client

	once     sync.Once
	mu       sync.Mutex
	key      string // SetKey's, in place of Upstream.Key once set
	inflight map[string]int
	hosts    map[string]*Usage
	runs     map[string]*Usage
	warned   map[string]bool // host and kind ("no key", "wrong key") of the denials logged
}

func (p *Proxy) init() {
	p.once.Do(func() {
		p.inflight, p.hosts, p.runs, p.warned = map[string]int{}, map[string]*Usage{}, map[string]*Usage{}, map[string]bool{}
		if p.Client == nil {
			p.Client = &http.Client{Transport: &http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				TLSHandshakeTimeout:   10 * time.Second,
				IdleConnTimeout:       90 * time.Second,
				MaxIdleConnsPerHost:   64,
				ForceAttemptHTTP2:     true,
				ResponseHeaderTimeout: 10 * time.Minute, // a model may think long before its first byte
			}}
		}
		if p.Log == nil {
			p.Log = slog.New(slog.DiscardHandler)
		}
	})
}

// SetKey replaces the upstream's key for the requests from now on (a
// rotated key given to the keeper again).
func (p *Proxy) SetKey(key string) {
	p.init()
	p.mu.Lock()
	p.key = key
	p.mu.Unlock()
}

func (p *Proxy) upstreamKey() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.key != "" {
		return p.key
	}
	return p.Upstream.Key
}

// UsageOf returns what a host has used, and a run.
func (p *Proxy) UsageOf(host string) Usage {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.hosts[host]; u != nil {
		return *u
	}
	return Usage{}
}

// RunUsage returns what a run has used across its hosts.
func (p *Proxy) RunUsage(run string) Usage {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.runs[run]; u != nil {
		return *u
	}
	return Usage{}
}

// Runs returns every run's usage.
func (p *Proxy) Runs() map[string]Usage {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]Usage{}
	for k, v := range p.runs {
		out[k] = *v
	}
	return out
}

// Handler serves the requests of one host, named by the keeper from the
// connection they come over, that carry key (Authorization: Bearer, the
// key in hex): the key the keeper gave that host's olliesrv. With an empty
// key no request passes.
func (p *Proxy) Handler(host string, key []byte) http.Handler {
	p.init()
	want := []byte("Bearer " + hex.EncodeToString(key))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.admit(host, len(key) > 0, want, w, r) {
			return
		}
		p.serve(host, w, r)
	})
}

// admit lets through a request that carries the host daemon's key, and
// refuses any other before it is read further: 503 when it has none (a
// daemon that has just started is given the key within a second, and its
// backend retries a 503), 401 when it has another. A refusal reaches no
// upstream and counts no usage but Denied.
func (p *Proxy) admit(host string, keyed bool, want []byte, w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	if keyed && subtle.ConstantTimeCompare([]byte(auth), want) == 1 {
		return true
	}
	kind := "wrong key"
	if auth == "" {
		kind = "no key"
	}
	p.mu.Lock()
	first := !p.warned[host+"\x00"+kind]
	p.warned[host+"\x00"+kind] = true
	p.mu.Unlock()
	p.count(host, "", func(u *Usage) { u.Denied++ })
	const who = "only the host's olliesrv, with the key the desktop's keeper gave it, may use the desktop's model on this socket"
	if auth == "" {
		if first {
			p.Log.Warn("ollie-remote: refused a model request without the key of the host's olliesrv (a daemon not yet given it, or another process on the host); further ones are counted, not logged", "host", host)
		}
		apiError(w, http.StatusServiceUnavailable, "unauthorized",
			who+"; this request has no key (an olliesrv that has just started is given it within a second: ask again)")
		return false
	}
	if first {
		p.Log.Warn("ollie-remote: refused a model request with a key that is not the one the host's olliesrv was given (another process on the host?); further ones are counted, not logged", "host", host)
	}
	apiError(w, http.StatusUnauthorized, "unauthorized", who+"; this request's key is not that one")
	return false
}

// apiError answers as OpenAI-compatible servers do, so that the host's
// client shows the message to the model and the person.
func apiError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg, "type": kind}})
}

func (p *Proxy) count(host, run string, f func(u *Usage)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range []struct {
		m   map[string]*Usage
		key string
	}{{p.hosts, host}, {p.runs, run}} {
		if m.key == "" {
			continue
		}
		u := m.m[m.key]
		if u == nil {
			u = &Usage{}
			m.m[m.key] = u
		}
		f(u)
	}
}

func (p *Proxy) serve(host string, w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	chat := r.Method == http.MethodPost && path == "/v1/chat/completions"
	list := r.Method == http.MethodGet && (path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"))
	if !chat && !list {
		apiError(w, http.StatusNotFound, "not_found", fmt.Sprintf("the desktop's model endpoint serves POST /v1/chat/completions and GET /v1/models, not %s %s", r.Method, path))
		return
	}
	run := r.Header.Get(RunHeader)
	if len(run) > 128 {
		run = run[:128]
	}
	// Caps first: a refused request costs the upstream nothing.
	concurrent := p.Limits.Concurrent
	if concurrent <= 0 {
		concurrent = DefaultConcurrent
	}
	p.mu.Lock()
	if chat && p.inflight[host] >= concurrent {
		p.mu.Unlock()
		p.count(host, run, func(u *Usage) { u.Refused++ })
		apiError(w, http.StatusTooManyRequests, "rate_limit_exceeded",
			fmt.Sprintf("the desktop allows %d model requests at once from %s; this one waits for another to end", concurrent, host))
		return
	}
	if ru := p.runs[run]; chat && run != "" && p.Limits.RunTokens > 0 && ru != nil && ru.Tokens() >= p.Limits.RunTokens {
		spent := ru.Tokens()
		p.mu.Unlock()
		p.count(host, run, func(u *Usage) { u.Refused++ })
		apiError(w, http.StatusForbidden, "budget_exceeded",
			fmt.Sprintf("the desktop's token budget for run %s is spent (%d of %d tokens): no more model requests for it; finish with what you have", run, spent, p.Limits.RunTokens))
		return
	}
	if chat {
		p.inflight[host]++
	}
	p.mu.Unlock()
	if chat {
		defer func() {
			p.mu.Lock()
			p.inflight[host]--
			p.mu.Unlock()
		}()
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequest))
	if err != nil {
		apiError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request is more than %d bytes", MaxRequest))
		return
	}
	stream := false
	if chat {
		if body, stream, err = withUsage(body); err != nil {
			apiError(w, http.StatusBadRequest, "invalid_request_error", "the request is not a JSON object: "+err.Error())
			return
		}
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, strings.TrimRight(p.Upstream.URL, "/")+strings.TrimPrefix(path, "/v1"), bytes.NewReader(body))
	if err != nil {
		apiError(w, http.StatusBadGateway, "upstream_error", err.Error())
		return
	}
	up.URL.RawQuery = r.URL.RawQuery
	up.Header.Set("Content-Type", "application/json")
	up.Header.Set("Accept", r.Header.Get("Accept"))
	key := p.upstreamKey()
	if key != "" {
		up.Header.Set("Authorization", "Bearer "+key)
	}
	if chat {
		p.count(host, run, func(u *Usage) { u.Requests++ })
	}
	resp, err := p.Client.Do(up)
	if err != nil {
		p.count(host, run, func(u *Usage) { u.Failed++ })
		if r.Context().Err() != nil {
			return // the host went away: nobody to answer
		}
		p.Log.Warn("ollie-remote: the desktop's model backend failed", "host", host, "backend", p.Upstream.Name, "err", redact(err, key))
		apiError(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("the desktop's backend %s did not answer: %v", p.Upstream.Name, redact(err, key)))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After", "Retry-After-Ms"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	u, err := relay(w, resp.Body, stream)
	p.count(host, run, func(c *Usage) {
		c.PromptTokens += u.PromptTokens
		c.CompletionTokens += u.CompletionTokens
		if err != nil {
			c.Failed++
		}
	})
}

// redact keeps the key out of an error that might quote the request.
func redact(err error, key string) string {
	s := err.Error()
	if key != "" {
		s = strings.ReplaceAll(s, key, "[key]")
	}
	return s
}

// withUsage asks a streamed reply for its usage (stream_options), so that
// it can be counted, and says whether the request streams.
func withUsage(body []byte) ([]byte, bool, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, false, err
	}
	var stream bool
	json.Unmarshal(req["stream"], &stream)
	if !stream {
		return body, false, nil
	}
	opts := map[string]json.RawMessage{}
	json.Unmarshal(req["stream_options"], &opts)
	opts["include_usage"] = json.RawMessage("true")
	b, _ := json.Marshal(opts)
	req["stream_options"] = b
	out, err := json.Marshal(req)
	return out, true, err
}

// relay copies a reply to the host as it comes, flushing each piece, and
// reads the usage it reports: the last "usage" of a stream's events, or
// the reply's own.
func relay(w http.ResponseWriter, body io.Reader, stream bool) (Usage, error) {
	f, _ := w.(http.Flusher)
	var u Usage
	if !stream {
		var buf bytes.Buffer
		_, err := io.Copy(w, io.TeeReader(io.LimitReader(body, 64<<20), &buf))
		u = usageOf(buf.Bytes())
		return u, err
	}
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long event passes through in pieces; its usage, if
			// any, is not read.
			if _, werr := w.Write(line); werr != nil {
				return u, werr
			}
			continue
		}
		if len(line) > 0 {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && bytes.Contains(data, []byte(`"usage"`)) {
				if got := usageOf(data); got.Tokens() > 0 {
					u = got
				}
			}
			if _, werr := w.Write(line); werr != nil {
				return u, werr
			}
			if f != nil && (len(bytes.TrimSpace(line)) == 0 || br.Buffered() == 0) {
				f.Flush()
			}
		}
		if err == io.EOF {
			if f != nil {
				f.Flush()
			}
			return u, nil
		}
		if err != nil {
			return u, err
		}
	}
}

func usageOf(b []byte) Usage {
	var v struct {
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(bytes.TrimSpace(b), &v) != nil || v.Usage == nil {
		return Usage{}
	}
	return Usage{PromptTokens: v.Usage.PromptTokens, CompletionTokens: v.Usage.CompletionTokens}
}

// Serve serves a host's requests on ln until it closes or ctx ends: those
// that carry key, which the keeper gives the host's olliesrv (Handler).
func (p *Proxy) Serve(ctx context.Context, host string, ln net.Listener, key []byte) error {
	srv := &http.Server{Handler: p.Handler(host, key), ReadHeaderTimeout: 30 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
