package backend_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
)

// env is an environment for LoadEnv; a "backends.json" entry is written to
// $XDG_CONFIG_HOME/ollie/backends.json in a temporary directory.
func load(t *testing.T, env map[string]string) (*backend.Registry, error) {
	t.Helper()
	dir := t.TempDir()
	if _, ok := env["XDG_CONFIG_HOME"]; !ok {
		env["XDG_CONFIG_HOME"] = dir
	}
	if file, ok := env["backends.json"]; ok {
		path := filepath.Join(env["XDG_CONFIG_HOME"], "ollie", "backends.json")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func TestEnvironmentOnly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		names   []string
		def     string
		configs map[string]backend.Config
	}{
		{
			name:  "nothing set: Ollama at its default address",
			env:   map[string]string{},
			names: []string{"ollama"}, def: "ollama",
			configs: map[string]backend.Config{"ollama": {Type: "ollama", URL: "http://127.0.0.1:11434", Source: "default"}},
		},
		{
			name:  "OPENAI_API_KEY",
			env:   map[string]string{"OPENAI_API_KEY": "sk-1", "OPENAI_MODEL": "gpt-4.1"},
			names: []string{"ollama", "openai"}, def: "openai",
			configs: map[string]backend.Config{"openai": {Type: "openai", URL: "https://api.openai.com/v1", KeyEnv: "OPENAI_API_KEY", Model: "gpt-4.1", Source: "OPENAI_API_KEY"}},
		},
		{
			name:  "OPENAI_BASE_URL without a key: a local server",
			env:   map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"},
			names: []string{"ollama", "openai"}, def: "openai",
			configs: map[string]backend.Config{"openai": {Type: "openai", URL: "http://127.0.0.1:8000/v1", KeyEnv: "OPENAI_API_KEY", Source: "OPENAI_BASE_URL"}},
		},
		{
			name:  "OLLAMA_HOST",
			env:   map[string]string{"OLLAMA_HOST": "gpu1:11500", "OLLAMA_MODEL": "qwen3:8b"},
			names: []string{"ollama"}, def: "ollama",
			configs: map[string]backend.Config{"ollama": {Type: "ollama", URL: "http://gpu1:11500", Model: "qwen3:8b", Source: "OLLAMA_HOST"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := load(t, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Names(), tc.names) || r.DefaultName() != tc.def || r.Default().Name() != tc.def {
				t.Fatalf("names %q default %q", r.Names(), r.DefaultName())
			}
			for name, want := range tc.configs {
				want.Name = name
				if got, _ := r.Config(name); got != want {
					t.Errorf("%s: %+v, want %+v", name, got, want)
				}
			}
			if len(r.Warnings()) != 0 {
				t.Errorf("warnings %q", r.Warnings())
			}
		})
	}
}

func TestOllamaHost(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1":                    "http://127.0.0.1:11434",
		"0.0.0.0":                      "http://127.0.0.1:11434",
		":11500":                       "http://127.0.0.1:11500",
		"gpu1":                         "http://gpu1:11434",
		"gpu1:8080":                    "http://gpu1:8080",
		"http://gpu1":                  "http://gpu1:80",
		"https://ollama.example.com":   "https://ollama.example.com:443",
		"http://10.0.0.5:11434/":       "http://10.0.0.5:11434",
		"https://proxy.example/ollama": "https://proxy.example:443/ollama",
		"[::1]:11434":                  "http://[::1]:11434",
	} {
		r, err := load(t, map[string]string{"OLLAMA_HOST": in})
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if c, _ := r.Config("ollama"); c.URL != want {
			t.Errorf("OLLAMA_HOST=%q: %q, want %q", in, c.URL, want)
		}
	}
	for _, bad := range []string{"ftp://x", "host:99999", "host:port"} {
		if _, err := load(t, map[string]string{"OLLAMA_HOST": bad}); err == nil || !strings.Contains(err.Error(), "OLLAMA_HOST") {
			t.Errorf("OLLAMA_HOST=%q: %v", bad, err)
		}
	}
	if _, err := load(t, map[string]string{"OPENAI_BASE_URL": "localhost:8000"}); err == nil || !strings.Contains(err.Error(), "OPENAI_BASE_URL") {
		t.Errorf("bad OPENAI_BASE_URL: %v", err)
	}
}

