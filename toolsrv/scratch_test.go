package toolsrv

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Each call has a scratch directory of its own, empty as it starts, even
// though a session's Runner makes it before the call; all are gone once
// the Runner is closed.
func TestScratchOwnAndEmpty(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		"scratch": {`{"description": "Use the scratch directory."}`, "#!/bin/sh\necho \"$TMPDIR\"; ls -A \"$TMPDIR\"; touch \"$TMPDIR/left\"\n"},
	})
	var dirs []string
	for range 3 {
		res := r.Run(context.Background(), "scratch", json.RawMessage(`{}`))
		lines := strings.Split(strings.TrimSpace(res.Output), "\n")
		if res.Failed || len(lines) != 1 {
			t.Fatalf("the call's scratch directory was not its own and empty: %+v", res)
		}
		for _, d := range dirs {
			if d == lines[0] {
				t.Fatalf("two calls had the scratch directory %s", d)
			}
		}
		dirs = append(dirs, lines[0])
		r.scratchWork.Wait() // the next one made, as between a session's calls
	}
	r.Close()
	for _, d := range dirs {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("scratch directory %s outlived its call: %v", d, err)
		}
	}
	r.scratchMu.Lock()
	defer r.scratchMu.Unlock()
	if r.nextScratch != "" {
		t.Errorf("the directory made ahead, %s, outlived Close", r.nextScratch)
	}
}
