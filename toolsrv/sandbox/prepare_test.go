//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/internal/await"
)

// preparedPool returns a pool whose two waiting helpers have prepared
// pol's rules (their stages hold a Landlock ruleset built for it) before
// their calls: two calls under pol, then the two helpers started after
// them, as in a session.
func preparedPool(t *testing.T, e *env, pol *Policy) *Pool {
	t.Helper()
	p := newTestPool(t)
	for range 2 {
		if r := runPooled(t, context.Background(), p, pol, e.cwd, "/bin/true"); r.code != 0 {
			t.Fatalf("priming the pool: %+v", r)
		}
	}
	await.Until(t, 10*time.Second, "two helpers prepared for the policy", func() bool {
		return p.Idle() >= 2 && preparedStages(t, p) >= 2
	})
	return p
}

// preparedStages counts the waiting helpers whose stage holds a Landlock
// ruleset: one built ahead for the policy the pool expects.
func preparedStages(t *testing.T, p *Pool) int {
	var hs []*warmHelper
	defer func() {
		for _, h := range hs {
			select {
			case p.ready <- h:
			default: // refilled meanwhile
				h.discard()
			}
		}
	}()
	n := 0
	for {
		select {
		case h := <-p.ready:
			hs = append(hs, h)
			if h.prep != nil && holdsRuleset(h.proc.Pid) {
				n++
			}
			continue
		default:
		}
		return n
	}
}

// holdsRuleset reports whether the confining stage of the helper with
// pid helper has a Landlock ruleset open.
func holdsRuleset(helper int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", helper))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, stage := range strings.Fields(string(b)) {
			fds, _ := filepath.Glob("/proc/" + stage + "/fd/*")
			for _, fd := range fds {
				if l, _ := os.Readlink(fd); strings.Contains(l, "landlock-ruleset") {
					return true
				}
			}
		}
	}
	return false
}

// A path of the policy that is renamed, or swapped for a link to a
// secret or for another directory, after a waiting helper prepared its
// rules gives the call nothing at that path: the rule holds the directory
// it was made on, wherever that now is, and the kernel judges the rest.
// The call's policy is the one resolved before the swap, as a session's
// cached resolution is (a policy resolved after it names the link's
// target, as Resolve always has).
func TestPreparedRulesHoldTheirFiles(t *testing.T) {
	requireLandlock(t, 3)
	for _, swap := range []string{"link", "dir"} {
		t.Run(swap, func(t *testing.T) {
			e := newEnv(t)
			os.WriteFile(filepath.Join(e.ro, "ok"), []byte("ok\n"), 0o644)
			os.WriteFile(filepath.Join(e.secret, "secret"), []byte("secret\n"), 0o644)
			pol := e.policy(t)
			p := preparedPool(t, e, pol)
			moved := e.ro + ".moved"
			if err := os.Rename(e.ro, moved); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(moved) })
			if swap == "link" {
				if err := os.Symlink(e.secret, e.ro); err != nil {
					t.Fatal(err)
				}
			} else {
				os.Mkdir(e.ro, 0o755)
				os.WriteFile(filepath.Join(e.ro, "secret"), []byte("planted\n"), 0o644)
			}
			r := runPooled(t, context.Background(), p, pol, e.cwd, "/bin/sh", "-c",
				`cat "$1/secret"; echo "secret: $?"; cat "$2/ok"`, "sh", e.ro, moved)
			if strings.Contains(r.stdout, "secret\n") || strings.Contains(r.stdout, "planted") || !strings.Contains(r.stdout, "secret: 1") {
				t.Errorf("the call read what was put at %s after its rules were prepared: %+v", e.ro, r)
			}
			if !strings.Contains(r.stdout, "ok\n") {
				t.Errorf("the call lost the directory its rule was made on, moved to %s: %+v", moved, r)
			}
		})
	}
}

// A session's directory moved away and replaced after a waiting helper
// prepared its rules is refused at the call, as without preparation.
func TestPreparedCallRefusesAReplacedDirectory(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	id, err := Identify(e.cwd)
	if err != nil {
		t.Fatal(err)
	}
	pol := e.policy(t)
	for i := range pol.Paths {
		if pol.Paths[i].Path == e.cwd {
			pol.Paths[i].ID = &id
		}
	}
	p := preparedPool(t, e, pol)
	if err := os.Rename(e.cwd, e.cwd+".moved"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(e.cwd + ".moved") })
	os.Mkdir(e.cwd, 0o755)
	r := runPooled(t, context.Background(), p, pol, e.cwd, "/bin/sh", "-c", "echo ran")
	if r.code != 126 || strings.Contains(r.stdout, "ran") {
		t.Errorf("a call ran in a replaced session directory: %+v", r)
	}
}

// A call whose policy is not the one its helper prepared (another
// profile, or the profile edited since) gets its own policy, built whole:
// nothing of the prepared rules reaches it.
func TestPreparedRulesOnlyForTheirPolicy(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ro, "ok"), []byte("ok\n"), 0o644)
	p := preparedPool(t, e, e.policy(t))
	narrower := e.policyWith(t, func(pr *Profile) { pr.Read = pr.Read[:len(pr.Read)-1] }) // without e.ro
	r := runPooled(t, context.Background(), p, narrower, e.cwd, "/bin/sh", "-c", `cat "$1/ok"; echo "read: $?"`, "sh", e.ro)
	if strings.Contains(r.stdout, "ok\n") || !strings.Contains(r.stdout, "read: 1") {
		t.Errorf("a call under a narrower policy read %s, which only the prepared one allows: %+v", e.ro, r)
	}
}

// A prepared call's tool holds stdin, stdout and stderr alone: not the
// ruleset built ahead, nor the socket its stage sends the status on.
func TestPreparedCallInheritsNothing(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policy(t)
	p := preparedPool(t, e, pol)
	r := runPooled(t, context.Background(), p, pol, e.cwd, "/bin/sh", "-c", `cd /proc/self/fd && echo "fds=" *`)
	// The glob's own descriptor is 3.
	if r.code != 0 || strings.TrimSpace(r.stdout) != "fds= 0 1 2 3" {
		t.Errorf("the tool's descriptors: %+v, want stdin, stdout and stderr", r)
	}
}
