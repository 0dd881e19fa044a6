package models

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// rig is a host's view of the proxy: an HTTP client over the Unix socket
// the proxy serves, as the forwarded socket is on a host.
type rig struct {
	llm   *fakellm.Server
	proxy *Proxy
	sock  string
	key   []byte // the host daemon's, which the keeper gave it
	logs  *nstest.SyncBuffer
}

func newRig(t *testing.T, limits Limits) *rig {
	llm := fakellm.Start(t)
	llm.RequireKey("sk-desktop-secret")
	logs := &nstest.SyncBuffer{}
	p := &Proxy{Upstream: Upstream{Name: "desk", URL: llm.URL + "/v1", Key: "sk-desktop-secret"}, Limits: limits,
		Log: slog.New(slog.NewTextHandler(logs, nil))}
	dir, err := os.MkdirTemp("", "models")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &rig{llm: llm, proxy: p, sock: filepath.Join(dir, "m.sock"), key: make([]byte, 32), logs: logs}
	rand.Read(r.key)
	ln, err := net.Listen("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Serve(ctx, "web1", ln, r.key) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// client is the host's olliesrv: it sends the key the keeper gave it.
func (r *rig) client() *http.Client {
	return &http.Client{Transport: withAuth{"Bearer " + hex.EncodeToString(r.key), r.bare().Transport}}
}

// bare is any other process on the host: it sends no key of its own.
func (r *rig) bare() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.sock)
	}}}
}

type withAuth struct {
	auth string
	rt   http.RoundTripper
}

func (a withAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", a.auth)
	return a.rt.RoundTrip(req)
}

func (r *rig) chat(ctx context.Context, run string, stream bool) (*http.Response, error) {
	body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://desktop/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if run != "" {
		req.Header.Set(RunHeader, run)
	}
	return r.client().Do(req)
}

func errorMessage(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e struct{ Error struct{ Message string } }
	json.NewDecoder(resp.Body).Decode(&e)
	return e.Error.Message
}

