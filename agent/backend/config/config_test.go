package config

import (
	"strings"
	"testing"
)

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"default": "a", "backends": {"a": {"type": "ollama", "url": "http://h:1", "model": "m", "context": 4096}}}`))
	f.Add([]byte(`{"backends": {"b": {"type": "openai", "key_env": "K"}}}`))
	f.Add([]byte("{\n\"backends\": {\"a\": {\"type\": \"openai\",}}}"))
	f.Add([]byte(`{"backends": {"a": {"context": 1e99}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fc, err := parseFile("/x/backends.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "backend: /x/backends.json:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, c := range fc.backends {
			if c.Type != TypeOpenAI && c.Type != TypeOllama || c.Context < 0 || !nameRE.MatchString(c.Name) {
				t.Fatalf("accepted %+v", c)
			}
		}
	})
}
