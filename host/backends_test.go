package host

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/internal/nstest"
)

// TestImplicitOllamaNotConfigured (issue 31, item 6): the ollama no one
// configured, with no Ollama at its default address, is shown in
// backends and models as not configured, not as a broken backend with an
// error; a backend the person configured that does not answer still
// shows its error.
func TestImplicitOllamaNotConfigured(t *testing.T) {
	if c, err := net.DialTimeout("tcp", "127.0.0.1:11434", time.Second); err == nil {
		c.Close()
		t.Skip("something listens at Ollama's default address, 127.0.0.1:11434")
	}
	conf := t.TempDir()
	os.MkdirAll(filepath.Join(conf, "ollie"), 0700)
	// The person's own backend, where nothing answers either.
	file := `{"backends": {"mine": {"type": "openai", "url": "http://127.0.0.1:1/v1", "model": "m"}}}`
	if err := os.WriteFile(filepath.Join(conf, "ollie", "backends.json"), []byte(file), 0600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"XDG_CONFIG_HOME": conf}
	reg, err := backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	d, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	fs := nstest.Attach(t, d.Socket, "")

	note := "(not configured: no Ollama at " + backend.DefaultOllamaURL + ";"
	backends := nstest.ReadFile(t, fs, "backends")
	if !strings.HasPrefix(backends, "mine\topenai\thttp://127.0.0.1:1/v1\tm\n") ||
		!strings.Contains(backends, "\nollama\tollama\t"+backend.DefaultOllamaURL+"\t\t"+note) {
		t.Errorf("backends = %q, want mine first and ollama marked not configured", backends)
	}
	models := nstest.ReadFile(t, fs, "models")
	if !strings.Contains(models, "ollama\t"+note) || strings.Contains(models, "ollama\t(unavailable") {
		t.Errorf("models = %q, want ollama not configured and no error for it", models)
	}
	if !strings.Contains(models, "mine\t(unavailable: ") {
		t.Errorf("models = %q, want the configured backend's error", models)
	}

	// Configured by OLLAMA_HOST, an Ollama that does not answer is
	// broken, and says why.
	env["OLLAMA_HOST"] = "127.0.0.1:1"
	if reg, err = backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	d2, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.Shutdown(context.Background()) })
	fs2 := nstest.Attach(t, d2.Socket, "")
	if got := nstest.ReadFile(t, fs2, "models"); !strings.Contains(got, "ollama\t(unavailable: ") || strings.Contains(got, "not configured") {
		t.Errorf("models with OLLAMA_HOST = %q, want ollama unavailable with its error", got)
	}
	if got := nstest.ReadFile(t, fs2, "backends"); strings.Contains(got, "not configured") {
		t.Errorf("backends with OLLAMA_HOST = %q", got)
	}
}
