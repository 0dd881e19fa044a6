package models_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/tunnel/models"
)

// TestModelRules: models.yaml is read strictly, each error naming the
// file's line; a host's choice is -model-via, else its inventory var,
// else the first rule it matches, else its own backends.
func TestModelRules(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		f := filepath.Join(dir, "models.yaml")
		os.WriteFile(f, []byte(text), 0600)
		return f
	}
	for text, want := range map[string]string{
		"- hosts: web*\n  via: desktop\n  modle: x\n":      `:3: unknown key "modle"`,
		"- via: desktop\n":                                 ":1: a rule names hosts: or group:",
		"- hosts: a\n  group: b\n  via: host\n":            ":1: a rule names hosts: or group:",
		"- hosts: web*\n  via: laptop\n":                   `:1: via "laptop": want host, desktop or desktop:BACKEND`,
		"- hosts: '[web'\n  via: host\n":                   `:1: hosts "[web"`,
		"- group: g\n  via: desktop\n  run_tokens: -1\n":   ":1: concurrent and run_tokens are counts",
		"hosts: web*\n":                                    ":1: want a list of rules",
		"- hosts: web*\n  via: desktop\n  concurrent: x\n": ":1: ",
	} {
		f := write(text)
		if _, err := models.LoadRules(f); err == nil || !strings.Contains(err.Error(), f+want) {
			t.Errorf("%q: %v, want an error containing %q", text, err, f+want)
		}
	}
	if rules, err := models.LoadRules(filepath.Join(dir, "missing.yaml")); err != nil || rules != nil {
		t.Errorf("a missing file: %v %v", rules, err)
	}
	f := write(`# where hosts' agents get their model
- hosts: "db*"
  via: host
- group: airgapped
  via: desktop:openrouter
  model: qwen
  run_tokens: 1000
- hosts: "*"
  via: desktop
`)
	rules, err := models.LoadRules(f)
	if err != nil || len(rules) != 3 {
		t.Fatalf("rules: %v %v", rules, err)
	}
	var flags models.Choice
	for _, tt := range []struct {
		host   string
		groups []string
		vars   map[string]string
		via    string
		model  string
	}{
		{"db1", []string{"airgapped"}, nil, "host", ""},
		{"web1", []string{"airgapped"}, nil, "desktop:openrouter", "qwen"},
		{"web2", nil, nil, "desktop", ""},
		{"web3", []string{"airgapped"}, map[string]string{"ollie_model_via": "host"}, "host", ""},
		{"web4", nil, map[string]string{"ollie_model_via": "desktop:local", "ollie_model": "m2"}, "desktop:local", "m2"},
	} {
		got := models.Choose(tt.host, tt.groups, tt.vars, flags, rules, f)
		if got.Via != tt.via || got.Model != tt.model {
			t.Errorf("%s: via %q model %q (%s), want %q %q", tt.host, got.Via, got.Model, got.Why, tt.via, tt.model)
		}
	}
	flags = models.Choice{Via: "desktop:x", Model: "m"}
	if got := models.Choose("db1", nil, map[string]string{"ollie_model_via": "host"}, flags, rules, f); got.Via != "desktop:x" || got.Why != "-model-via" {
		t.Errorf("-model-via does not win: %+v", got)
	}
}
