package toolsrv

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/toolsrv/meta"
	"ollie/toolsrv/tool"
)

// fakeHost is a host whose PATH, environment, OS and arch are the test's.
// Stat sees the real files under root (the test's temporary directory) and,
// elsewhere, only the invented files of files, so that the real machine's
// /var/log/syslog never decides a test.
type fakeHost struct {
	root   string
	path   []string               // PATH, directories under root
	files  map[string]fs.FileMode // invented files outside root
	env    map[string]string
	goos   string
	goarch string
}

func (h *fakeHost) LookPath(file string) (string, error) {
	for _, d := range h.path {
		if p := filepath.Join(d, file); meta.Executable(h, p) {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

func (h *fakeHost) Stat(name string) (fs.FileInfo, error) {
	if mode, ok := h.files[name]; ok {
		return fakeInfo{name: filepath.Base(name), mode: mode}, nil
	}
	if h.root != "" && (name == h.root || strings.HasPrefix(name, h.root+"/")) {
		return os.Stat(name)
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

func (h *fakeHost) Getenv(key string) string { return h.env[key] }
func (h *fakeHost) GOOS() string             { return h.goos }
func (h *fakeHost) GOARCH() string           { return h.goarch }

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (i fakeInfo) Name() string       { return i.name }
func (i fakeInfo) Size() int64        { return 0 }
func (i fakeInfo) Mode() fs.FileMode  { return i.mode }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fakeInfo) Sys() any           { return nil }

// writeFile writes a file under dir, creating dir.
func writeFile(t *testing.T, dir, name, content string, perm fs.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeExec writes an executable script.
func writeExec(t *testing.T, dir, name string) string {
	t.Helper()
	return writeFile(t, dir, name, "#!/bin/sh\ncat\n", 0o755)
}

func mustParse(t *testing.T, file, content string) *meta.Meta {
	t.Helper()
	m, err := meta.Parse(file, []byte(content))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m
}

// variantsMerged has variants that override the top level's fields, and
// variantsConds variants on each kind of condition.
const variantsMerged = `{
	"description": "top",
	"prompt": "top prompt",
	"tier": "warm",
	"timeout": 30,
	"readOnly": true,
	"replaySafe": true,
	"args": {"type": "object", "properties": {"q": {"type": "string"}}},
	"variants": [
		{"match": {"os": "darwin"}, "cmd": "mac_cmd", "tier": "cold"},
		{"match": {"os": "linux", "arch": "arm64"}, "cmd": "arm_cmd", "description": "on arm",
		 "args": {"type": "object", "properties": {"r": {"type": "integer"}}}},
		{"match": {"os": "linux"}, "cmd": "linux_cmd", "timeout": 0, "readOnly": false, "sudo": true}
	]
}`
const variantsConds = `{
	"description": "conditions",
	"variants": [
		{"match": {"env": "DISPLAY", "nenv": "SSH_CONNECTION"}, "cmd": "gui"},
		{"match": {"binary": "/opt/tool/bin/x"}, "cmd": "abs"},
		{"match": {}, "cmd": "fallback"}
	]
}`

// variantWant is what a resolved tool must be: hidden, or these fields.
type variantWant struct {
	hidden      bool
	variant     int
	cmd         string
	description string
	prompt      string
	tier        tool.Tier
	timeout     time.Duration
	readOnly    bool
	scope       tool.ScopeKind
	sudo        bool
	elevated    bool
	replaySafe  bool
	argsHas     string // a property of the tool's own schema
}

// variantCases are .meta files on fake hosts: which variant wins, what
// merges in from the top level, and when the tool is hidden.
var variantCases = []struct {
	name   string
	seed   bool // meta is testdata/system_logs.meta
	meta   string
	path   []string // executables in the fake PATH
	files  map[string]fs.FileMode
	env    map[string]string
	goos   string
	goarch string
	want   variantWant
}{
	{
		name: "seed: journald host", seed: true, path: []string{"journalctl"},
		files: map[string]fs.FileMode{"/var/log/syslog": 0o644},
		want: variantWant{variant: 0, cmd: "system_logs_journald", description: "Read system logs (journald).",
			tier: tool.TierHot, timeout: meta.DefaultTimeout, readOnly: true, scope: tool.ScopeRead, argsHas: "unit"},
	},
	{
		name: "seed: syslog host", seed: true,
		files: map[string]fs.FileMode{"/var/log/syslog": 0o644},
		want: variantWant{variant: 1, cmd: "system_logs_syslog", description: "Read system logs (syslog).",
			tier: tool.TierHot, timeout: meta.DefaultTimeout, readOnly: true, scope: tool.ScopeRead, argsHas: "grep"},
	},
	{
		name: "seed: neither, hidden", seed: true, path: []string{"dmesg"},
		want: variantWant{hidden: true},
	},
	{
		name: "merge: first match wins over a later one", meta: variantsMerged, goos: "darwin", goarch: "arm64",
		want: variantWant{variant: 0, cmd: "mac_cmd", description: "top", prompt: "top prompt", tier: tool.TierCold,
			timeout: 30 * time.Second, readOnly: true, scope: tool.ScopeRead, replaySafe: true, argsHas: "q"},
	},
	{
		name: "merge: variant args and description replace the top level", meta: variantsMerged, goos: "linux", goarch: "arm64",
		want: variantWant{variant: 1, cmd: "arm_cmd", description: "on arm", prompt: "top prompt", tier: tool.TierWarm,
			timeout: 30 * time.Second, readOnly: true, scope: tool.ScopeRead, replaySafe: true, argsHas: "r"},
	},
	{
		name: "merge: a variant's zero values override", meta: variantsMerged, goos: "linux", goarch: "amd64",
		want: variantWant{variant: 2, cmd: "linux_cmd", description: "top", prompt: "top prompt", tier: tool.TierWarm,
			timeout: 0, readOnly: false, scope: tool.ScopeGlobal, sudo: true, elevated: true, replaySafe: true, argsHas: "q"},
	},
	{
		name: "merge: no variant for this OS", meta: variantsMerged, goos: "freebsd", goarch: "amd64",
		want: variantWant{hidden: true},
	},
	{
		name: "env and nenv both hold", meta: variantsConds, env: map[string]string{"DISPLAY": ":0"},
		want: variantWant{variant: 0, cmd: "gui", description: "conditions", tier: tool.TierHot, timeout: meta.DefaultTimeout, scope: tool.ScopeGlobal},
	},
	{
		name: "nenv fails, absolute binary holds", meta: variantsConds,
		env:   map[string]string{"DISPLAY": ":0", "SSH_CONNECTION": "1.2.3.4"},
		files: map[string]fs.FileMode{"/opt/tool/bin/x": 0o755},
		want:  variantWant{variant: 1, cmd: "abs", description: "conditions", tier: tool.TierHot, timeout: meta.DefaultTimeout, scope: tool.ScopeGlobal},
	},
	{
		name: "absolute binary not executable, empty match catches all", meta: variantsConds,
		files: map[string]fs.FileMode{"/opt/tool/bin/x": 0o644},
		want:  variantWant{variant: 2, cmd: "fallback", description: "conditions", tier: tool.TierHot, timeout: meta.DefaultTimeout, scope: tool.ScopeGlobal},
	},
}

// TestVariants resolves each of variantCases on its fake host.
func TestVariants(t *testing.T) {
	seed, err := os.ReadFile("testdata/system_logs.meta")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range variantCases {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tools, bin := filepath.Join(root, "tools"), filepath.Join(root, "bin")
			for _, p := range tt.path {
				writeExec(t, bin, p)
			}
			// Every cmd resolves from the tools dir, so that only variants decide.
			for _, c := range []string{"system_logs_journald", "system_logs_syslog", "mac_cmd", "arm_cmd", "linux_cmd", "gui", "abs", "fallback"} {
				writeExec(t, tools, c)
			}
			h := &fakeHost{root: root, path: []string{bin}, files: tt.files, env: tt.env, goos: tt.goos, goarch: tt.goarch}
			if h.goos == "" {
				h.goos, h.goarch = "linux", "amd64"
			}
			src := tt.meta
			if tt.seed {
				src = string(seed)
			}
			m := mustParse(t, filepath.Join(tools, "x.meta"), src)
			tool, ex := Resolve(m, tools, h)
			if tt.want.hidden {
				if tool != nil || ex.Status != Hidden || len(ex.Skipped) != len(m.Variants) {
					t.Fatalf("got tool %v, explanation %s; want hidden with every variant skipped", tool, ex)
				}
				return
			}
			if tool == nil {
				t.Fatalf("hidden or broken: %s", ex)
			}
			w := tt.want
			got := variantWant{variant: tool.Variant, cmd: tool.Cmd, description: tool.Description, prompt: tool.Prompt,
				tier: tool.Tier, timeout: tool.Timeout, readOnly: tool.ReadOnly, scope: tool.ScopeKind,
				sudo: tool.Sudo, elevated: tool.Elevated, replaySafe: tool.ReplaySafe, argsHas: w.argsHas}
			if tt.seed {
				got.prompt = "" // the seed's prompts are long; the description pins the variant
			}
			if got != w {
				t.Errorf("got  %+v\nwant %+v", got, w)
			}
			if want := filepath.Join(tools, w.cmd); tool.Path != want {
				t.Errorf("Path = %s, want %s", tool.Path, want)
			}
			if w.argsHas != "" && !strings.Contains(string(tool.Args()), `"`+w.argsHas+`"`) {
				t.Errorf("Args() = %s, want property %q", tool.Args(), w.argsHas)
			}
			if ex.Status != Available || ex.Variant != w.variant || len(ex.Skipped) != w.variant {
				t.Errorf("explanation %+v does not match variant %d", ex, w.variant)
			}
		})
	}
}

// TestExplanation pins the text `olliesrv tools` prints.
func TestExplanation(t *testing.T) {
	root := t.TempDir()
	tools, bin := filepath.Join(root, "tools"), filepath.Join(root, "bin")
	seed, err := os.ReadFile("testdata/system_logs.meta")
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, tools, "system_logs.meta", string(seed), 0o644)
	syslog := writeExec(t, tools, "system_logs_syslog")
	m := mustParse(t, file, string(seed))

	tests := []struct {
		name  string
		host  *fakeHost
		setup func()
		want  string
	}{
		{
			name: "chosen after a skip",
			host: &fakeHost{root: root, path: []string{bin}, files: map[string]fs.FileMode{"/var/log/syslog": 0o644}},
			want: "system_logs (" + file + `): variants[1] (file "/var/log/syslog" exists)` +
				"\n  variants[0] skipped: binary \"journalctl\" not found in PATH" +
				"\n  executable: " + syslog + ` (cmd "system_logs_syslog", in the tools dir)`,
		},
		{
			name: "hidden",
			host: &fakeHost{root: root, path: []string{bin}},
			want: "system_logs (" + file + "): hidden: no variant matches this host" +
				"\n  variants[0] skipped: binary \"journalctl\" not found in PATH" +
				"\n  variants[1] skipped: file \"/var/log/syslog\" does not exist",
		},
		{
			name:  "chosen, executable missing",
			host:  &fakeHost{root: root, path: []string{bin}},
			setup: func() { writeExec(t, bin, "journalctl") },
			want: "system_logs (" + file + `): variants[0] (binary "journalctl" found at ` + filepath.Join(bin, "journalctl") + ")" +
				"\n  executable: none: " + file + `: variants[0].cmd: cmd "system_logs_journald" is neither in the tools dir ` + tools + " nor in PATH",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			_, ex := Resolve(m, tools, tt.host)
			if got := ex.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// TestDefaults resolves a minimal .meta: every default the README states.
func TestDefaults(t *testing.T) {
	root := t.TempDir()
	writeExec(t, root, "t")
	h := &fakeHost{root: root, goos: "linux", goarch: "amd64"}
	tests := []struct {
		meta     string
		readOnly bool
		scope    tool.ScopeKind
	}{
		{`{"description": "d"}`, false, tool.ScopeGlobal},
		{`{"description": "d", "readOnly": true}`, true, tool.ScopeRead},
		{`{"description": "d", "readOnly": false, "scope": "read"}`, false, tool.ScopeRead},
	}
	for _, tt := range tests {
		got, ex := Resolve(mustParse(t, filepath.Join(root, "t.meta"), tt.meta), root, h)
		if got == nil {
			t.Fatalf("%s: %s", tt.meta, ex)
		}
		if got.Tier != tool.TierHot || got.Timeout != meta.DefaultTimeout || got.ScopeArg != "path" || got.Prompt != "" ||
			got.Cmd != "" || got.Sudo || got.Elevated || got.ReplaySafe || got.Variant != -1 ||
			got.ReadOnly != tt.readOnly || got.ScopeKind != tt.scope {
			t.Errorf("%s: defaults wrong: %+v", tt.meta, got)
		}
		if string(got.Args()) != `{"properties":{},"type":"object"}` {
			t.Errorf("%s: Args() = %s", tt.meta, got.Args())
		}
	}
	if meta.DefaultTimeout != 120*time.Second {
		t.Errorf("meta.DefaultTimeout = %v; README.md says 120s", meta.DefaultTimeout)
	}
}

// TestExecutableResolution follows the seed's order: the tools dir, then cmd
// (absolute, or bare in the tools dir then PATH), then the name in PATH.
func TestExecutableResolution(t *testing.T) {
	tests := []struct {
		name    string
		cmd     string   // "" for none; {abs} is replaced by the absolute executable
		tools   []string // executables in the tools dir
		plain   []string // non-executable files in the tools dir
		path    []string // executables in PATH
		abs     bool     // create the absolute executable
		want    string   // tools/NAME, bin/NAME or abs
		via     string
		wantErr string
	}{
		{name: "tools dir wins over cmd", cmd: "rg", tools: []string{"t", "rg"}, path: []string{"rg", "t"},
			want: "tools/t", via: "named after the tool, in its tools dir"},
		{name: "tools dir wins over absolute cmd", cmd: "{abs}", tools: []string{"t"}, abs: true,
			want: "tools/t", via: "named after the tool, in its tools dir"},
		{name: "non-executable namesake is passed over", plain: []string{"t"}, path: []string{"t"},
			want: "bin/t", via: "named after the tool, in PATH"},
		{name: "cmd absolute", cmd: "{abs}", path: []string{"t"}, abs: true,
			want: "abs", via: `cmd "{abs}"`},
		{name: "cmd absolute missing", cmd: "{abs}", path: []string{"t"},
			wantErr: `cmd "{abs}" is not an executable file`},
		{name: "cmd bare in the tools dir before PATH", cmd: "rg", tools: []string{"rg"}, path: []string{"rg"},
			want: "tools/rg", via: `cmd "rg", in the tools dir`},
		{name: "cmd bare via PATH", cmd: "rg", path: []string{"rg", "t"},
			want: "bin/rg", via: `cmd "rg", in PATH`},
		{name: "cmd bare missing: no fallback to the name", cmd: "rg", path: []string{"t"},
			wantErr: `cmd "rg" is neither in the tools dir {tools} nor in PATH`},
		{name: "fallback: the name in PATH", path: []string{"t"},
			want: "bin/t", via: "named after the tool, in PATH"},
		{name: "unresolvable", plain: []string{"t"},
			wantErr: `no cmd, and no executable named "t" in the tools dir {tools} nor in PATH`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tools, bin := filepath.Join(root, "tools"), filepath.Join(root, "bin")
			abs := filepath.Join(root, "opt", "rg")
			expand := strings.NewReplacer("{abs}", abs, "{tools}", tools).Replace
			os.MkdirAll(tools, 0o755)
			for _, n := range tt.tools {
				writeExec(t, tools, n)
			}
			for _, n := range tt.plain {
				writeFile(t, tools, n, "data", 0o644)
			}
			for _, n := range tt.path {
				writeExec(t, bin, n)
			}
			if tt.abs {
				writeExec(t, filepath.Dir(abs), "rg")
			}
			meta := `{"description": "d"}`
			if tt.cmd != "" {
				meta = `{"description": "d", "cmd": "` + expand(tt.cmd) + `"}`
			}
			file := writeFile(t, tools, "t.meta", meta, 0o644)
			h := &fakeHost{root: root, path: []string{bin}, goos: "linux", goarch: "amd64"}
			tool, ex := Resolve(mustParse(t, file, meta), tools, h)
			if tt.wantErr != "" {
				field := ""
				if tt.cmd != "" {
					field = "cmd: "
				}
				want := file + ": " + field + expand(tt.wantErr)
				if tool != nil || ex.Status != Broken || ex.Err == nil || ex.Err.Error() != want {
					t.Fatalf("got tool %v, err %v; want broken with %q", tool, ex.Err, want)
				}
				if !errors.Is(ex.Err, ErrNoExecutable) {
					t.Errorf("error %v does not wrap ErrNoExecutable", ex.Err)
				}
				return
			}
			if tool == nil {
				t.Fatalf("not resolved: %s", ex)
			}
			want := abs
			if tt.want != "abs" {
				want = filepath.Join(root, tt.want)
			}
			if tool.Path != want || ex.Via != expand(tt.via) {
				t.Errorf("got %s (%s), want %s (%s)", tool.Path, ex.Via, want, expand(tt.via))
			}
		})
	}
}
