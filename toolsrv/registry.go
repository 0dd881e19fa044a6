// Package toolsrv resolves and runs ollie's tools.
//
// A tool is an executable with a .meta sidecar (see README.md for the
// contract; package meta parses it). Load reads the .meta files of a tools
// path, strictly: each problem is a *meta.Error naming the file and the
// field, and one bad file never hides the others. Each .meta is resolved
// against a meta.Host: the first variant whose match holds supplies the
// definition, and the executable is looked up in the tools dir, then by
// cmd, then in PATH. A Registry is the result, immutable; a Session is one
// agent's view of it (the tools it has loaded, and a revision that moves on
// every change).
//
// Before a call runs, SplitFlags takes the dispatch flags (bypass, timeout,
// sandbox, background) out of its arguments and Tool.Validate checks the rest
// against the tool's JSON Schema. Tool.Scope, Conflicts and Batches tell the
// agent loop which calls of a turn may run in parallel.
//
// The package trusts the .meta files on its tools path: they name what runs.
// It trusts nothing in a call's arguments.
package toolsrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"ollie/internal/changes"
	"ollie/internal/paths"
	"ollie/toolsrv/meta"
	"ollie/toolsrv/tool"
)

// Tool is a tool as resolved on this host: the chosen variant merged over the
// top level, defaults applied, and its executable found.
type Tool struct {
	Name        string
	File        string // the .meta it is declared in
	Dir         string // the tools dir that .meta is in
	Variant     int    // the chosen variant; -1 when the .meta has none
	Description string
	Prompt      string         // "" when unset
	Tier        tool.Tier      // default tool.TierHot
	ReadOnly    bool           // default false
	ScopeKind   tool.ScopeKind // default tool.ScopeRead when ReadOnly, else tool.ScopeGlobal
	ScopeArg    string         // the argument holding a write's path; default "path"
	Cmd         string         // as declared; "" when unset
	Path        string         // the resolved executable
	Sudo        bool           // run as root, after approval
	Elevated    bool           // run outside the sandbox, after approval; true when Sudo
	Timeout     time.Duration  // default meta.DefaultTimeout; 0 means none
	ReplaySafe  bool           // safe to run again after a crash interrupted it; default false

	args   *jsonschema.Schema // nil when the .meta declares no args
	own    json.RawMessage
	schema json.RawMessage
}

// Args is the tool's own JSON Schema, as declared: what its executable gets
// on stdin.
func (t *Tool) Args() json.RawMessage { return t.own }

// Schema is the JSON Schema the model is shown: Args with the dispatch flags
// added as optional properties.
func (t *Tool) Schema() json.RawMessage { return t.schema }

// emptyArgs is the schema of a tool that declares no args.
var emptyArgs = map[string]any{"type": "object", "properties": map[string]any{}}

func newTool(m *meta.Meta, dir string, variant int, f meta.Fields) *Tool {
	t := &Tool{
		Name: m.Name, File: m.File, Dir: dir, Variant: variant,
		Tier: tool.TierHot, ScopeArg: "path", Timeout: meta.DefaultTimeout,
		args: f.ArgsSchema(),
	}
	if f.Description != nil {
		t.Description = *f.Description
	}
	if f.Prompt != nil {
		t.Prompt = *f.Prompt
	}
	if f.Tier != nil {
		t.Tier = *f.Tier
	}
	if f.ReadOnly != nil {
		t.ReadOnly = *f.ReadOnly
	}
	switch {
	case f.Scope != nil:
		t.ScopeKind = *f.Scope
	case t.ReadOnly:
		t.ScopeKind = tool.ScopeRead
	}
	if f.ScopeArg != nil {
		t.ScopeArg = *f.ScopeArg
	}
	if f.Cmd != nil {
		t.Cmd = *f.Cmd
	}
	if f.Sudo != nil {
		t.Sudo = *f.Sudo
	}
	if f.Elevated != nil {
		t.Elevated = *f.Elevated
	}
	t.Elevated = t.Elevated || t.Sudo
	if f.Timeout != nil {
		t.Timeout = *f.Timeout
	}
	if f.ReplaySafe != nil {
		t.ReplaySafe = *f.ReplaySafe
	}
	doc := f.ArgsDoc()
	t.own = f.Args
	if doc == nil {
		doc = emptyArgs
		t.own, _ = json.Marshal(emptyArgs)
	}
	t.schema = modelSchema(doc, t.Timeout)
	return t
}

