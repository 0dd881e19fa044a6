package inventory

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSplitTargets (issue 31, item 5): the leading words that name known
// hosts are targets, the rest the goal; a goal is never taken for hosts
// and never left empty.
func TestSplitTargets(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	os.WriteFile(cfg, []byte("Host h1 h2 h3\n  User ops\nHost web*\n  Port 22\nHost web1 web2\n"), 0644)
	o := Options{SSHConfig: cfg}
	for _, c := range []struct {
		line          string
		targets, goal []string
	}{
		{"h1|h2|h3|check disks", []string{"h1", "h2", "h3"}, []string{"check disks"}},
		{"h1|check|the|disks", []string{"h1"}, []string{"check", "the", "disks"}},
		{"h1|h2|check disks|h3", []string{"h1", "h2"}, []string{"check disks", "h3"}},
		{"web*|db9|db*|check", []string{"web*", "db9", "db*"}, []string{"check"}}, // db9 is held
		{"h1|h2", []string{"h1"}, []string{"h2"}},                                 // the last word is the goal
		{"h1|@group|h2,h3|ops@h2|look", []string{"h1", "@group", "h2,h3", "ops@h2"}, []string{"look"}},
		{"h1|x*|look", []string{"h1"}, []string{"x*", "look"}},       // a pattern matching nothing
		{"h1|h2 h3|look", []string{"h1"}, []string{"h2 h3", "look"}}, // a quoted sentence is not a list
	} {
		words := strings.Split(c.line, "|")
		targets, goal := SplitTargets(context.Background(), words, o, []string{"db9"})
		if !slices.Equal(targets, c.targets) || !slices.Equal(goal, c.goal) {
			t.Errorf("%q: targets %q goal %q, want %q %q", words, targets, goal, c.targets, c.goal)
		}
	}
}
