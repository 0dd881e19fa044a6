package agent

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckModel(t *testing.T) {
	for _, name := range []string{
		"m", "qwen2.5:7b", "llama3.1:8b-instruct-q4_K_M", "openai/gpt-4o", "meta-llama/Llama-3.1-8B-Instruct",
		"hf.co/unsloth/Qwen3-GGUF:Q4_K_M", "claude-3-5-sonnet@20240620", "gpt-4o+tools", "a..b", "x/..y",
		strings.Repeat("m", MaxModelLen),
	} {
		if err := CheckModel(name); err != nil {
			t.Errorf("CheckModel(%q) = %v, want nil", name, err)
		}
	}
	for name, why := range map[string]string{
		"":                         "it is empty",
		strings.Repeat("m", 5000):  "it has 5000 characters",
		strings.Repeat("m", 201):   "it has 201 characters",
		"/etc/passwd":              "it starts with /",
		"..":                       "it has a .. element",
		"../../etc/passwd":         "it has a .. element",
		"qwen/../../../etc/shadow": "it has a .. element",
		"qwen/..":                  "it has a .. element",
		"qwen 7b":                  `' ' is not allowed`,
		"m\n":                      `'\n' is not allowed`,
		"m\x1b[2J":                 `'\x1b' is not allowed`,
		"m;reboot":                 `';' is not allowed`,
		"m$HOME":                   `'$' is not allowed`,
		"m\\x":                     `'\\' is not allowed`,
		"ünïcode":                  `'ü' is not allowed`,
		"gpt\u202e4o":              `'\u202e' is not allowed`,
	} {
		err := CheckModel(name)
		if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), modelRule) {
			t.Errorf("CheckModel(%.50q) = %v, want ErrBadModel saying %q and what is allowed", name, err, why)
		}
		if err != nil && len(err.Error()) > 100+len(modelRule) {
			t.Errorf("CheckModel(%.50q): the error is %d bytes long: %.100s", name, len(err.Error()), err)
		}
	}
}
