package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProbeMakesDirs: the probe makes the root and the data directories
// the uploads go to (no mkdir exec of their own), says nothing when it
// could, and says what mkdir said when it could not.
func TestProbeMakesDirs(t *testing.T) {
	b := &Bundle{Data: map[string]LocalFile{"tools/a.meta": {}, "agents/prompts/p.md": {}, "top.txt": {}}}
	probe := func(home string) []string {
		cmd := exec.Command("/bin/sh", "-c", Sh(probeScript(uploadDirs(b)), "v1"))
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		lines := strings.SplitN(string(out), "\n", 6)
		if len(lines) != 6 {
			t.Fatalf("probe said %q, want 6 lines", out)
		}
		return lines
	}
	home := t.TempDir()
	if l := probe(home); strings.TrimSpace(l[4]) != "" || strings.TrimSpace(l[5]) != "{}" {
		t.Errorf("a fresh home: mkdir said %q, manifest %q", l[4], l[5])
	}
	root := filepath.Join(home, ".local/share/ollie")
	for _, d := range []string{"data", "data/tools", "data/agents/prompts"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s not made: %v", d, err)
		}
	}
	blocked := t.TempDir()
	os.WriteFile(filepath.Join(blocked, ".local"), nil, 0644)
	if l := probe(blocked); !strings.Contains(l[4], "mkdir") || strings.TrimSpace(l[5]) != "{}" {
		t.Errorf("a home where .local is a file: mkdir said %q, manifest %q", l[4], l[5])
	}
}
