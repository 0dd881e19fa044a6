package paths

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Within returns dir with its symbolic links resolved, if it lies at or
// beneath root (resolved too); otherwise an error that names both. Links
// are resolved because a sandbox confines by the real hierarchy: a link
// inside root that leads out of it would take the confinement along.
func Within(dir, root string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%q is not an absolute path", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(realRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		if real != dir {
			return "", fmt.Errorf("%s (%s) is not inside %s", dir, real, root)
		}
		return "", fmt.Errorf("%s is not inside %s", dir, root)
	}
	return real, nil
}