// ToolsPath is the tools path: $OLLIE_TOOLS_PATH split at colons when it is
// set (empty elements dropped), else DefaultToolsPath.
func ToolsPath() []string {
	if env, ok := os.LookupEnv("OLLIE_TOOLS_PATH"); ok {
		var dirs []string
		for d := range strings.SplitSeq(env, ":") {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		return dirs
	}
	return DefaultToolsPath()
}

// DefaultToolsPath is the user's tools, then the deployed ones, keeping only
// the directories that exist:
//
//  1. $XDG_CONFIG_HOME/ollie/tools (~/.config/ollie/tools), so that a user's
//     tool shadows a deployed one of the same name;
//  2. $OLLIE_DATA/tools when OLLIE_DATA is set, else data/tools beside the
//     directory of the running binary, with symbolic links resolved:
//     bin/olliesrv finds bin/../data/tools, which is the layout of both a
//     checkout and a deployed version directory.
func DefaultToolsPath() []string {
	return slices.DeleteFunc(paths.Defaults("tools"), func(d string) bool {
		fi, err := os.Stat(d)
		return err != nil || !fi.IsDir()
	})
}

// ShadowError is the warning that a .meta is ignored because a tool of the
// same name was declared earlier on the tools path.
type ShadowError struct {
	Name string
	File string // the ignored .meta
	By   string // the .meta that declares the tool
}

func (e *ShadowError) Error() string {
	return fmt.Sprintf("%s: ignored: tool %q is declared earlier on the tools path, by %s", e.File, e.Name, e.By)
}

// Registry is the tools declared on a tools path, resolved on one host. It
// does not change once loaded; Reload makes a new one.
type Registry struct {
	path     []string
	host     meta.Host
	tools    map[string]*Tool
	explains []*Explanation // by name
	errs     []error
	warns    []error
}

// Load reads every *.meta file directly in each directory of path (never the
// executables, never subdirectories; dot files are skipped) and resolves it
// on host. The first .meta to declare a name claims it, even when the tool is
// hidden on this host; a later one with that name gives a *ShadowError
// warning. A .meta that fails to parse claims nothing: its errors are listed
// and a later declaration may take the name. Load always returns a Registry;
// what went wrong is in Errors and Warnings.
func Load(path []string, host meta.Host) *Registry {
	r := &Registry{path: slices.Clone(path), host: host, tools: map[string]*Tool{}}
	claimed := map[string]string{} // name → .meta
	for _, dir := range path {
		ents, err := os.ReadDir(dir)
		if err != nil {
			r.warns = append(r.warns, fmt.Errorf("toolsrv: tools dir %s: %w", dir, err))
			continue
		}
		for _, ent := range ents {
			name := ent.Name()
			if !strings.HasSuffix(name, ".meta") || strings.HasPrefix(name, ".") {
				continue
			}
			file := filepath.Join(dir, name)
			m, errs := meta.ReadFile(file)
			if len(errs) > 0 {
				for _, e := range errs {
					r.errs = append(r.errs, e)
				}
				continue
			}
			if by, ok := claimed[m.Name]; ok {
				r.warns = append(r.warns, &ShadowError{Name: m.Name, File: file, By: by})
				continue
			}
			claimed[m.Name] = file
			t, ex := Resolve(m, dir, host)
			r.explains = append(r.explains, ex)
			if ex.Err != nil {
				r.errs = append(r.errs, ex.Err)
			}
			if t != nil {
				r.tools[t.Name] = t
			}
		}
	}
	slices.SortStableFunc(r.explains, func(a, b *Explanation) int { return strings.Compare(a.Name, b.Name) })
	return r
}

// Reload loads the same tools path on the same host again.
func (r *Registry) Reload() *Registry { return Load(r.path, r.host) }

// Path is the tools path the registry was loaded from.
func (r *Registry) Path() []string { return slices.Clone(r.path) }

// Tools are the tools available on this host, by name. Tools and
// explanations are shared by every user of the registry: do not modify them.
func (r *Registry) Tools() []*Tool {
	ts := make([]*Tool, 0, len(r.tools))
	for _, ex := range r.explains {
		if t, ok := r.tools[ex.Name]; ok {
			ts = append(ts, t)
		}
	}
	return ts
}

// Tool returns the named tool if it is available.
func (r *Registry) Tool(name string) (*Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Explain says, for every declared tool by name, whether it is available,
// hidden or broken here, and why.
func (r *Registry) Explain() []*Explanation { return slices.Clone(r.explains) }

// Errors are the load errors: each is a *meta.Error (a .meta that does not
// parse or whose executable does not resolve, the latter wrapping
// ErrNoExecutable).
func (r *Registry) Errors() []error { return slices.Clone(r.errs) }

// Warnings are what did not stop anything loading: a tools dir that cannot
// be read, and a .meta shadowed by an earlier one (*ShadowError).
func (r *Registry) Warnings() []error { return slices.Clone(r.warns) }

// explanation returns the named tool's explanation, or nil.
func (r *Registry) explanation(name string) *Explanation {
	i, ok := slices.BinarySearchFunc(r.explains, name, func(e *Explanation, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	return r.explains[i]
}

// ErrUnknownTool and ErrNotLoaded are wrapped by Session's errors.
var (
	ErrUnknownTool = errors.New("no such tool on this host")
	ErrNotLoaded   = errors.New("tool not loaded")
)

// unavailable says why name cannot be loaded from r.
func (r *Registry) unavailable(name string) error {
	ex := r.explanation(name)
	switch {
	case ex == nil:
		return fmt.Errorf("toolsrv: %q: %w", name, ErrUnknownTool)
	case ex.Status == Hidden:
		return fmt.Errorf("toolsrv: %q: %w: no variant of %s matches this host", name, ErrUnknownTool, ex.File)
	default:
		return fmt.Errorf("toolsrv: %q: %w: %v", name, ErrUnknownTool, ex.Err)
	}
}

// Session is one agent's view of a registry: the tools it has loaded
// (tool_load, tool_unload), in load order. Revision moves on every change,
// including a new registry, so that a running agent notices and refreshes
// the tools it offers the model. A Session is safe for concurrent use.
type Session struct {
	mu     sync.Mutex
	reg    *Registry
	loaded []string
	rev    changes.Counter // bumped under mu, after the change
}

// NewSession returns a session on r with nothing loaded, at revision 1.
func NewSession(r *Registry) *Session {
	s := &Session{reg: r}
	s.rev.Bump()
	return s
}

// bump records a change; s.mu is held.
func (s *Session) bump() { s.rev.Bump() }

// Registry is the registry the session sees now.
func (s *Session) Registry() *Registry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg
}

// SetRegistry replaces the registry (after a reload). Loaded names stay
// loaded: one that the new registry lacks is left out of Tools until a later
// registry has it again.
func (s *Session) SetRegistry(r *Registry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reg = r
	s.bump()
}

// Load loads the named tool. Loading a loaded tool changes nothing. A tool
// the registry does not offer gives an error wrapping ErrUnknownTool that
// says why (hidden here, broken, or not declared).
func (s *Session) Load(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.reg.Tool(name); !ok {
		return s.reg.unavailable(name)
	}
	if slices.Contains(s.loaded, name) {
		return nil
	}
	s.loaded = append(s.loaded, name)
	s.bump()
	return nil
}

// Unload unloads the named tool; one not loaded gives an error wrapping
// ErrNotLoaded.
func (s *Session) Unload(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.loaded, name)
	if i < 0 {
		return fmt.Errorf("toolsrv: %q: %w", name, ErrNotLoaded)
	}
	s.loaded = slices.Delete(s.loaded, i, i+1)
	s.bump()
	return nil
}

// MovePast has the revision move on past rev: a run of a session's tool
// server after a rest goes on from the last one's revision, so that a
// revision once read never comes back with other tools.
func (s *Session) MovePast(rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev.BumpPast(rev)
}

// Loaded are the names loaded, in load order, whether the current registry
// offers them or not.
func (s *Session) Loaded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loaded)
}

