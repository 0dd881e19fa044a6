package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSpillToolsRun checks `olliesrv tools run` with an endless writer: it
// is stopped at the call's limit, and the output up to it is kept, after
// exit, in a private directory under the state directory's spill root.
func TestSpillToolsRun(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	xdgState := t.TempDir()
	t.Setenv("XDG_STATE_HOME", xdgState)
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "endless.meta"), []byte(`{"description": "Write forever."}`), 0644)
	os.WriteFile(filepath.Join(tools, "endless"), []byte("#!/bin/sh\nyes 'endless output'\n"), 0755)
	data, _ := filepath.Abs("../../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)

	var out, errb bytes.Buffer
	// The note says it was stopped at its limit, not its timeout.
	code := toolsMain([]string{"run", "-cwd", t.TempDir(), "endless", `{"timeout": 60}`}, nil, &out, &errb)
	if code != 1 || !strings.HasPrefix(out.String(), "[stopped: the tool wrote more than 4 MiB of output, the limit of one call;") {
		t.Fatalf("exit %d, output %.300q, stderr %q", code, out.String(), errb.String())
	}
	m := regexp.MustCompile(`up to the call's limit is in (\S+)\]`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no note naming the kept output: %q", out.String()[max(0, out.Len()-300):])
	}
	dir := filepath.Dir(m[1])
	root := filepath.Join(xdgState, "ollie", "sessions", "ollie-spill")
	if filepath.Dir(dir) != root || !strings.HasPrefix(filepath.Base(dir), "ollie-output-") {
		t.Errorf("kept in %s, want a fresh ollie-output-* under %s", m[1], root)
	}
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() != 0700 {
		t.Errorf("%s: %v %v, want 0700", dir, fi, err)
	}
	if fi, err := os.Stat(m[1]); err != nil || fi.Size() != 4<<20 {
		t.Errorf("the kept output: %v %v, want 4 MiB", fi, err)
	}
}
