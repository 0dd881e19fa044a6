package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"ollie/internal/paths"
)

// noNSEnv, set in olliesrv's environment, makes its helpers start the
// confining stage without a mount namespace: the host then behaves as one
// without user namespaces (calls whose writable directory holds a
// protected path are refused), which is how the lab tests that mode.
const noNSEnv = "OLLIE_SANDBOX_NO_NAMESPACE"

// nsPidArg is the confining stage's nsArg for a stage started in a pid
// namespace as well, which mounts the call's own /proc (init_linux.go).
const nsPidArg = "nspid"

// ownProcEnv, in a helper's environment, says the host lets a confining
// stage have a pid namespace and a /proc of its own (HostProtection probed
// it), so the helper asks for them.
const ownProcEnv = "OLLIE_SANDBOX_OWN_PROC"

// noOwnProcEnv, set in olliesrv's environment, keeps calls in the host's
// pid namespace (their /proc then holds only the tool's own entry, as
// Landlock pinned it, and not its children's).
const noOwnProcEnv = "OLLIE_SANDBOX_NO_OWN_PROC"

// startupFiles are the files and directories in a home directory that a
// shell, a login or the user's session manager reads and runs: whoever
// writes one runs code as the user, outside every sandbox, the next time
// the user logs in. Missing ones count as much as present ones: bash
// reads ~/.bash_profile in place of ~/.profile once it exists.
var startupFiles = []string{
	".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout",
	".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout",
	".kshrc", ".mkshrc", ".shrc", ".cshrc", ".tcshrc", ".login", ".logout",
	".inputrc", ".pam_environment", ".xprofile", ".xsession", ".xsessionrc",
	".config/fish", ".config/environment.d", ".config/systemd", ".config/autostart",
}

// ProtectedPaths lists what decides a tool's power, which no tool may
// change even beneath a directory its profile lets it write: ollie's
// configuration ($XDG_CONFIG_HOME/ollie: profiles, tools, skills,
// backends, the listener's keys), its state ($XDG_STATE_HOME/ollie:
// session logs, keys), its deployed versions ($XDG_DATA_HOME/ollie) and
// data directory, the running binary and the ollie command beside it, the tools
// directories, ~/.local/bin and ~/bin (the commands ollie and the user
// run), ~/.ssh, and the shells' and the login's start-up files. Each path
// is given as the user names it and, where a symbolic link leads
// elsewhere, as where it leads too. Paths that do not exist are listed:
// creating one can change what a tool may do as much as writing one.
func ProtectedPaths(v Vars) []string {
	var list []string
	add := func(p string) {
		if filepath.IsAbs(p) {
			list = append(list, filepath.Clean(p))
		}
	}
	for _, t := range []string{"XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"} {
		if vals, _, err := v.expand(t); err == nil && len(vals) == 1 {
			add(filepath.Join(vals[0], "ollie"))
		}
	}
	add(paths.DataDir())
	// The binary and the ollie command beside it, not their directory:
	// that may be a shared one (a test's binary in /tmp), and the deployed
	// versions are protected whole above.
	if exe, err := os.Executable(); err == nil {
		add(exe)
		add(filepath.Join(filepath.Dir(exe), "ollie"))
	}
	if vals, _, _ := v.expand("OLLIE_TOOLS_PATH"); len(vals) > 0 {
		for _, d := range vals {
			add(d)
		}
	}
	if home, _, err := v.expand("HOME"); err == nil && len(home) == 1 {
		for _, f := range append([]string{".ssh", ".local/bin", "bin"}, startupFiles...) {
			add(filepath.Join(home[0], f))
		}
	}
	for _, p := range list {
		if c := canonicalPrefix(p); c != p {
			list = append(list, c)
		}
	}
	slices.Sort(list)
	return slices.Compact(list)
}

