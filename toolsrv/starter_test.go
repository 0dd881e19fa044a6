package toolsrv

// Tests of the starter tools in data/tools, each run for real through
// Runner.Run under the deployed sandbox profile (data/sandbox/default.yaml).

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"ollie/broker"
	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
	"ollie/toolsrv/tool"
)

// starterTools are the tools data/tools declares, and nothing else.
var starterTools = []string{
	"client_9p", "file_edit", "file_glob", "file_grep", "file_read",
	"file_write", "reasoning_think", "shell", "system_logs",
}

const starterPython = "/usr/bin/python3"

// starterHost is this machine, except for the binaries and files the test
// makes up or hides, so that each variant can be chosen on purpose.
type starterHost struct {
	meta.LocalHost
	binaries map[string]string // LookPath: a made-up path, or "" for not found
	files    map[string]bool   // Stat of an absolute path: an executable file, or not found
}

func (h starterHost) LookPath(file string) (string, error) {
	if p, ok := h.binaries[file]; ok {
		if p == "" {
			return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
		}
		return p, nil
	}
	return h.LocalHost.LookPath(file)
}

func (h starterHost) Stat(name string) (fs.FileInfo, error) {
	if exists, ok := h.files[name]; ok {
		if !exists {
			return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
		}
		return os.Stat(os.Args[0]) // an executable regular file
	}
	for _, p := range h.binaries {
		if p != "" && p == name {
			return os.Stat(os.Args[0])
		}
	}
	return h.LocalHost.Stat(name)
}

// starterDir is the absolute path of data/tools.
func starterDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../data/tools")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// starterRunner loads data/tools on host, loads every tool available there
// into a session, and returns a Runner for it with a fresh session
// directory.
func starterRunner(t *testing.T, host meta.Host) (*Runner, *Registry, string) {
	t.Helper()
	if _, err := os.Stat(starterPython); err != nil {
		t.Fatalf("the starter tools need %s (Debian's python3 package): %v", starterPython, err)
	}
	dir := starterDir(t)
	reg := Load([]string{dir}, host)
	if errs := reg.Errors(); len(errs) > 0 {
		t.Fatalf("loading %s: %v", dir, errs)
	}
	s := NewSession(reg)
	for _, tool := range reg.Tools() {
		if err := s.Load(tool.Name); err != nil {
			t.Fatal(err)
		}
	}
	cwd := t.TempDir()
	return &Runner{
		Tools:     s,
		Cwd:       cwd,
		Profiles:  sandbox.Profiles{Dirs: []string{"../data/sandbox"}},
		ToolsPath: []string{dir},
		SpillDir:  t.TempDir(),
	}, reg, cwd
}

func explained(t *testing.T, reg *Registry, name string) *Explanation {
	t.Helper()
	for _, ex := range reg.Explain() {
		if ex.Name == name {
			return ex
		}
	}
	t.Fatalf("%s is not declared", name)
	return nil
}

// call runs one call and fails the test unless it succeeded.
func call(t *testing.T, r *Runner, name, args string) string {
	t.Helper()
	res := r.Run(context.Background(), name, json.RawMessage(args))
	if res.Failed {
		t.Fatalf("%s %s failed (exit %d): %s", name, args, res.ExitCode, res.Output)
	}
	if res.Sandbox != "default" {
		t.Errorf("%s ran under sandbox %q, want default", name, res.Sandbox)
	}
	return res.Output
}

// callFails runs one call that must fail and returns its output.
func callFails(t *testing.T, r *Runner, name, args string) *tool.Result {
	t.Helper()
	res := r.Run(context.Background(), name, json.RawMessage(args))
	if !res.Failed {
		t.Fatalf("%s %s succeeded, want a failure: %s", name, args, res.Output)
	}
	return res
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func wantIn(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q not in:\n%s", what, w, got)
		}
	}
}

func wantNotIn(t *testing.T, what, got string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(got, w) {
			t.Errorf("%s: %q should not be in:\n%s", what, w, got)
		}
	}
}

