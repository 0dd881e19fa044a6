package tool

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidName: ValidName is NameRule.
func TestValidName(t *testing.T) {
	re := regexp.MustCompile(NameRule)
	for _, s := range []string{"", "a", "fix_nginx", "system_logs_journald", "_x", "9a", "Fix", "a-b", "a b", "a.b", "é",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "sudo password for h5", "a\n"} {
		if got, want := ValidName(s), re.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v, NameRule says %v", s, got, want)
		}
	}
}
