package backend

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
)

// TestSocketBackend: a backend with a socket sends every request there,
// with the run's name; while nothing serves the socket a request is
// retried, and goes through once it is served again (a keeper that
// reconnected), its error saying what is missing meanwhile.
func TestSocketBackend(t *testing.T) {
	llm := fakellm.Start(t)
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "models.sock")
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
