package toolsrv

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/toolsrv/sandbox"
)

// resolveRunner is a Runner whose default profile is data/sandbox's with
// read access to dir, in a profile directory of its own, and a tool
// "peek" that reads dir/file; it returns the runner and the profile's
// path.
func resolveRunner(t *testing.T, dir string) (*Runner, string) {
	t.Helper()
	r, _ := runner(t, map[string][2]string{
		"peek": {`{"description": "Peek."}`, "#!/bin/sh\ncat " + filepath.Join(dir, "file") + "\necho \"read: $?\"\n"},
	})
	profiles := t.TempDir()
	r.Profiles = sandbox.Profiles{Dirs: []string{profiles}}
	file := filepath.Join(profiles, "default.yaml")
	writeProfile(t, file, dir)
	return r, file
}

// writeProfile writes the deployed default profile to file, with read
// access to dir unless dir is "".
func writeProfile(t *testing.T, file, dir string) {
	t.Helper()
	data, err := os.ReadFile("../data/sandbox/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if dir != "" {
		data = []byte(strings.Replace(string(data), "\nread:\n", "\nread:\n  - "+dir+"\n", 1))
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func peek(t *testing.T, r *Runner) string {
	t.Helper()
	res := r.Run(context.Background(), "peek", json.RawMessage(`{}`))
	r.refreshes.Wait() // the resolution made again after the call
	return res.Output
}

// A profile edited between calls is the one the next call runs under,
// whatever resolution of the one before was kept.
func TestRunnerSeesProfileEdit(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), []byte("visible\n"), 0o644)
	r, file := resolveRunner(t, dir)
	if out := peek(t, r); !strings.Contains(out, "visible") {
		t.Fatalf("under the profile that allows %s: %q", dir, out)
	}
	writeProfile(t, file, "")
	if out := peek(t, r); strings.Contains(out, "visible") || !strings.Contains(out, "read: 1") {
		t.Errorf("the call after the profile no longer allowed %s read it: %q", dir, out)
	}
	writeProfile(t, file, dir)
	if out := peek(t, r); !strings.Contains(out, "visible") {
		t.Errorf("the call after the profile allowed %s again: %q", dir, out)
	}
}

// A directory of the profile that is moved away and replaced by a link to
// a secret after its resolution was kept leads the call nowhere: the
// kept path is opened without following the link.
func TestRunnerKeptPathSwappedForLink(t *testing.T) {
	dir, secret := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), []byte("visible\n"), 0o644)
	os.WriteFile(filepath.Join(secret, "file"), []byte("secret\n"), 0o644)
	r, _ := resolveRunner(t, dir)
	if out := peek(t, r); !strings.Contains(out, "visible") {
		t.Fatalf("before the swap: %q", out)
	}
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir + ".moved") })
	if err := os.Symlink(secret, dir); err != nil {
		t.Fatal(err)
	}
	res := r.Run(context.Background(), "peek", json.RawMessage(`{}`))
	if strings.Contains(res.Output, "secret") {
		t.Errorf("the call read the secret through the link put where the profile's directory was: %q", res.Output)
	}
}

// A path the profile names that did not exist when its resolution was
// kept is seen once the resolution made after a call has found it.
func TestRunnerResolutionFollowsTheFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	r, _ := resolveRunner(t, dir)
	if out := peek(t, r); strings.Contains(out, "visible") {
		t.Fatalf("before %s exists: %q", dir, out)
	}
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "file"), []byte("visible\n"), 0o644)
	peek(t, r) // its resolution may be from before the directory was made
	if out := peek(t, r); !strings.Contains(out, "visible") {
		t.Errorf("two calls after %s was made: %q", dir, out)
	}
}
