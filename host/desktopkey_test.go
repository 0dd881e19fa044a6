package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"9fans.net/go/plan9/client"
	"ollie/agent/backend"
	"ollie/internal/nstest"
	"ollie/ns"
)

// TestDesktopKey: the owner gives a socket backend its key through the
// root ctl, and the backend's requests to that socket carry it from then
// on, a backend made later (after ctl invalidate) too. No one else may
// give one; a bad request is refused without the key in the error.
func TestDesktopKey(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_DATA", data) // the agent profiles
	d, fs := modelDaemon(t, &twoStep{})
	sock := filepath.Join(nstest.ShortTempDir(t), "models.sock")
	got := serveModels(t, sock)
	t.Cleanup(func() { backend.SetSocketKey(sock, nil) })
	auth := func() string {
		t.Helper()
		b, err := backend.NewOpenAI(backend.Config{Name: "desktop", Type: backend.TypeOpenAI, URL: "http://desktop/v1", Socket: sock}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Models(context.Background()); err != nil {
			t.Fatal(err)
		}
		return got()
	}
	if a := auth(); a != "" {
		t.Fatalf("before any key the socket got Authorization %q", a)
	}

	key := make([]byte, 32)
	rand.Read(key)
	h := hex.EncodeToString(key)
	if out, err := nstest.RdWr(fs, "ctl", "desktop-key "+sock+" "+h); err != nil || out != "ok\n" {
		t.Fatalf("desktop-key: %q %v", out, err)
	}
	if a := auth(); a != "Bearer "+h {
		t.Errorf("after desktop-key the socket got Authorization %q", a)
	}
	if _, err := nstest.RdWr(fs, "ctl", "invalidate"); err != nil {
		t.Fatal(err)
	}
	if a := auth(); a != "Bearer "+h {
		t.Errorf("after invalidate the socket got Authorization %q", a)
	}

	// Not an agent's tool, not a sandboxed peer without a capability,
	// not none.
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 32)
	rand.Read(other)
	for who, peer := range map[string]*client.Fsys{
		"the agent's tool": attachAgent(t, d, strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/a/id"))),
		"mallory":          attachPeer(t, d, ns.Sandboxed, "mallory", ""),
		"none":             attachPeer(t, d, ns.Remote, "none", ""),
	} {
		if _, err := nstest.RdWr(peer, "ctl", "desktop-key "+sock+" "+hex.EncodeToString(other)); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s gave a key: %v", who, err)
		}
	}
	if a := auth(); a != "Bearer "+h {
		t.Errorf("after others tried, the socket got Authorization %q", a)
	}

	for _, bad := range []struct{ req, hexIn, want string }{
		{"desktop-key relative.sock " + hex.EncodeToString(other), hex.EncodeToString(other), "not absolute"},
		{"desktop-key " + sock + " " + hex.EncodeToString(other[:15]), hex.EncodeToString(other[:15]), "not 32 to 128 hex digits"},
		{"desktop-key " + sock + " " + hex.EncodeToString(other) + "0", hex.EncodeToString(other), "not 32 to 128 hex digits"},
		{"desktop-key " + sock + " " + strings.Repeat(hex.EncodeToString(other), 3), hex.EncodeToString(other), "not 32 to 128 hex digits"},
		{"desktop-key " + sock + " zz" + hex.EncodeToString(other), hex.EncodeToString(other), "not 32 to 128 hex digits"},
		{"desktop-key " + hex.EncodeToString(other), hex.EncodeToString(other), "want PATH HEX"},
		{"desktop-key", "", "want PATH HEX"},
	} {
		_, err := nstest.RdWr(fs, "ctl", bad.req)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%.40s…: %v, want %q", bad.req, err, bad.want)
		}
		if err != nil && bad.hexIn != "" && strings.Contains(err.Error(), bad.hexIn[:16]) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
	if a := auth(); a != "Bearer "+h {
		t.Errorf("after bad requests the socket got Authorization %q", a)
	}
	if out, err := nstest.RdWr(fs, "ctl", "help"); err != nil || !strings.Contains(out, "desktop-key") {
		t.Errorf("ctl help: %q %v", out, err)
	}
}

// serveModels answers GET /v1/models on sock, and returns a function
// saying the Authorization of the last request.
func serveModels(t *testing.T, sock string) func() string {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		last = r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[]}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}