// canonicalPrefix resolves the symbolic links of the longest part of p
// that exists, and keeps the rest as it is.
func canonicalPrefix(p string) string {
	rest := ""
	for dir := p; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// within reports whether p is dir or lies beneath it (both clean and
// absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// A ProtectError is a call refused because a directory it may write and a
// protected path overlap in a way this host cannot keep safe.
type ProtectError struct {
	Dir       string // the writable directory
	Protected string // the protected path
	Inside    bool   // Dir lies inside Protected (else Protected inside Dir)
	Reason    string // why no mount namespace keeps it read-only; "" when Inside
}

func (e *ProtectError) Error() string {
	if e.Inside {
		return fmt.Sprintf("sandbox: refusing to run the tool: its writable directory %s is inside %s, which decides what tools may do and no tool may change (give the session a directory of its own)", e.Dir, e.Protected)
	}
	return fmt.Sprintf("sandbox: refusing to run the tool: its writable directory %s holds %s, which decides what tools may do, and this host cannot keep it read-only for the tool (%s); give the session a directory of its own, e.g. cwd=%s", e.Dir, e.Protected, e.Reason, filepath.Join(e.Dir, "work"))
}

// opKind is what a mount namespace does to one path to keep the protected
// ones as they are.
type opKind int

const (
	opPin       opKind = iota + 1 // a mount on itself: it cannot be renamed or removed
	opNoEntries                   // no entry may be made, renamed or removed in it; what it holds stays writable
	opReadOnly                    // read-only, with everything beneath it
)

// A mountOp is one step of a protection plan.
type mountOp struct {
	Path string
	Kind opKind
}

// plan works out, from the file system as it is now, what a call that may
// write the directories writable must have done to it so that it can
// change none of protect: each protected path that exists becomes
// read-only; each directory between a writable one and a protected path
// is pinned, so that it cannot be moved away and replaced; and a
// directory in which a protected path is missing, or is reached by a
// symbolic link, takes no new entries. The steps come deepest first, the
// order in which they must be made. A writable directory inside a
// protected path is a *ProtectError.
func plan(writable, protect []string) ([]mountOp, error) {
	kinds := map[string]opKind{}
	mark := func(p string, k opKind) {
		if kinds[p] < k {
			kinds[p] = k
		}
	}
	for _, w := range writable {
		for _, p := range protect {
			if within(w, p) {
				return nil, &ProtectError{Dir: w, Protected: p, Inside: true}
			}
			if !within(p, w) {
				continue
			}
			cur := w
			comps := strings.Split(strings.TrimPrefix(p, strings.TrimSuffix(w, "/")+"/"), "/")
			for i, c := range comps {
				next := filepath.Join(cur, c)
				st, err := os.Lstat(next)
				if err != nil || st.Mode()&fs.ModeSymlink != 0 || (i < len(comps)-1 && !st.IsDir()) {
					if err != nil && !errors.Is(err, fs.ErrNotExist) {
						return nil, fmt.Errorf("sandbox: protecting %s: %w", p, err)
					}
					// Missing, a link, or a file where a directory leads
					// on: the entry must not be made or replaced.
					mark(cur, opNoEntries)
					break
				}
				if i == len(comps)-1 {
					mark(next, opReadOnly)
					break
				}
				mark(next, opPin)
				cur = next
			}
		}
	}
	ops := make([]mountOp, 0, len(kinds))
	for p, k := range kinds {
		ops = append(ops, mountOp{p, k})
	}
	slices.SortFunc(ops, func(a, b mountOp) int {
		if d := strings.Count(b.Path, "/") - strings.Count(a.Path, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.Path, b.Path)
	})
	return ops, nil
}

// writable are the directories p lets a tool write beneath, and the
// regular files it lets a tool write (a device or a socket it may write
// changes no file).
func (p *Policy) writable() []string {
	var list []string
	for _, r := range p.Paths {
		if r.Access&Write == 0 {
			continue
		}
		if st, err := os.Stat(r.Path); err == nil && (st.IsDir() || st.Mode().IsRegular()) {
			list = append(list, r.Path)
		}
	}
	return list
}
