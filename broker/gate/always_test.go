package gate

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ollie/broker"
)

// TestAlwaysFile: the host's always file keeps each tool once, keeps a
// person's comments and lines, refuses a name that is not one line, and
// a file with a line that is not a name is an error naming the line.
func TestAlwaysFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ollie", "bypass-always")
	if tools, err := LoadAlways(file); err != nil || tools != nil {
		t.Fatalf("a missing file: %v, %v", tools, err)
	}
	for _, tool := range []string{"fix_nginx", "system_logs", "fix_nginx"} {
		if err := SaveAlways(file, tool, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	tools, err := LoadAlways(file)
	if err != nil || !slices.Equal(tools, []string{"fix_nginx", "system_logs"}) {
		t.Fatalf("after three saves: %q, %v", tools, err)
	}
	b, _ := os.ReadFile(file)
	os.WriteFile(file, append(b, "# mine\nkept_tool"...), 0o600) // no final newline
	if err := SaveAlways(file, "third", "r2"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(file)
	if !strings.Contains(string(b), "# mine\nkept_tool\n# always, answered for request r2\nthird\n") {
		t.Errorf("a person's lines were not kept:\n%s", b)
	}
	for _, bad := range []string{"", "two words", "line\nbreak", "#comment", "esc\x1b[2J"} {
		if err := SaveAlways(file, bad, "r3"); err == nil {
			t.Errorf("SaveAlways(%q) saved it", bad)
		}
	}
	os.WriteFile(file, []byte("ok_tool\nnot a name\n"), 0o600)
	if _, err := LoadAlways(file); !errors.Is(err, broker.ErrPolicy) || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("a bad line: %v, want ErrPolicy naming line 2", err)
	}
	if err := SaveAlways(file, "another", "r4"); err == nil {
		t.Error("SaveAlways wrote over a file that does not read")
	}
}