// TestStarterRegistry checks that data/tools declares the starter set,
// that every .meta loads without errors or warnings, and that each
// declaration follows the house rules: a one-line description, a prompt
// with an example, a closed args schema, executables a sandboxed tool can
// run.
func TestStarterRegistry(t *testing.T) {
	dir := starterDir(t)
	metas, err := filepath.Glob(filepath.Join(dir, "*.meta"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range metas {
		names = append(names, strings.TrimSuffix(filepath.Base(m), ".meta"))
	}
	for _, name := range starterTools {
		if !slices.Contains(names, name) {
			t.Errorf("data/tools does not declare %s", name)
		}
	}

	_, reg, _ := starterRunner(t, meta.LocalHost{})
	if w := reg.Warnings(); len(w) > 0 {
		t.Errorf("warnings: %v", w)
	}
	for _, ex := range reg.Explain() {
		switch {
		case ex.Status == Broken:
			t.Errorf("%s is broken: %v", ex.Name, ex.Err)
		case ex.Name == "client_9p" || ex.Name == "system_logs":
			// Depend on the host: tested below.
		case ex.Status != Available:
			t.Errorf("%s is %s here, want available:\n%s", ex.Name, ex.Status, ex)
		}
	}

	checkStarterDefinitions(t, dir, names)
	checkStarterExecutables(t, dir)

	// Scopes, for the parallel scheduler.
	scopes := map[string]tool.ScopeKind{
		"file_read": tool.ScopeRead, "file_grep": tool.ScopeRead, "file_glob": tool.ScopeRead, "reasoning_think": tool.ScopeRead,
		"file_write": tool.ScopeWrite, "file_edit": tool.ScopeWrite, "shell": tool.ScopeGlobal,
	}
	for name, want := range scopes {
		got, ok := reg.Tool(name)
		if !ok {
			continue // reported above
		}
		if got.ScopeKind != want || want == tool.ScopeWrite && got.ScopeArg != "path" {
			t.Errorf("%s: scope %s (arg %q), want %s", name, got.ScopeKind, got.ScopeArg, want)
		}
	}
}

// checkStarterDefinitions checks that every definition of every variant
// of the named tools, as a host where all its conditions hold would
// resolve it, follows the rules.
func checkStarterDefinitions(t *testing.T, dir string, names []string) {
	t.Helper()
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name+".meta"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := meta.Parse(filepath.Join(dir, name+".meta"), data)
		if err != nil {
			t.Fatal(err)
		}
		defs := []meta.Fields{m.Fields}
		if m.Variants != nil {
			defs = defs[:0]
			for _, v := range m.Variants {
				defs = append(defs, meta.Merge(m.Fields, v.Fields))
			}
		}
		for i, f := range defs {
			where := name
			if m.Variants != nil {
				where = name + ".variants[" + strconv.Itoa(i) + "]"
			}
			if f.Description == nil || strings.Contains(*f.Description, "\n") {
				t.Errorf("%s: the description must be one line", where)
			}
			if f.Prompt == nil || !strings.HasPrefix(*f.Prompt, "## "+name+"\n") || !strings.Contains(*f.Prompt, "```\n"+name+"(") {
				t.Errorf("%s: the prompt must start with \"## %s\" and show an example call", where, name)
			}
			var schema struct {
				Type       string                     `json:"type"`
				Required   []string                   `json:"required"`
				Additional *bool                      `json:"additionalProperties"`
				Properties map[string]json.RawMessage `json:"properties"`
			}
			if err := json.Unmarshal(f.Args, &schema); err != nil {
				t.Errorf("%s: args: %v", where, err)
				continue
			}
			if schema.Type != "object" || schema.Required == nil || schema.Additional == nil || *schema.Additional || len(schema.Properties) == 0 {
				t.Errorf("%s: args must be an object schema with required, additionalProperties: false and properties", where)
			}
			for p, raw := range schema.Properties {
				var prop struct{ Description string }
				if json.Unmarshal(raw, &prop) != nil || prop.Description == "" {
					t.Errorf("%s: args.properties.%s has no description", where, p)
				}
			}
		}
	}
}

// checkStarterExecutables checks that the executables are runnable by the
// sandbox, with an interpreter the sandbox lets them execute (not a pyenv
// shim under $HOME).
func checkStarterExecutables(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".meta") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		// Git keeps only the executable bit; the rest follows the umask
		// of whoever checked out (0775 under a umask of 002).
		if perm := fi.Mode().Perm(); !fi.Mode().IsRegular() || perm&0o555 != 0o555 || perm&0o002 != 0 {
			t.Errorf("%s: mode %v, want a regular file everyone may read and run, and no one else write", e.Name(), fi.Mode())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		if first != "#!/usr/bin/python3 -I" && first != "#!/bin/sh" {
			t.Errorf("%s: interpreter line %q, want #!/usr/bin/python3 -I or #!/bin/sh", e.Name(), first)
		}
	}
}

