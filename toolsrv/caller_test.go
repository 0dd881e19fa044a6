package toolsrv

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCallerCwdWithinSession drives the runner itself with a caller whose
// directory lies outside the session's: plainly, through a symlink in the
// session's directory, through a chain of them, and through "..". Each
// is refused before the tool runs, by RunFor and by StartFor. host
// checks an agent's directory too, which hides a runner that stopped
// checking from the end-to-end tests; this is the runner's own check.
func TestCallerCwdWithinSession(t *testing.T) {
	// The tool leaves a mark where it runs, so that a call that should
	// not have run is seen even if its output were lost.
	r, session := runner(t, map[string][2]string{
		"where": {`{"description": "Say where it runs."}`, "#!/bin/sh\n: > \"$PWD/ran\"\necho \"pwd=$PWD\"\n"},
	})
	outside := t.TempDir()
	sub := filepath.Join(session, "sub")
	if err := os.Mkdir(sub, 0755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"escape": outside,                        // a symlink out
		"hop1":   filepath.Join(session, "hop2"), // a chain of them, out
		"hop2":   outside,
		"inside": sub,  // a symlink that stays in
		"up":     "..", // relative, out
	} {
		if err := os.Symlink(target, filepath.Join(session, link)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()

	refused := []struct{ name, cwd string }{
		{"another directory", outside},
		{"the session's parent", filepath.Dir(session)},
		{"the root", "/"},
		{"a symlink out", filepath.Join(session, "escape")},
		{"below a symlink out", filepath.Join(session, "escape") + "/."},
		{"a chain of symlinks out", filepath.Join(session, "hop1")},
		{"a relative symlink up", filepath.Join(session, "up")},
		{"dot-dot out", filepath.Join(session, "sub", "..", "..", filepath.Base(outside))},
		{"a relative path", "sub"},
		{"a directory that is not there", filepath.Join(session, "nosuch")},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			res := r.RunFor(ctx, Caller{Agent: "agent-1", Cwd: tc.cwd}, "where", nil)
			if !res.Failed || !strings.Contains(res.Output, "not run: the agent's directory must lie within its session's") {
				t.Errorf("RunFor in %s: %+v, want it not run", tc.cwd, res)
			}
			ps := &Procs{Runner: r}
			defer ps.Close()
			if p, err := ps.StartFor(ctx, Caller{Agent: "agent-1", Cwd: tc.cwd}, "where", nil); err == nil || !strings.Contains(err.Error(), "must lie within its session's") {
				if p != nil {
					<-p.done
				}
				t.Errorf("StartFor in %s: %v, want it not started", tc.cwd, err)
			}
			for _, dir := range []string{outside, filepath.Dir(session), session} {
				if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
					os.Remove(filepath.Join(dir, "ran"))
					t.Errorf("the tool ran in %s for a caller in %s", dir, tc.cwd)
				}
			}
		})
	}

	// What lies within is taken, a symlink resolved: the check refuses
	// only what it should.
	realSub, err := filepath.EvalSymlinks(sub)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []struct{ name, cwd, runs string }{
		{"none given", "", session},
		{"the session's", session, session},
		{"a directory below", sub, realSub},
		{"a symlink that stays in", filepath.Join(session, "inside"), realSub},
	}
	for _, tc := range allowed {
		t.Run("allowed/"+tc.name, func(t *testing.T) {
			res := r.RunFor(ctx, Caller{Agent: "agent-1", Cwd: tc.cwd}, "where", json.RawMessage(`{}`))
			if res.Failed || strings.TrimSpace(res.Output) != "pwd="+tc.runs {
				t.Errorf("RunFor in %q: %+v, want it run in %s", tc.cwd, res, tc.runs)
			}
			os.Remove(filepath.Join(tc.runs, "ran"))
		})
	}
}