// TestKeyAddedHere: the upstream gets the desktop's key and never the
// host's Authorization (the host daemon's key); the reply streams through as it comes, the first
// piece long before the last; usage is counted for the host and the run.
func TestKeyAddedHere(t *testing.T) {
	r := newRig(t, Limits{})
	r.llm.Push(fakellm.Response{Text: []string{"one ", "two ", "three ", "four"}, Delay: 300 * time.Millisecond,
		Usage: &fakellm.Usage{PromptTokens: 11, CompletionTokens: 4}})
	start := time.Now()
	resp, err := r.chat(context.Background(), "fleet-r1", true)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat: %v %v", err, resp)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"content":"one `) && first == 0 {
			first = time.Since(start)
		}
		text.WriteString(line)
	}
	total := time.Since(start)
	if first == 0 || first > total-500*time.Millisecond {
		t.Errorf("the first piece came at %s of %s: the stream was held back", first, total)
	}
	reqs := r.llm.Requests()
	last := reqs[len(reqs)-1]
	if got := last.Header.Get("Authorization"); got != "Bearer sk-desktop-secret" || strings.Contains(string(last.Body), hex.EncodeToString(r.key)) {
		t.Errorf("the upstream got Authorization %q", got)
	}
	if !strings.Contains(string(last.Body), `"include_usage":true`) {
		t.Errorf("a streamed request was not asked for its usage: %s", last.Body)
	}
	if u := r.proxy.UsageOf("web1"); u.Requests != 1 || u.PromptTokens != 11 || u.CompletionTokens != 4 {
		t.Errorf("web1's usage: %+v", u)
	}
	if u := r.proxy.RunUsage("fleet-r1"); u.Tokens() != 15 {
		t.Errorf("the run's usage: %+v", u)
	}
}

// TestCancelReachesUpstream: a host that gives up on a reply (a cancelled
// turn, a dropped tunnel) ends the upstream request.
func TestCancelReachesUpstream(t *testing.T) {
	r := newRig(t, Limits{})
	r.llm.Push(fakellm.Hang("thinking"))
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := r.chat(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	await.Until(t, 5*time.Second, "the upstream request ending after the host gave up", func() bool { return r.llm.Abandoned() > 0 })
}

// TestCaps: past its requests at once, a host is refused with a message
// saying why (and may retry); past a run's token budget, the run is
// refused for good, another run is not.
func TestCaps(t *testing.T) {
	r := newRig(t, Limits{Concurrent: 1, RunTokens: 50})
	r.llm.Push(fakellm.Hang("slow"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hung, err := r.chat(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Body.Close()
	io.ReadAtLeast(hung.Body, make([]byte, 8), 8)
	resp, err := r.chat(context.Background(), "", false)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(errorMessage(t, resp), "1 model requests at once from web1") {
		t.Fatalf("a second request at once: %v %v", err, resp)
	}
	cancel()
	hung.Body.Close()
	await.Until(t, 5*time.Second, "the cancelled request no longer counting as upstream", func() bool {
		r.proxy.mu.Lock()
		defer r.proxy.mu.Unlock()
		return r.proxy.inflight["web1"] == 0
	})

	r.llm.Push(fakellm.Response{Text: []string{"spent"}, Usage: &fakellm.Usage{PromptTokens: 40, CompletionTokens: 20}})
	if resp, err := r.chat(context.Background(), "fleet-big", false); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a request once the other ended: %v %v", err, resp)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	resp, err = r.chat(context.Background(), "fleet-big", false)
	if err != nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(errorMessage(t, resp), "token budget for run fleet-big is spent (60 of 50 tokens)") {
		t.Errorf("a run past its budget: %v %v", err, resp)
	}
	r.llm.Push(fakellm.Text("fine"))
	if resp, err := r.chat(context.Background(), "fleet-other", false); err != nil || resp.StatusCode != 200 {
		t.Errorf("another run was refused: %v %v", err, resp)
	}
	if u := r.proxy.UsageOf("web1"); u.Refused != 2 {
		t.Errorf("web1's refusals: %+v", u)
	}
}

// TestOnlyTheModelAPI: other paths and methods are refused, whatever the
// host asks.
func TestOnlyTheModelAPI(t *testing.T) {
	r := newRig(t, Limits{})
	for _, c := range []struct{ method, path string }{{"GET", "/v1/files"}, {"DELETE", "/v1/models/m"}, {"POST", "/v1/../../admin"}, {"GET", "/"}} {
		req, _ := http.NewRequest(c.method, "http://desktop"+c.path, nil)
		resp, err := r.client().Do(req)
		if err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %v %v", c.method, c.path, err, resp)
		}
	}
	if n := len(r.llm.Requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	resp, err := r.client().Get("http://desktop/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /v1/models: %v %v", err, resp)
	}
}

// TestConcurrentHostsCounted: usage from many requests at once adds up.
func TestConcurrentHostsCounted(t *testing.T) {
	r := newRig(t, Limits{Concurrent: 8})
	r.llm.Respond(func(*fakellm.ChatRequest) fakellm.Response {
		return fakellm.Response{Text: []string{"ok"}, Usage: &fakellm.Usage{PromptTokens: 3, CompletionTokens: 2}}
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := r.chat(context.Background(), "fleet-x", true); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if u := r.proxy.RunUsage("fleet-x"); u.Requests != 8 || u.Tokens() != 40 {
		t.Errorf("the run's usage after 8 requests: %+v", u)
	}
}

// TestOnlyTheHostDaemon: a process on the host other than its olliesrv (a
// sandboxed tool that connects to the socket) gets nothing: without a key
// 503 with a Retry-After (what a daemon not yet given the key gets, and
// retries), with another key 401. Neither reaches the upstream nor counts
// as usage, the host's or its run's; each kind is logged once per host,
// and counted as denied. The daemon's key passes.
func TestOnlyTheHostDaemon(t *testing.T) {
	r := newRig(t, Limits{})
	other := make([]byte, 32)
	rand.Read(other)
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"", http.StatusServiceUnavailable},
		{"", http.StatusServiceUnavailable},
		{"Bearer " + hex.EncodeToString(other), http.StatusUnauthorized},
		{"Bearer sk-desktop-secret", http.StatusUnauthorized},
		{"Bearer " + hex.EncodeToString(r.key[:16]), http.StatusUnauthorized},
		{"Bearer " + strings.ToUpper(hex.EncodeToString(r.key)) + "0", http.StatusUnauthorized},
		{hex.EncodeToString(r.key), http.StatusUnauthorized},
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/models", "/v1/files"} {
			method := "POST"
			if path != "/v1/chat/completions" {
				method = "GET"
			}
			req, _ := http.NewRequest(method, "http://desktop"+path, strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"spend"}]}`))
			req.Header.Set(RunHeader, "fleet-r")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := r.bare().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg := errorMessage(t, resp)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(msg, "only the host's olliesrv, with the key the desktop's keeper gave it, may use") {
				t.Errorf("%s %s with Authorization %q: %d %q, want %d", method, path, c.auth, resp.StatusCode, msg, c.status)
			}
			if ra := resp.Header.Get("Retry-After"); (c.status == http.StatusServiceUnavailable) != (ra != "") {
				t.Errorf("%s %s with Authorization %q: Retry-After %q", method, path, c.auth, ra)
			}
		}
	}
	if n := len(r.llm.Requests()); n != 0 {
		t.Errorf("%d requests without the key reached the upstream", n)
	}
	if u := r.proxy.UsageOf("web1"); u.Requests != 0 || u.Tokens() != 0 || u.Refused != 0 || u.Denied != 21 {
		t.Errorf("web1's usage after refusals: %+v, want 21 denied and nothing else", u)
	}
	if u := r.proxy.RunUsage("fleet-r"); u != (Usage{}) {
		t.Errorf("the run's usage after refusals: %+v", u)
	}
	logs := r.logs.String()
	if n := strings.Count(logs, "refused a model request"); n != 2 || !strings.Contains(logs, "host=web1") {
		t.Errorf("%d log lines for the refusals, want one per kind:\n%s", n, logs)
	}
	if strings.Contains(logs, hex.EncodeToString(r.key)) || strings.Contains(logs, hex.EncodeToString(other)) {
		t.Errorf("a key is in the log:\n%s", logs)
	}

	r.llm.Push(fakellm.Text("yours"))
	resp, err := r.chat(context.Background(), "fleet-r", false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the daemon's request: %v %v", err, resp)
	}
	resp.Body.Close()
	if u := r.proxy.UsageOf("web1"); u.Requests != 1 || u.Denied != 21 {
		t.Errorf("web1's usage: %+v", u)
	}

	// Served without a key, nothing passes, not even an empty one.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://desktop/v1/models", nil)
	req.Header.Set("Authorization", "Bearer ")
	r.proxy.Handler("web2", nil).ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || len(r.llm.Requests()) != 1 {
		t.Errorf("a handler without a key let an empty one through: %d", rec.Code)
	}
}
