package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The host side of deploy, driven as ollie-remote drives it: files are
// put under temporary names beside where they go, then a plan commits
// them.

func installSum(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// installRoot is an empty install root; HOME is elsewhere, for the ollie
// command a commit installs.
func installRoot(t *testing.T) string {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	root := filepath.Join(t.TempDir(), "ollie")
	if err := os.Mkdir(root, 0755); err != nil {
		t.Fatal(err)
	}
	return root
}

// upload puts content where an upload for rel would leave it, and plans
// it as a file whose content hashes to want.
func installUpload(t *testing.T, root, rel, content, want string) PlannedFile {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".ollie-tmp-0123456789ab")
	p := filepath.Join(root, tmp)
	if err := os.MkdirAll(filepath.Dir(p), 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0600); err != nil {
		t.Fatal(err)
	}
	return PlannedFile{Tmp: filepath.ToSlash(tmp), Path: rel, SHA256: installSum(want), Mode: 0644}
}

func installRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func installCurrent(t *testing.T, root string) string {
	t.Helper()
	v, _ := os.Readlink(filepath.Join(root, "current"))
	return v
}

// leftovers lists the upload temporaries still under root.
func installLeftovers(root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".ollie-tmp-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// commitJSON runs install commit as ollie-remote does: the plan on stdin,
// the report on stdout.
func installCommitJSON(t *testing.T, plan Plan) (Report, string, int) {
	t.Helper()
	b, _ := json.Marshal(plan)
	var stdout, stderr bytes.Buffer
	code := Install([]string{"commit"}, bytes.NewReader(b), &stdout, &stderr)
	var rep Report
	if code == 0 {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("report %q: %v", stdout.String(), err)
		}
	}
	return rep, stderr.String(), code
}

// TestInstallCommitArrivedDamaged is a deploy whose files are damaged
// between upload and commit: a data file, then the binary. Neither is
// committed, the version does not become current, what was installed
// before stays, and the report names them so that ollie-remote sends
// them again; the retry with the right content then goes through.
func TestInstallCommitArrivedDamaged(t *testing.T) {
	root := installRoot(t)
	rep, stderr, code := installCommitJSON(t, Plan{Root: root, Version: "v1", Keep: 3, Files: []PlannedFile{
		installUpload(t, root, "v1/olliesrv", "binary 1", "binary 1"),
		installUpload(t, root, "data/tools/a.meta", "meta 1", "meta 1"),
	}})
	if code != 0 || len(rep.Bad) != 0 || installCurrent(t, root) != "v1" {
		t.Fatalf("first deploy: exit %d %s, report %+v, current %q", code, stderr, rep, installCurrent(t, root))
	}

	for _, damaged := range []string{"data/tools/a.meta", "v2/olliesrv"} {
		t.Run(damaged, func(t *testing.T) {
			want := map[string]string{"v2/olliesrv": "binary 2", "data/tools/a.meta": "meta 2"}
			var files []PlannedFile
			for _, rel := range []string{"v2/olliesrv", "data/tools/a.meta"} {
				arrived := want[rel]
				if rel == damaged {
					arrived = arrived[:len(arrived)-1] + "?" // one byte changed on the way
				}
				files = append(files, installUpload(t, root, rel, arrived, want[rel]))
			}
			rep, stderr, code := installCommitJSON(t, Plan{Root: root, Version: "v2", Keep: 3, Files: files})
			if code != 0 {
				t.Fatalf("commit: exit %d %s", code, stderr)
			}
			if !slices.Equal(rep.Bad, []string{damaged}) {
				t.Errorf("report says bad: %q, want %q", rep.Bad, damaged)
			}
			if v := installCurrent(t, root); v != "v1" {
				t.Errorf("current → %q after a file arrived damaged, want v1 still", v)
			}
			if damaged == "data/tools/a.meta" {
				if got := installRead(t, filepath.Join(root, "data/tools/a.meta")); got != "meta 1" {
					t.Errorf("data/tools/a.meta is %q, want what was installed before (%q)", got, "meta 1")
				}
			} else if _, err := os.Stat(filepath.Join(root, "v2/olliesrv")); err == nil {
				t.Errorf("the damaged binary was committed as v2/olliesrv: %q", installRead(t, filepath.Join(root, "v2/olliesrv")))
			}
			if l := installLeftovers(root); len(l) != 0 {
				t.Errorf("the damaged upload was left behind: %v", l)
			}

			// ollie-remote sends the bad one again, and commits it alone.
			again := []PlannedFile{installUpload(t, root, damaged, want[damaged], want[damaged])}
			rep, stderr, code = installCommitJSON(t, Plan{Root: root, Version: "v2", Keep: 3, Files: again})
			if code != 0 || len(rep.Bad) != 0 || installCurrent(t, root) != "v2" {
				t.Fatalf("retry: exit %d %s, report %+v, current %q", code, stderr, rep, installCurrent(t, root))
			}
			for rel, content := range want {
				if got := installRead(t, filepath.Join(root, rel)); got != content {
					t.Errorf("%s is %q after the retry, want %q", rel, got, content)
				}
			}
			// Back to v1 for the next case.
			os.Remove(filepath.Join(root, "current"))
			os.Symlink("v1", filepath.Join(root, "current"))
			os.RemoveAll(filepath.Join(root, "v2"))
			os.WriteFile(filepath.Join(root, "data/tools/a.meta"), []byte("meta 1"), 0644)
		})
	}
}

