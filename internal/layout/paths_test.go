package layout_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// homeLookup is a read of the home directory or of an XDG base directory
// variable: each has one rule, in internal/paths, so that no two places
// of ollie disagree on where a file lives (as five readings of
// XDG_STATE_HOME with three fallbacks once did).
var homeLookup = regexp.MustCompile(`os\.UserHomeDir\(|os\.UserConfigDir\(|os\.UserCacheDir\(|Getenv\("(HOME|XDG_(CONFIG|STATE|DATA|CACHE|RUNTIME)_(HOME|DIR))"\)`)

func TestOneHomeForPaths(t *testing.T) {
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == filepath.Join("internal", "paths") || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if homeLookup.MatchString(line) {
				t.Errorf("%s:%d: %s: ask internal/paths (Home, XDG, ConfigDir, StateDir) instead", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
