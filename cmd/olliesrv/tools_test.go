package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestToolsList(t *testing.T) {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "logs.meta"), []byte(`{"description": "Logs.", "variants": [
		{"match": {"binary": "no-such-binary-here"}, "cmd": "x"},
		{"match": {"os": "linux"}, "cmd": "/bin/true"}]}`), 0644)
	os.WriteFile(filepath.Join(tools, "bad.meta"), []byte(`{"description": 3}`), 0644)
	data, _ := filepath.Abs("../../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	var out, errb bytes.Buffer
	if code := toolsMain(nil, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"tools path: " + tools,
		"sandbox: sandboxed (Landlock ABI ",
		`logs (` + tools + `/logs.meta): variants[1] (os is "linux")`,
		`variants[0] skipped: binary "no-such-binary-here" not found in PATH`,
		"executable: /bin/true",
		"errors:",
		"bad.meta: description:",
		"1 tools available",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("olliesrv tools lacks %q:\n%s", want, out.String())
		}
	}
	if code := toolsMain([]string{"run"}, nil, &out, &errb); code != 2 {
		t.Errorf("run without a name: exit %d", code)
	}
	if code := toolsMain([]string{"run", "logs", "{not json"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "not valid JSON") {
		t.Errorf("bad JSON: exit %d %q", code, errb.String())
	}
}
