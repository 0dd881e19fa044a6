package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/tunnel/models"
)

// socketPath is a path for a socket in a directory of its own, short
// enough for a Unix socket's name (t.TempDir's may not be).
func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "models.sock")
}

// TestSocketBackend: a backend with a socket sends every request there,
// with the run's name; while nothing serves the socket a request is
// retried, and goes through once it is served again (a keeper that
// reconnected), its error saying what is missing meanwhile.
func TestSocketBackend(t *testing.T) {
	llm := fakellm.Start(t)
	sock := socketPath(t)
	b, err := NewOpenAI(Config{Name: "desktop", Type: TypeOpenAI, URL: "http://desktop.invalid/v1", Socket: sock, Model: "m"}, "")
	if err != nil {
		t.Fatal(err)
	}
	slept := 0
	b.Sleep = func(ctx context.Context, d time.Duration) error {
		slept++
		if slept == 2 {
			// The keeper is back: the socket leads to the server.
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			go relay(ln, strings.TrimPrefix(llm.URL, "http://"))
		}
		return nil
	}
	llm.Push(fakellm.Text("through the socket"))
	reply, err := b.Chat(context.Background(), []Message{{Role: RoleUser, Content: "hi"}}, nil, Params{Run: "fleet-r1"}, nil)
	if err != nil || reply.Message.Content != "through the socket" {
		t.Fatalf("Chat: %v %+v", err, reply)
	}
	if slept != 2 {
		t.Errorf("%d retries while the socket was missing, want 2", slept)
	}
	reqs := llm.Requests()
	if got := reqs[len(reqs)-1].Header.Get(RunHeader); got != "fleet-r1" {
		t.Errorf("the run header reached the desktop as %q", got)
	}

	// Nobody ever serves it: the error says what is missing.
	os.Remove(sock)
	b2, _ := NewOpenAI(Config{Name: "desktop", Type: TypeOpenAI, URL: "http://desktop.invalid/v1", Socket: sock + ".none", Model: "m"}, "")
	b2.Sleep = func(context.Context, time.Duration) error { return nil }
	if _, err := b2.Chat(context.Background(), []Message{{Role: RoleUser, Content: "hi"}}, nil, Params{}, nil); err == nil || !strings.Contains(err.Error(), "the desktop's model is not connected to this host") {
		t.Errorf("with no socket: %v", err)
	}
}

// TestSocketKey: a socket backend sends the key stored for its socket,
// and none (not even its own key_env's) while none is stored; the key
// outlives the backend (ctl invalidate makes new ones) and appears in no
// error.
func TestSocketKey(t *testing.T) {
	llm := fakellm.Start(t)
	sock := socketPath(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go relay(ln, strings.TrimPrefix(llm.URL, "http://"))
	t.Cleanup(func() { SetSocketKey(sock, nil) })
	cfg := Config{Name: "desktop", Type: TypeOpenAI, URL: "http://desktop.invalid/v1", Socket: sock, Model: "m"}
	chat := func(want string) {
		t.Helper()
		b, err := NewOpenAI(cfg, "sk-the-hosts-own")
		if err != nil {
			t.Fatal(err)
		}
		llm.Push(fakellm.Text("ok"))
		if _, err := b.Chat(context.Background(), []Message{{Role: RoleUser, Content: "hi"}}, nil, Params{}, nil); err != nil {
			t.Fatal(err)
		}
		reqs := llm.Requests()
		if got, ok := reqs[len(reqs)-1].Header["Authorization"]; want == "" && ok || want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("the socket got Authorization %q, want %q", got, want)
		}
	}
	chat("")
	key := make([]byte, 32)
	rand.Read(key)
	SetSocketKey(sock, key)
	chat("Bearer " + hex.EncodeToString(key))
	// Another socket's key is not this one's.
	SetSocketKey(sock+".other", []byte("other"))
	chat("Bearer " + hex.EncodeToString(key))
	SetSocketKey(sock, nil)
	chat("")
}

// TestSocketKeyLate: before the daemon is given its key the desktop's
// proxy answers 503 with a Retry-After, and Chat asks again: once the key
// is set (the keeper gives it within a second of a new daemon answering)
// the turn goes through. A wrong key is refused for good, and the error
// does not quote it.
func TestSocketKeyLate(t *testing.T) {
	llm := fakellm.Start(t)
	sock := socketPath(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	p := &models.Proxy{Upstream: models.Upstream{Name: "desk", URL: llm.URL + "/v1"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Serve(ctx, "h", ln, key) }()
	defer func() { cancel(); <-done }()
	t.Cleanup(func() { SetSocketKey(sock, nil) })

	b, err := NewOpenAI(Config{Name: "desktop", Type: TypeOpenAI, URL: "http://desktop.invalid/v1", Socket: sock, Model: "m"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	b.Sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		SetSocketKey(sock, key)
		return nil
	}
	llm.Push(fakellm.Text("once given the key"))
	reply, err := b.Chat(context.Background(), []Message{{Role: RoleUser, Content: "hi"}}, nil, Params{}, nil)
	if err != nil || reply.Message.Content != "once given the key" {
		t.Fatalf("Chat: %v %+v", err, reply)
	}
	if len(waits) != 1 || waits[0] != time.Second {
		t.Errorf("waited %v before asking again, want the proxy's 1s once", waits)
	}
	if u := p.UsageOf("h"); u.Denied != 1 || u.Requests != 1 {
		t.Errorf("the proxy's count: %+v", u)
	}

	wrong := make([]byte, 32)
	rand.Read(wrong)
	SetSocketKey(sock, wrong)
	waits = nil
	b.Sleep = func(context.Context, time.Duration) error { waits = append(waits, 0); return nil }
	_, err = b.Chat(context.Background(), []Message{{Role: RoleUser, Content: "hi"}}, nil, Params{}, nil)
	if err == nil || !strings.Contains(err.Error(), "only the host's olliesrv") || len(waits) != 0 {
		t.Errorf("with a wrong key: %v, after %d retries", err, len(waits))
	}
	if err != nil && strings.Contains(err.Error(), hex.EncodeToString(wrong)) {
		t.Errorf("the error quotes the key: %v", err)
	}
}

// relay copies each connection on ln to addr: a stand-in for the SSH
// forward to the desktop's proxy.
func relay(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { copyConn(up, c) }()
			copyConn(c, up)
		}()
	}
}

func copyConn(dst, src net.Conn) {
	io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