// TestInstallCommitRefusesEscapes gives plans whose paths leave the
// install root. Each is refused, naming the path, and nothing outside the
// root is written, renamed, removed or changed.
func TestInstallCommitRefusesEscapes(t *testing.T) {
	var root, outside, victim string
	// Each case gets a root of its own, a file outside it, and a
	// directory inside it that leads out.
	setup := func(t *testing.T) {
		root = installRoot(t)
		outside = filepath.Join(filepath.Dir(root), "outside")
		os.Mkdir(outside, 0755)
		victim = filepath.Join(outside, "victim")
		os.WriteFile(victim, []byte("victim"), 0600)
		os.MkdirAll(filepath.Join(root, "data", "tools"), 0755)
		os.Symlink(outside, filepath.Join(root, "data", "linked"))
	}

	good := func() PlannedFile { return installUpload(t, root, "data/tools/ok.meta", "ok", "ok") }
	cases := []struct {
		name string
		plan func() Plan
		path string // the path the error must name
	}{
		{"path with ..", func() Plan {
			f := good()
			f.Path = "../outside/pwned"
			return Plan{Files: []PlannedFile{f}}
		}, "../outside/pwned"},
		{"path with .. inside", func() Plan {
			f := good()
			f.Path = "data/../../outside/pwned"
			return Plan{Files: []PlannedFile{f}}
		}, "data/../../outside/pwned"},
		{"absolute path", func() Plan {
			f := good()
			f.Path = filepath.Join(outside, "pwned")
			return Plan{Files: []PlannedFile{f}}
		}, filepath.Join(outside, "pwned")},
		{"temporary outside", func() Plan {
			os.WriteFile(filepath.Join(outside, "tmp"), []byte("ok"), 0600)
			f := good()
			f.Tmp = "../outside/tmp"
			return Plan{Files: []PlannedFile{f}}
		}, "../outside/tmp"},
		{"absolute temporary", func() Plan {
			os.WriteFile(filepath.Join(outside, "tmp"), []byte("ok"), 0600)
			f := good()
			f.Tmp = filepath.Join(outside, "tmp")
			return Plan{Files: []PlannedFile{f}}
		}, filepath.Join(outside, "tmp")},
		{"path through a symlinked directory", func() Plan {
			f := good()
			f.Path = "data/linked/pwned"
			return Plan{Files: []PlannedFile{f}}
		}, "data/linked/pwned"},
		{"temporary through a symlinked directory", func() Plan {
			os.WriteFile(filepath.Join(outside, ".x.ollie-tmp-1"), []byte("ok"), 0600)
			f := good()
			f.Tmp = "data/linked/.x.ollie-tmp-1"
			return Plan{Files: []PlannedFile{f}}
		}, "data/linked/.x.ollie-tmp-1"},
		{"temporary that is a symlink", func() Plan {
			f := good()
			os.Remove(filepath.Join(root, f.Tmp))
			os.Symlink(victim, filepath.Join(root, f.Tmp))
			f.SHA256 = installSum("victim")
			f.Mode = 0666
			return Plan{Files: []PlannedFile{f}}
		}, "data/tools/ok.meta"},
		{"removal with ..", func() Plan {
			return Plan{Remove: []string{"../../outside/victim"}}
		}, "../../outside/victim"},
		{"absolute removal", func() Plan {
			return Plan{Remove: []string{victim}}
		}, victim},
		{"removal through a symlinked directory", func() Plan {
			return Plan{Remove: []string{"linked/victim"}}
		}, "linked/victim"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setup(t)
			plan := c.plan()
			plan.Root, plan.Version, plan.Keep = root, "v1", 3
			rep, stderr, code := installCommitJSON(t, plan)
			if code == 0 {
				t.Errorf("the plan was committed: %+v", rep)
			} else if !strings.Contains(stderr, c.path) {
				t.Errorf("the error does not name %s: %s", c.path, stderr)
			}
			if v := installCurrent(t, root); v != "" {
				t.Errorf("current → %q", v)
			}
			ents, _ := os.ReadDir(outside)
			var names []string
			for _, e := range ents {
				if e.Name() != "tmp" && e.Name() != ".x.ollie-tmp-1" {
					names = append(names, e.Name())
				}
			}
			if !slices.Equal(names, []string{"victim"}) {
				t.Errorf("outside the root there is now %v, want only victim", names)
			}
			if fi, err := os.Stat(victim); err != nil {
				t.Errorf("the file outside the root: %v", err)
			} else if fi.Mode().Perm() != 0600 || installRead(t, victim) != "victim" {
				t.Errorf("the file outside the root was changed: %v %q", fi.Mode(), installRead(t, victim))
			}
		})
	}
}