// Tools are the loaded tools the current registry offers, in load order.
func (s *Session) Tools() []*Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ts []*Tool
	for _, n := range s.loaded {
		if t, ok := s.reg.Tool(n); ok {
			ts = append(ts, t)
		}
	}
	return ts
}

// Tool returns the named tool if it is loaded and offered: what a call must
// find before it runs.
func (s *Session) Tool(name string) (*Tool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.loaded, name) {
		return nil, fmt.Errorf("toolsrv: %q: %w (tool_load it first)", name, ErrNotLoaded)
	}
	t, ok := s.reg.Tool(name)
	if !ok {
		return nil, s.reg.unavailable(name)
	}
	return t, nil
}

// Revision is the session's revision: it starts at 1 and moves on every
// Load, Unload and SetRegistry that changes something.
func (s *Session) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev.Load()
}

// Wait blocks until the revision differs from rev, and returns it; or until
// ctx ends, and returns ctx's cause.
func (s *Session) Wait(ctx context.Context, rev uint64) (uint64, error) {
	return s.rev.Wait(ctx, rev)
}

// ClientEnv names the ollie client for tools that reach the namespace
// (client_9p): the olliesrv binary serving it, which is the client too
// when its first argument is "ollie". olliesrv serve sets it in its own
// environment, so that a variant may match on it, and the runner passes
// it on. It lies in {OLLIE_BIN}, which the default profile lets tools
// execute; ~/.local/bin/ollie, the person's command, is not there.
const ClientEnv = "OLLIE_CLIENT"
