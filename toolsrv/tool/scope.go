package tool

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// ScopeKind is what a tool call may touch, for scheduling a turn's calls in
// parallel. The zero value is ScopeGlobal, the safe one.
type ScopeKind uint8

const (
	ScopeGlobal ScopeKind = iota // anything: runs alone
	ScopeRead                    // nothing the other calls see: runs beside anything but global
	ScopeWrite                   // one path: runs beside calls that touch other paths
)

func (k ScopeKind) String() string {
	switch k {
	case ScopeGlobal:
		return "global"
	case ScopeRead:
		return "read"
	case ScopeWrite:
		return "write"
	}
	return fmt.Sprintf("ScopeKind(%d)", int(k))
}

// ParseScopeKind reads a kind as String writes it, as a .meta file and a
// FunctionDecl name it. An unknown name is ScopeGlobal, and false.
func ParseScopeKind(s string) (ScopeKind, bool) {
	switch s {
	case "global":
		return ScopeGlobal, true
	case "read":
		return ScopeRead, true
	case "write":
		return ScopeWrite, true
	}
	return ScopeGlobal, false
}

// Scope is what one call touches. Path is set for ScopeWrite: absolute,
// cleaned, with symbolic links resolved as far as the path exists.
type Scope struct {
	Kind ScopeKind
	Path string
}

func (s Scope) String() string {
	if s.Kind == ScopeWrite {
		return "write " + s.Path
	}
	return s.Kind.String()
}

// ScopeOf gives the scope of a call of a tool of kind k, whose path
// argument (for ScopeWrite) is named arg, with the arguments args
// (dispatch flags may still be in them), relative paths taken against cwd.
// A write-scoped call whose path argument is missing, not a string, or
// relative with no absolute cwd cannot be placed, so it is global.
func ScopeOf(k ScopeKind, arg string, args json.RawMessage, cwd string) Scope {
	if k != ScopeWrite {
		return Scope{Kind: k}
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil {
		return Scope{Kind: ScopeGlobal}
	}
	var p string
	if json.Unmarshal(obj[arg], &p) != nil || p == "" {
		return Scope{Kind: ScopeGlobal}
	}
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(cwd) {
			return Scope{Kind: ScopeGlobal}
		}
		p = filepath.Join(cwd, p)
	}
	return Scope{Kind: ScopeWrite, Path: canonical(filepath.Clean(p))}
}

// canonical resolves the symbolic links in the longest existing prefix of
// the absolute path p, so that two names for one directory are one path.
// Hard links stay distinct.
func canonical(p string) string {
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// Conflicts reports whether two calls must not run at the same time. Reads
// conflict with nothing but global; global conflicts with everything; two
// writes conflict when their paths are the same or one is inside the other
// (a write to a directory touches what is in it). A write without a path is
// taken as global.
func Conflicts(a, b Scope) bool {
	if a.Kind == ScopeWrite && a.Path == "" {
		a.Kind = ScopeGlobal
	}
	if b.Kind == ScopeWrite && b.Path == "" {
		b.Kind = ScopeGlobal
	}
	switch {
	case a.Kind == ScopeGlobal || b.Kind == ScopeGlobal:
		return true
	case a.Kind == ScopeRead || b.Kind == ScopeRead:
		return false
	}
	return within(a.Path, b.Path) || within(b.Path, a.Path)
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	if p == dir || dir == "/" {
		return true
	}
	return strings.HasPrefix(p, dir+"/")
}

// Batches groups a turn's calls, given by their scopes in the order the
// model made them, into waves: the calls of one wave run in parallel, and
// each wave starts when the one before it has finished. A call goes into the
// wave after the last one holding an earlier call it conflicts with, so it
// never overtakes a conflicting call; calls that conflict with nothing
// earlier go into the first wave. Each wave lists call indices in order.
func Batches(calls []Scope) [][]int {
	var waves [][]int
	wave := make([]int, len(calls))
	for i, c := range calls {
		w := 0
		for j := range i {
			if wave[j] >= w && Conflicts(calls[j], c) {
				w = wave[j] + 1
			}
		}
		wave[i] = w
		if w == len(waves) {
			waves = append(waves, nil)
		}
		waves[w] = append(waves[w], i)
	}
	return waves
}