const twoBackends = `{
  "default": "local",
  "backends": {
    "local": {"type": "ollama", "url": "http://127.0.0.1:11434", "model": "qwen3:8b", "context": 32768},
    "openrouter": {"type": "openai", "url": "https://openrouter.ai/api/v1", "key_env": "OPENROUTER_API_KEY", "model": "qwen/qwen3-coder"}
  }
}`

func TestBackendsFile(t *testing.T) {
	dir := t.TempDir()
	r, err := load(t, map[string]string{
		"XDG_CONFIG_HOME": dir, "backends.json": twoBackends,
		"OPENROUTER_API_KEY": "sk-or", "OPENAI_API_KEY": "sk-1", "OLLAMA_HOST": "gpu1",
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ollie", "backends.json")
	if r.Path() != path {
		t.Fatalf("path %q", r.Path())
	}
	if !slices.Equal(r.Names(), []string{"local", "ollama", "openai", "openrouter"}) || r.DefaultName() != "local" {
		t.Fatalf("names %q default %q", r.Names(), r.DefaultName())
	}
	want := backend.Config{Name: "local", Type: "ollama", URL: "http://127.0.0.1:11434", Model: "qwen3:8b", Context: 32768, Source: path}
	if c, _ := r.Config("local"); c != want {
		t.Fatalf("local: %+v", c)
	}
	b, err := r.Get("openrouter")
	if err != nil || b.Name() != "openrouter" || b.DefaultModel() != "qwen/qwen3-coder" {
		t.Fatalf("openrouter: %v %v", b, err)
	}
	if _, err := r.Get("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "local, ollama, openai, openrouter") {
		t.Fatalf("unknown backend: %v", err)
	}
	if c, _ := r.Config("ollama"); c.URL != "http://gpu1:11434" {
		t.Fatalf("OLLAMA_HOST beside the file: %+v", c)
	}

	// One backend needs no default; an Ollama backend without a url
	// follows OLLAMA_HOST; the file's names win over the environment's.
	r, err = load(t, map[string]string{
		"backends.json":  `{"backends": {"ollama": {"type": "ollama", "model": "llama3.2"}}}`,
		"OLLAMA_HOST":    "gpu2:9999",
		"OPENAI_API_KEY": "sk-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := r.Config("ollama"); r.DefaultName() != "ollama" || c.URL != "http://gpu2:9999" || c.Model != "llama3.2" || c.Source != r.Path() {
		t.Fatalf("default %q, ollama %+v", r.DefaultName(), c)
	}
}

func TestBackendsFileKeyFromEnvironment(t *testing.T) {
	s := fakellm.Start(t)
	s.RequireKey("sk-or")
	file := `{"backends": {"router": {"type": "openai", "url": "` + s.URL + `/v1", "key_env": "ROUTER_KEY", "model": "m"}}}`
	r, err := load(t, map[string]string{"backends.json": file, "ROUTER_KEY": "sk-or", "OPENAI_API_KEY": "sk-not-this"})
	if err != nil {
		t.Fatal(err)
	}
	s.Push(fakellm.Text("ok"))
	if _, err := r.Default().Chat(context.Background(), hello, nil, backend.Params{}, nil); err != nil {
		t.Fatal(err)
	}
	if h := s.Requests()[0].Header.Get("Authorization"); h != "Bearer sk-or" {
		t.Fatalf("Authorization %q", h)
	}

	r, err = load(t, map[string]string{"backends.json": file})
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Warnings(); len(w) != 1 || !strings.Contains(w[0], "backends.router.key_env: ROUTER_KEY is not set") {
		t.Fatalf("warnings %q", w)
	}
}

func TestOpenAIKeyOnlyForOpenAI(t *testing.T) {
	s := fakellm.Start(t)
	file := `{"backends": {"vllm": {"type": "openai", "url": "` + s.URL + `/v1", "model": "m"}}}`
	r, err := load(t, map[string]string{"backends.json": file, "OPENAI_API_KEY": "sk-secret"})
	if err != nil {
		t.Fatal(err)
	}
	s.Push(fakellm.Text("ok"))
	b, _ := r.Get("vllm")
	if _, err := b.Chat(context.Background(), hello, nil, backend.Params{}, nil); err != nil {
		t.Fatal(err)
	}
	if h := s.Requests()[0].Header.Get("Authorization"); h != "" {
		t.Fatalf("OPENAI_API_KEY went to a third party: %q", h)
	}
	r, _ = load(t, map[string]string{"backends.json": `{"backends": {"gpt": {"type": "openai"}}}`})
	if c, _ := r.Config("gpt"); c.URL != backend.DefaultOpenAIURL || c.KeyEnv != "OPENAI_API_KEY" {
		t.Fatalf("OpenAI's own API: %+v", c)
	}
}

func TestBackendsFileErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`{"backends": {"a": {"type": "openai", "kee_env": "X"}}}`, `:1: backends.a.kee_env: unknown field`},
		{`{"backends": {"a": {"type": "openai", "key": "sk-123"}}}`, `backends.a.key: API keys are not kept in this file`},
		{`{"backends": {"a": {"type": "anthropic"}}}`, `backends.a.type: unknown type "anthropic"`},
		{`{"backends": {"a": {"url": "http://x"}}}`, `backends.a.type: missing`},
		{`{"backends": {"a": {"type": "ollama", "url": "localhost:11434"}}}`, `backends.a.url: "localhost:11434": want an http:// or https:// URL`},
		{`{"backends": {"a": {"type": "ollama", "context": "big"}}}`, `backends.a.context: want a positive whole number of tokens, got "big"`},
		{`{"backends": {"a": {"type": "ollama", "context": 3.5}}}`, `backends.a.context: want a positive whole number`},
		{`{"backends": {"a": {"type": "ollama", "context": -1}}}`, `backends.a.context: want a positive whole number`},
		{`{"backends": {"a": {"type": "openai", "key_env": "MY KEY"}}}`, `backends.a.key_env: "MY KEY" is not an environment variable's name`},
		{`{"backends": {"a": {"type": 7}}}`, `backends.a.type: want a string, got 7`},
		{`{"backends": {"a b": {"type": "openai"}}}`, `backends.a b: bad backend name`},
		{`{"backends": {"a": {"type": "openai"}, "a": {"type": "ollama"}}}`, `backends.a: given twice`},
		{`{"backends": []}`, `backends: want an object`},
		{`{"backend": {}}`, `backend: unknown field (want default, backends)`},
		{`{"default": "b", "backends": {"a": {"type": "openai"}}}`, `default: no backend named "b" (have a, ollama)`},
		{`{"backends": {"a": {"type": "openai"}, "b": {"type": "openai"}}}`, `default: missing; the file names 2 backends`},
		{"{\n  \"backends\": {\n    \"a\": {\"type\": \"openai\",}\n  }\n}", `:3: backends: invalid JSON: invalid character`},
		{"{\n  \"backends\": {\n    \"a\": {\"type\": \"openai\"},\n    \"b\": {\"type\": \"openai\", \"modle\": \"x\"}}}", `:4: backends.b.modle: unknown field`},
		{`{"backends": {}`, `invalid JSON: unexpected end of file`},
		{`{"backends": {}} {}`, `unexpected data after the object`},
		{``, `invalid JSON`},
	} {
		_, err := load(t, map[string]string{"backends.json": tc.file})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "backends.json") || !strings.HasPrefix(err.Error(), "backend: ") {
			t.Errorf("%s:\n got %v\nwant …%s", tc.file, err, tc.want)
		}
	}
}

func TestHomeConfigPath(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, ".config", "ollie", "backends.json")
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, []byte(`{"backends": {"x": {"type": "openai", "url": "http://127.0.0.1:1/v1"}}}`), 0o644)
	r, err := backend.LoadEnv(func(k string) (string, bool) {
		if k == "HOME" {
			return home, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Path() != path || r.DefaultName() != "x" {
		t.Fatalf("path %q default %q", r.Path(), r.DefaultName())
	}
}
