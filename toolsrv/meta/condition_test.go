package meta

import (
	"strings"
	"testing"
)

// TestNewCondition holds the words a variant's "match" and a skill's "when"
// both report for a condition that cannot hold.
func TestNewCondition(t *testing.T) {
	tests := []struct {
		key, value string
		want       string // "" when valid
	}{
		{"binary", "journalctl", ""},
		{"binary", "/usr/bin/rg", ""},
		{"binary", "bin/x", `"bin/x" (expected a bare name looked up in PATH, or an absolute path)`},
		{"binary", "", `"" (expected a bare name looked up in PATH, or an absolute path)`},
		{"file", "/var/log/syslog", ""},
		{"file", "var/log", `"var/log" (expected an absolute path)`},
		{"os", "linux", ""},
		{"os", "linxu", `unknown "linxu" (expected a GOOS: ` + strings.Join(knownOS, ", ") + `)`},
		{"arch", "arm64", ""},
		{"arch", "x64", `unknown "x64" (expected a GOARCH: ` + strings.Join(knownArch, ", ") + `)`},
		{"env", "DISPLAY", ""},
		{"env", "A=B", `"A=B" (expected an environment variable name)`},
		{"nenv", "", `"" (expected an environment variable name)`},
		{"bin", "x", `unknown key "bin" (expected binary, file, os, arch, env, nenv)`},
		{"Binary", "x", `unknown key "Binary" (expected binary, file, os, arch, env, nenv); did you mean "binary"?`},
	}
	for _, tt := range tests {
		c, err := NewCondition(tt.key, tt.value)
		switch {
		case tt.want == "" && (err != nil || c != (Condition{tt.key, tt.value})):
			t.Errorf("NewCondition(%q, %q) = %v, %v; want the condition", tt.key, tt.value, c, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("NewCondition(%q, %q) error = %v, want %s", tt.key, tt.value, err, tt.want)
		}
	}
	if got := strings.Join(MatchKeys(), ","); got != "binary,file,os,arch,env,nenv" {
		t.Errorf("MatchKeys() = %s", got)
	}
}