// TestStarterHiddenWithoutPython checks that a host without
// /usr/bin/python3 hides the Python tools and keeps the others.
func TestStarterHiddenWithoutPython(t *testing.T) {
	reg := Load([]string{starterDir(t)}, starterHost{
		binaries: map[string]string{"jq": "/usr/bin/jq", "ollie": "/usr/local/bin/ollie"},
		files:    map[string]bool{starterPython: false},
	})
	if errs := reg.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	var avail []string
	for _, tool := range reg.Tools() {
		avail = append(avail, tool.Name)
	}
	if want := []string{"reasoning_think", "shell"}; !slices.Equal(avail, want) {
		t.Errorf("without Python: %v available, want %v", avail, want)
	}
	if ex := explained(t, reg, "shell"); ex.Variant != 1 || !strings.Contains(ex.String(), `binary "jq"`) {
		t.Errorf("shell without Python should read its arguments with jq:\n%s", ex)
	}
}

// TestStarterFiles writes, reads and edits files through file_write,
// file_read and file_edit.
func TestStarterFiles(t *testing.T) {
	r, _, cwd := starterRunner(t, meta.LocalHost{})

	// A round trip, creating parent directories.
	content := "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n"
	out := call(t, r, "file_write", `{"path": "src/cmd/main.go", "content": `+jsonString(content)+`}`)
	wantIn(t, "file_write", out, "created src/cmd/main.go", "5 lines")
	if b, err := os.ReadFile(filepath.Join(cwd, "src/cmd/main.go")); err != nil || string(b) != content {
		t.Fatalf("file on disk: %q, %v", b, err)
	}
	out = call(t, r, "file_read", `{"path": "src/cmd/main.go"}`)
	want := "     1\tpackage main\n     2\t\n     3\tfunc main() {\n     4\t\tprintln(\"hello\")\n     5\t}\n"
	if out != want {
		t.Errorf("file_read:\n%s\nwant:\n%s", out, want)
	}
	out = call(t, r, "file_read", `{"path": "`+filepath.Join(cwd, "src/cmd/main.go")+`", "offset": 3, "limit": 2}`)
	wantIn(t, "file_read offset", out, "     3\tfunc main() {\n     4\t\tprintln(\"hello\")\n", "[lines 3-4 of 5; to read on, call file_read with offset 5]")
	wantNotIn(t, "file_read offset", out, "package")
	out = call(t, r, "file_write", `{"path": "src/cmd/main.go", "content": "x"}`)
	wantIn(t, "file_write again", out, "overwrote src/cmd/main.go (1 byte, 1 line; it had "+strconv.Itoa(len(content))+" bytes)")
	call(t, r, "file_write", `{"path": "src/cmd/main.go", "content": `+jsonString(content)+`}`)

	// Reading what is not a text file.
	res := callFails(t, r, "file_read", `{"path": "src/cmd/mian.go"}`)
	wantIn(t, "missing file", res.Output, "no such file: src/cmd/mian.go", "did you mean src/cmd/main.go?")
	res = callFails(t, r, "file_read", `{"path": "src"}`)
	wantIn(t, "directory", res.Output, "src is a directory")
	if err := os.WriteFile(filepath.Join(cwd, "blob"), []byte("ELF\x00\x01\x02"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = callFails(t, r, "file_read", `{"path": "blob"}`)
	wantIn(t, "binary", res.Output, "blob looks like a binary file")
	res = callFails(t, r, "file_read", `{"path": "src/cmd/main.go", "offset": 9}`)
	wantIn(t, "offset past the end", res.Output, "offset 9 is past the end: src/cmd/main.go has 5 lines")
	res = callFails(t, r, "file_read", `{"path": "src/cmd/main.go", "lines": 9}`)
	wantIn(t, "schema", res.Output, "invalid arguments for file_read")

	// The sandbox holds: nothing outside the session's directory (and
	// system directories) can be read or written.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("hunter2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = callFails(t, r, "file_read", `{"path": "`+outside+`/secret"}`)
	wantIn(t, "read outside", res.Output, "permission denied", "sandbox")
	wantNotIn(t, "read outside", res.Output, "hunter2")
	res = callFails(t, r, "file_write", `{"path": "`+outside+`/new/file", "content": "x"}`)
	wantIn(t, "write outside", res.Output, "permission denied", "sandbox")
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("file_write created a directory outside the sandbox")
	}

	// file_edit: one exact match.
	out = call(t, r, "file_edit", `{"path": "src/cmd/main.go", "old_string": "println(\"hello\")", "new_string": "println(\"hello, world\")"}`)
	wantIn(t, "file_edit", out, "replaced 1 occurrence in src/cmd/main.go at line 4", "     4\t\tprintln(\"hello, world\")")
	edited := strings.Replace(content, `"hello"`, `"hello, world"`, 1)
	if b, _ := os.ReadFile(filepath.Join(cwd, "src/cmd/main.go")); string(b) != edited {
		t.Errorf("after file_edit:\n%s\nwant:\n%s", b, edited)
	}

	// No match: the closest lines, numbered, and how they differ.
	res = callFails(t, r, "file_edit", `{"path": "src/cmd/main.go", "old_string": "func main() {\n    println(\"hello, world\")", "new_string": "x"}`)
	wantIn(t, "missing match", res.Output, "old_string was not found in src/cmd/main.go",
		"the closest text is at lines 3-4", "     3\tfunc main() {", "-    println(\"hello, world\")", "+\tprintln(\"hello, world\")")
	if b, _ := os.ReadFile(filepath.Join(cwd, "src/cmd/main.go")); string(b) != edited {
		t.Error("a failed file_edit changed the file")
	}

	// Several matches: how many and where, and what to do.
	call(t, r, "file_write", `{"path": "dup.txt", "content": "a = 1\nb = 2\na = 1\nc = 3\na = 1\n"}`)
	res = callFails(t, r, "file_edit", `{"path": "dup.txt", "old_string": "a = 1", "new_string": "a = 9"}`)
	wantIn(t, "ambiguous", res.Output, "old_string occurs 3 times in dup.txt (at lines 1, 3, 5)", "more surrounding lines", "replace_all")
	out = call(t, r, "file_edit", `{"path": "dup.txt", "old_string": "b = 2\na = 1", "new_string": "b = 2\na = 2"}`)
	wantIn(t, "disambiguated", out, "replaced 1 occurrence in dup.txt at line 2")
	out = call(t, r, "file_edit", `{"path": "dup.txt", "old_string": "a = 1", "new_string": "a = 9", "replace_all": true}`)
	wantIn(t, "replace_all", out, "replaced 2 occurrences in dup.txt (at lines 1, 5)")
	if b, _ := os.ReadFile(filepath.Join(cwd, "dup.txt")); string(b) != "a = 9\nb = 2\na = 2\nc = 3\na = 9\n" {
		t.Errorf("after replace_all: %q", b)
	}
	res = callFails(t, r, "file_edit", `{"path": "nope.txt", "old_string": "a", "new_string": "b"}`)
	wantIn(t, "edit missing file", res.Output, "no such file: nope.txt", "file_write")
	res = callFails(t, r, "file_edit", `{"path": "dup.txt", "old_string": "a = 9", "new_string": "a = 9"}`)
	wantIn(t, "no change", res.Output, "nothing to change")
}

// TestStarterSearch finds files with file_glob and lines with file_grep,
// in every variant file_grep has.
func TestStarterSearch(t *testing.T) {
	for _, tc := range []struct {
		name string
		host meta.Host
		want int // file_grep's variant
	}{
		{"rg", starterHost{binaries: map[string]string{"rg": "/usr/local/bin/rg"}}, 0},
		{"builtin", starterHost{binaries: map[string]string{"rg": ""}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, reg, cwd := starterRunner(t, tc.host)
			if ex := explained(t, reg, "file_grep"); ex.Status != Available || ex.Variant != tc.want {
				t.Fatalf("file_grep resolved to variant %d, want %d:\n%s", ex.Variant, tc.want, ex)
			}
			files := map[string]string{
				"a.go":          "package a\n\nfunc Hello() string { return \"hi\" }\n",
				"sub/deep/b.go": "package deep\n\n// TODO: more\nfunc hello() {}\n",
				"notes.txt":     "func Hello is documented here\nTODO: nothing\n",
				".hidden/c.go":  "func Hidden() {}\n",
			}
			for name, content := range files {
				p := filepath.Join(cwd, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			out := call(t, r, "file_grep", `{"pattern": "func \\w+\\(", "glob": "*.go"}`)
			wantIn(t, "file_grep", out, "a.go:3:func Hello() string", "sub/deep/b.go:4:func hello() {}")
			wantNotIn(t, "file_grep", out, "notes.txt", "Hidden")
			out = call(t, r, "file_grep", `{"pattern": "todo", "ignore_case": true, "path": "sub"}`)
			wantIn(t, "file_grep ignore_case", out, "sub/deep/b.go:3:// TODO: more")
			wantNotIn(t, "file_grep ignore_case", out, "notes.txt")
			out = call(t, r, "file_grep", `{"pattern": "nowhere to be found"}`)
			wantIn(t, "file_grep no match", out, `no matches for "nowhere to be found"`)
			res := callFails(t, r, "file_grep", `{"pattern": "func (", "path": "a.go"}`)
			wantIn(t, "file_grep bad regex", res.Output, "file_grep")
			res = callFails(t, r, "file_grep", `{"pattern": "x", "path": "missing"}`)
			wantIn(t, "file_grep missing path", res.Output, "no such file or directory: missing")

			out = call(t, r, "file_glob", `{"pattern": "**/*.go"}`)
			if out != "a.go\nsub/deep/b.go\n" {
				t.Errorf("file_glob **/*.go:\n%s", out)
			}
			out = call(t, r, "file_glob", `{"pattern": "*.{txt,go}"}`)
			if out != "a.go\nnotes.txt\n" {
				t.Errorf("file_glob *.{txt,go}:\n%s", out)
			}
			out = call(t, r, "file_glob", `{"pattern": "*/*.go", "path": "sub"}`)
			if out != "sub/deep/b.go\n" {
				t.Errorf("file_glob in sub:\n%s", out)
			}
			out = call(t, r, "file_glob", `{"pattern": ".hidden/*"}`)
			if out != ".hidden/c.go\n" {
				t.Errorf("file_glob .hidden/*:\n%s", out)
			}
			out = call(t, r, "file_glob", `{"pattern": "**/*.rs"}`)
			wantIn(t, "file_glob no match", out, `no files match "**/*.rs"`)
			res = callFails(t, r, "file_glob", `{"pattern": "*", "path": "a.go"}`)
			wantIn(t, "file_glob on a file", res.Output, "a.go is a file, not a directory")
		})
	}
}

// TestStarterShell runs commands through shell, and reasoning_think.
func TestStarterShell(t *testing.T) {
	r, _, cwd := starterRunner(t, meta.LocalHost{})

	res := callFails(t, r, "shell", `{"command": "echo hi; exit 3"}`)
	if res.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", res.ExitCode)
	}
	wantIn(t, "shell exit 3", res.Output, "exit status 3", "hi")

	out := call(t, r, "shell", `{"command": "echo out; echo err >&2; pwd; echo made > made.txt"}`)
	if want := "out\nerr\n" + cwd + "\n"; out != want {
		t.Errorf("shell output %q, want %q (stdout and stderr in order, in the session directory)", out, want)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "made.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("the command's file: %q, %v", b, err)
	}

	res = callFails(t, r, "shell", `{"command": "kill -TERM $$"}`)
	wantIn(t, "shell killed", res.Output, "exit status 143", "killed by signal 15")

	res = callFails(t, r, "shell", `{"command": "   "}`)
	wantIn(t, "shell blank", res.Output, `"command" must be a non-empty string`)

	out = call(t, r, "reasoning_think", `{"thought": "first read the file, then edit it"}`)
	if out != "Thought noted. Continue with the next step.\n" {
		t.Errorf("reasoning_think: %q", out)
	}
	res = callFails(t, r, "reasoning_think", `{}`)
	wantIn(t, "reasoning_think without a thought", res.Output, `missing required argument "thought"`)
}

// approveAll approves every elevation: a broker whose user says yes.
type approveAll struct{}

func (approveAll) Approve(context.Context, *broker.Request) (broker.Grant, error) {
	return approveAll{}, nil
}

func (approveAll) Password(context.Context, int, string) ([]byte, error) {
	return nil, errors.New("approveAll has no password")
}

func (approveAll) Close(string) error { return nil }

// TestStarterSystemLogs checks system_logs' variants: what this host
// resolves to and what it does under the sandbox, and on made-up hosts the
// syslog variant and the dmesg one, which needs sudo and so is denied
// without an approval broker.
func TestStarterSystemLogs(t *testing.T) {
	r, reg, _ := starterRunner(t, meta.LocalHost{})
	ex := explained(t, reg, "system_logs")
	switch ex.Status {
	case Hidden:
		// No journalctl, syslog file nor dmesg here: nothing to run.
	case Available:
		res := r.Run(context.Background(), "system_logs", json.RawMessage(`{"lines": 5}`))
		// Under the default profile /var/log is not readable: the tool
		// says so and what to do, unless this host keeps logs elsewhere
		// (or none).
		if res.Failed && !strings.Contains(res.Output, `"bypass": true`) && !strings.Contains(res.Output, "keeps no logs") &&
			!strings.Contains(res.Output, "neither") {
			t.Errorf("system_logs (%s) failed without saying why:\n%s", ex, res.Output)
		}
		if ex.Variant == 0 {
			// Outside the sandbox, approved, journalctl runs.
			r.Approver = approveAll{}
			res = r.Run(context.Background(), "system_logs", json.RawMessage(`{"lines": 5, "priority": "err", "bypass": true}`))
			if res.Sandbox != "none" || res.Failed && !strings.Contains(res.Output, "keeps no logs") &&
				!strings.Contains(res.Output, "may not read the system journal") {
				t.Errorf("system_logs with bypass (%s): %+v", res.Sandbox, res)
			}
			r.Approver = nil
		}
	default:
		t.Fatalf("system_logs is %s:\n%s", ex.Status, ex)
	}

	noLogs := map[string]bool{"/var/log/syslog": false, "/var/log/messages": false}

	// A host with syslog but no journald.
	withSyslog := map[string]bool{"/var/log/syslog": true, "/var/log/messages": false}
	r, reg, _ = starterRunner(t, starterHost{binaries: map[string]string{"journalctl": ""}, files: withSyslog})
	if ex := explained(t, reg, "system_logs"); ex.Status != Available || ex.Variant != 1 ||
		filepath.Base(ex.Executable) != "system_logs_syslog" {
		t.Fatalf("system_logs on a syslog host:\n%s", ex)
	}
	// This host's /var/log/syslog is either missing or not readable in the
	// sandbox; either way the tool names it.
	res := callFails(t, r, "system_logs", `{"lines": 5, "grep": "error"}`)
	wantIn(t, "syslog", res.Output, "/var/log/syslog")

	// A host with neither: the kernel's messages, as root.
	r, reg, _ = starterRunner(t, starterHost{binaries: map[string]string{"journalctl": "", "dmesg": "/usr/bin/dmesg"}, files: noLogs})
	ex = explained(t, reg, "system_logs")
	tool, ok := reg.Tool("system_logs")
	if ex.Status != Available || ex.Variant != 3 || !ok || !tool.Sudo || !tool.Elevated ||
		filepath.Base(ex.Executable) != "system_logs_dmesg" {
		t.Fatalf("system_logs with only dmesg: want variant 3, sudo:\n%s", ex)
	}
	if !strings.Contains(ex.String(), `binary "dmesg" found at /usr/bin/dmesg`) {
		t.Errorf("explanation does not say why the dmesg variant was chosen:\n%s", ex)
	}
	res = callFails(t, r, "system_logs", `{"lines": 5}`)
	if res.ExitCode != -1 {
		t.Errorf("the sudo variant ran (exit %d)", res.ExitCode)
	}
	wantIn(t, "sudo without a broker", res.Output, "to run as root (sudo)", "no approval broker")

	// A host with none of them: hidden.
	_, reg, _ = starterRunner(t, starterHost{binaries: map[string]string{"journalctl": "", "dmesg": ""}, files: noLogs})
	if ex := explained(t, reg, "system_logs"); ex.Status != Hidden || len(ex.Skipped) != 4 {
		t.Errorf("system_logs with no logs: want hidden after 4 variants:\n%s", ex)
	}
}

// TestStarterClient9p checks that client_9p is offered only where the
// ollie client is, and runs it: the test's fake ollie records its
// arguments and input, and answers like the real one.
func TestStarterClient9p(t *testing.T) {
	_, reg, _ := starterRunner(t, starterHost{binaries: map[string]string{"ollie": ""}})
	if ex := explained(t, reg, "client_9p"); ex.Status != Hidden || !strings.Contains(ex.String(), `binary "ollie" not found in PATH`) {
		t.Errorf("client_9p without ollie:\n%s", ex)
	}
	if err := NewSession(reg).Load("client_9p"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("loading client_9p without ollie: %v", err)
	}

	// The fake lives under the session's directory, which the sandbox
	// lets tools execute from.
	cwdHolder := t.TempDir()
	bin := filepath.Join(cwdHolder, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := `#!/bin/sh
log="$(dirname "$0")/../calls"
echo "args: $*" >> "$log"
case $4 in
down) echo "ollie: no olliesrv at $2 (start it with 'olliesrv')" >&2; exit 3 ;;
nope) echo "ollie: /nope: file does not exist" >&2; exit 1 ;;
stream) echo first; exec sleep 60 ;;
esac
case $3 in
ls) printf 'help\nsession/\n' ;;
rdwr) printf 'stdin: '; cat >> "$log"; echo proj ;;
write) cat >> "$log" ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "ollie"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	r, reg, _ := starterRunner(t, meta.LocalHost{})
	r.Cwd = cwdHolder
	ex := explained(t, reg, "client_9p")
	if ex.Status != Available || !strings.Contains(ex.String(), `binary "ollie" found at `+filepath.Join(bin, "ollie")) {
		t.Fatalf("client_9p with ollie in PATH:\n%s", ex)
	}

	name := os.Getenv("USER")
	if name == "" {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		name = u.Username
	}
	addr := "/tmp/ns." + name + ".:0/ollie"

	out := call(t, r, "client_9p", `{"op": "ls", "path": "/"}`)
	if out != "help\nsession/\n" {
		t.Errorf("ls: %q", out)
	}
	out = call(t, r, "client_9p", `{"op": "rdwr", "path": "session/new", "data": "name=proj cwd=/srv\n"}`)
	if out != "stdin: proj\n" {
		t.Errorf("rdwr: %q", out)
	}
	out = call(t, r, "client_9p", `{"op": "write", "path": "session/proj/name", "data": "renamed"}`)
	if out != "wrote 7 bytes to session/proj/name\n" {
		t.Errorf("write: %q", out)
	}
	res := callFails(t, r, "client_9p", `{"op": "read", "path": "nope"}`)
	wantIn(t, "read of a missing file", res.Output, "/nope: file does not exist")
	res = callFails(t, r, "client_9p", `{"op": "read", "path": "down"}`)
	wantIn(t, "no server", res.Output, "cannot reach the namespace at "+addr, "Is olliesrv running")
	res = callFails(t, r, "client_9p", `{"op": "ls", "path": "/", "data": "x"}`)
	wantIn(t, "data for ls", res.Output, `"data" is only for the ops write and rdwr`)
	res = callFails(t, r, "client_9p", `{"op": "rdwr", "path": "ctl"}`)
	wantIn(t, "rdwr without data", res.Output, `op "rdwr" needs "data"`)
	out = call(t, r, "client_9p", `{"op": "read", "path": "stream", "wait": 1}`)
	wantIn(t, "stream", out, "first\n", "[stopped: stream was still sending after 1 s")

	calls, err := os.ReadFile(filepath.Join(cwdHolder, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	want := "args: -a " + addr + " ls /\n" +
		"args: -a " + addr + " rdwr session/new\nname=proj cwd=/srv\n" +
		"args: -a " + addr + " write session/proj/name\nrenamed" +
		"args: -a " + addr + " read nope\n" +
		"args: -a " + addr + " read down\n" +
		"args: -a " + addr + " read stream\n"
	if string(calls) != want {
		t.Errorf("the fake ollie was run as:\n%s\nwant:\n%s", calls, want)
	}
}

// TestStarterClient9pOwnClient (issue 31, item 4): where olliesrv names
// itself as the client ($OLLIE_CLIENT, as olliesrv serve sets it),
// client_9p is offered whether or not ollie is in PATH, and runs that
// binary as "CLIENT ollie …": a file under {OLLIE_BIN}, where the sandbox
// lets tools execute, not the person's ~/.local/bin/ollie.
func TestStarterClient9pOwnClient(t *testing.T) {
	cwdHolder := t.TempDir()
	client := filepath.Join(cwdHolder, "olliesrv")
	fake := `#!/bin/sh
echo "args: $*" >> "$(dirname "$0")/calls"
printf 'help\nsession/\n'
`
	if err := os.WriteFile(client, []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ClientEnv, client)
	r, reg, _ := starterRunner(t, starterHost{binaries: map[string]string{"ollie": ""}})
	r.Cwd = cwdHolder
	ex := explained(t, reg, "client_9p")
	if ex.Status != Available || !strings.Contains(ex.String(), "env OLLIE_CLIENT is set") {
		t.Fatalf("client_9p with OLLIE_CLIENT and no ollie in PATH:\n%s", ex)
	}
	if out := call(t, r, "client_9p", `{"op": "ls", "path": "/"}`); out != "help\nsession/\n" {
		t.Errorf("ls: %q", out)
	}
	calls, _ := os.ReadFile(filepath.Join(cwdHolder, "calls"))
	if !strings.HasPrefix(string(calls), "args: ollie -a ") || !strings.HasSuffix(string(calls), " ls /\n") {
		t.Errorf("the client was run as %q, want ollie -a ADDR ls /", calls)
	}
}
