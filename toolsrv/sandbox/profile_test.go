package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseProfileErrors(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		is         error    // errors.Is target, if any
		want       []string // substrings of the message
	}{
		{"unknown field", "read: [/etc]\nreed: [/usr]\n", ErrUnknownField,
			[]string{"sandbox: x.yaml:2: reed: unknown field (known: read, write, exec, net, env, limits, best_effort)"}},
		{"unknown net field", "net:\n  conect: [443]\n", ErrUnknownField,
			[]string{"x.yaml:2: net.conect: unknown field (known: bind, connect)"}},
		{"unknown template", "write:\n  - /tmp\n  - '{CDW}/x'\n", ErrUnknownTemplate,
			[]string{"x.yaml:3: write[1]", "unknown template {CDW}", "{CWD}", "{env:NAME}"}},
		{"bad env template", "read: ['{env:1X}']\n", ErrUnknownTemplate, []string{"read[0]"}},
		{"template mid-path", "read: ['/x/{HOME}']\n", nil, []string{"read[0]", "may only begin a path"}},
		{"relative path", "exec: [usr/bin]\n", nil, []string{"exec[0]", "not absolute"}},
		{"template then letters", "read: ['{HOME}x']\n", nil, []string{"followed by /"}},
		{"scalar for list", "read: /etc\n", nil, []string{"x.yaml:1: read: expected a list"}},
		{"bad port", "net: {connect: [http]}\n", nil, []string{"net.connect[0]", `"http" is not a TCP port`}},
		{"port out of range", "net: {bind: [70000]}\n", nil, []string{"net.bind[0]"}},
		{"any with ports", "net: {connect: [any, 443]}\n", nil, []string{"net.connect", "any cannot be combined"}},
		{"bad bool", "best_effort: yes\n", nil, []string{"best_effort: expected true or false"}},
		{"bad env name", "env: [PATH, 'A-B']\n", nil, []string{"env[1]"}},
		{"twice", "read: []\nread: []\n", nil, []string{"read: given twice"}},
		{"not a mapping", "- /etc\n", nil, []string{"expected a mapping"}},
		{"bad yaml", "read: [\n", nil, []string{"sandbox: x.yaml"}},
		{"unknown limit", "limits:\n  memroy: 1GiB\n", ErrUnknownField,
			[]string{"x.yaml:2: limits.memroy: unknown field (known: memory, processes, open_files, file_size)"}},
		{"limits not a mapping", "limits: 1GiB\n", nil, []string{"x.yaml:1: limits: expected a mapping"}},
		{"size without unit", "limits: {memory: lots}\n", nil, []string{"x.yaml:1: limits.memory", `"lots" is not a size`, "GiB"}},
		{"decimal unit", "limits: {memory: 2GB}\n", nil, []string{"limits.memory", `"2GB" is ambiguous: write 2GiB`}},
		{"short unit", "limits: {file_size: 10M}\n", nil, []string{"limits.file_size", "write 10MiB"}},
		{"zero size", "limits: {memory: 0}\n", nil, []string{"limits.memory", "at least 1 byte", "unlimited"}},
		{"negative size", "limits: {memory: -1GiB}\n", nil, []string{"limits.memory", "at least 1 byte"}},
		{"zero processes", "limits: {processes: 0}\n", nil, []string{"limits.processes", `"0" is not a count`}},
		{"fractional processes", "limits: {processes: 1.5}\n", nil, []string{"limits.processes", "whole number"}},
		{"list for a limit", "limits: {open_files: [1]}\n", nil, []string{"limits.open_files: expected a single value"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProfile("x", "x.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			var pe *ProfileError
			if !errors.As(err, &pe) || pe.File != "x.yaml" {
				t.Errorf("error %q is not a ProfileError naming the file", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseProfile(t *testing.T) {
	p, err := ParseProfile("p", "p.yaml", []byte(`
read: ['{HOME}/.gitconfig', /etc]
write: ['{CWD}']
exec:
net:
  bind: [0, 8080]
  connect: [any]
env: [PATH, LC_*]
best_effort: true
`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Read, []string{"{HOME}/.gitconfig", "/etc"}) || len(p.Exec) != 0 ||
		!slices.Equal(p.Bind.Ports, []uint16{0, 8080}) || p.Bind.Any || !p.Connect.Any ||
		!slices.Equal(p.Env, []string{"PATH", "LC_*"}) || !p.BestEffort {
		t.Errorf("parsed %+v", p)
	}
	if p.Limits != (Limits{}) {
		t.Errorf("no limits section: %+v, want the zero Limits (the defaults)", p.Limits)
	}
	// Empty: the zero profile, which allows nothing.
	p, err = ParseProfile("e", "e.yaml", []byte("# nothing\n"))
	if err != nil || len(p.Read)+len(p.Write)+len(p.Exec)+len(p.Env) != 0 || p.Connect.Any || p.Bind.Any || p.BestEffort {
		t.Errorf("empty profile: %+v, %v", p, err)
	}
}

func TestProfilesLoad(t *testing.T) {
	user, deployed := t.TempDir(), t.TempDir()
	write := func(dir, name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(deployed, "default", "read: [/etc]\n")
	write(deployed, "net", "net: {connect: [any]}\n")
	write(user, "default", "read: [/usr]\n")
	write(user, "mine", "env: [PATH]\n")
	ps := Profiles{Dirs: []string{user, deployed}}

	p, err := ps.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if p.File != filepath.Join(user, "default.yaml") || !slices.Equal(p.Read, []string{"/usr"}) {
		t.Errorf("user profile did not override the deployed one: %+v", p)
	}
	if p, err := ps.Load("net"); err != nil || !p.Connect.Any {
		t.Errorf("deployed profile: %+v, %v", p, err)
	}
	if got := ps.Names(); !slices.Equal(got, []string{"default", "mine", "net"}) {
		t.Errorf("Names = %v", got)
	}
	for _, name := range []string{"nope", "../default", ""} {
		_, err = ps.Load(name)
		if !errors.Is(err, ErrUnknownProfile) {
			t.Fatalf("Load(%q): %v, want ErrUnknownProfile", name, err)
		}
		if want := `unknown sandbox profile "` + name + `" (available: default, mine, net;`; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}

	write(user, "broken", "reed: []\n")
	if _, err := ps.Load("broken"); !errors.Is(err, ErrUnknownField) || !strings.Contains(err.Error(), filepath.Join(user, "broken.yaml")) {
		t.Errorf("broken profile: %v", err)
	}
}

// The deployed default profile parses and resolves on this host.
func TestDefaultProfile(t *testing.T) {
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	cwd, tmp := t.TempDir(), t.TempDir()
	pol, err := p.Resolve(Vars{CWD: cwd, TmpDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Access{cwd: Read | Write | Exec, tmp: Read | Write | Exec, "/etc": Read, "/usr": Read | Exec, "/dev/null": Read | Write}
	for _, r := range pol.Paths {
		if a, ok := want[r.Path]; ok {
			if r.Access != a {
				t.Errorf("%s: %s, want %s", r.Path, r.Access, a)
			}
			delete(want, r.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing from the policy: %v", want)
	}
	if p.BestEffort || !pol.netRestricted() || pol.Connect.Any || len(pol.Connect.Ports) > 0 {
		t.Errorf("default profile must refuse without Landlock and deny TCP: %+v", pol)
	}
}

func TestResolve(t *testing.T) {
	home, cwd := t.TempDir(), t.TempDir()
	for _, d := range []string{".config/git", ".cache", "data", "tools1"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"DATA": filepath.Join(home, "data"), "XDG_CACHE_HOME": "relative/ignored", "REL": "rel"}
	vars := Vars{CWD: cwd, Home: home, TmpDir: "/tmp", ToolsPath: []string{filepath.Join(home, "tools1"), filepath.Join(home, "tools2"), "rel"},
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	p, err := ParseProfile("r", "r.yaml", []byte(`
read: ['{XDG_CONFIG_HOME}/git', '{XDG_CACHE_HOME}', '{env:DATA}', '{env:UNSET}/x', '{env:REL}', /nonexistent/ollie]
write: ['{CWD}', '{TMPDIR}']
exec: ['{CWD}', '{OLLIE_TOOLS_PATH}']
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := p.Resolve(vars)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range pol.Paths {
		got = append(got, r.Access.String()+" "+r.Path)
	}
	want := []string{
		"r-- " + home + "/.cache", // relative XDG_CACHE_HOME is ignored: the default
		"r-- " + home + "/.config/git",
		"r-- " + home + "/data",
		"r-x " + home + "/tools1",
		"rwx " + cwd,
		"rw- /tmp",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("paths:\n got %q\nwant %q", got, want)
	}
	var skipped []string
	for _, s := range pol.Skipped {
		skipped = append(skipped, s.Field+" "+s.Reason)
	}
	wantSkipped := []string{
		"read[3] $UNSET is not set",
		`read[4] {env:REL} is "rel", not an absolute path`,
		"read[5] does not exist",
		"exec[1] does not exist", // tools2; "rel" is dropped from the list
	}
	if !slices.Equal(skipped, wantSkipped) {
		t.Errorf("skipped:\n got %q\nwant %q", skipped, wantSkipped)
	}
	x := pol.Explain()
	for _, w := range []string{"sandbox profile r (r.yaml)", "rwx " + cwd, "read[5] /nonexistent/ollie: does not exist", "tcp connect: none", "env: (none)"} {
		if !strings.Contains(x, w) {
			t.Errorf("Explain lacks %q:\n%s", w, x)
		}
	}

	// {CWD} is never optional.
	vars.CWD = ""
	if _, err := p.Resolve(vars); err == nil || !strings.Contains(err.Error(), "{CWD} has no value") {
		t.Errorf("Resolve without CWD: %v", err)
	}
}

func TestEnvAllowed(t *testing.T) {
	allow := []string{"PATH", "LC_*"}
	for name, want := range map[string]bool{"PATH": true, "PATHX": false, "LC_ALL": true, "LC_": true, "LANG": false, "": false} {
		if envAllowed(name, allow) != want {
			t.Errorf("envAllowed(%q) = %v", name, !want)
		}
	}
	if !envAllowed("ANY", []string{"*"}) {
		t.Error(`"*" does not allow everything`)
	}
	got := filterEnv([]string{"PATH=/bin", "SECRET=x", "LC_ALL=C", "junk", "=x"}, allow)
	if !slices.Equal(got, []string{"PATH=/bin", "LC_ALL=C"}) {
		t.Errorf("filterEnv = %q", got)
	}
	if got := filterEnv([]string{"A=1"}, nil); got == nil || len(got) != 0 {
		t.Errorf("filterEnv with no allowlist = %#v, want an empty non-nil slice (nil would inherit)", got)
	}
}

func TestParseLimits(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want Limits
		str  string // of the effective limits
	}{
		{"limits:\n", Limits{}, "memory 1.5GiB, processes 512, open_files unlimited, file_size unlimited"},
		{"limits: {memory: 1GiB}", Limits{Memory: 1 << 30}, "memory 1GiB, processes 512,"},
		{"limits: {memory: 1.5GiB, processes: 64}", Limits{Memory: 3 << 29, Processes: 64}, "memory 1.5GiB, processes 64,"},
		{"limits: {memory: 4096, file_size: 512KiB}", Limits{Memory: 4096, FileSize: 512 << 10}, "memory 4KiB, processes 512, open_files unlimited, file_size 512KiB"},
		{"limits: {memory: 1000B, open_files: 256}", Limits{Memory: 1000, OpenFiles: 256}, "memory 1000B, processes 512, open_files 256,"},
		{"limits: {memory: unlimited, processes: unlimited}", Limits{Memory: Unlimited, Processes: Unlimited}, "memory unlimited, processes unlimited,"},
		{"limits: {file_size: 2TiB}", Limits{FileSize: 2 << 40}, "file_size 2TiB"},
	} {
		p, err := ParseProfile("l", "l.yaml", []byte(tt.yaml))
		if err != nil {
			t.Errorf("%q: %v", tt.yaml, err)
			continue
		}
		if p.Limits != tt.want {
			t.Errorf("%q: %+v, want %+v", tt.yaml, p.Limits, tt.want)
		}
		if s := p.Limits.String(); !strings.Contains(s, tt.str) {
			t.Errorf("%q: String %q lacks %q", tt.yaml, s, tt.str)
		}
		pol, err := p.Resolve(Vars{CWD: "/", ToolsPath: []string{}})
		if err != nil || pol.Limits != tt.want {
			t.Errorf("%q: resolved limits %+v (%v), want %+v", tt.yaml, pol.Limits, err, tt.want)
		}
	}
}

// The deployed profile writes out the built-in defaults, as it says.
func TestDeployedLimitsAreTheDefaults(t *testing.T) {
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits.effective() != DefaultLimits || p.Limits.Memory == 0 || p.Limits.Processes == 0 {
		t.Errorf("default.yaml limits %+v, built-in defaults %+v", p.Limits, DefaultLimits)
	}
}

// Load keeps parsed profiles, but a caller's changes to what it returned
// never reach the next Load, and an edited file is parsed again.
func TestProfilesLoadCached(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(file, []byte("read: [/etc]\nenv: [PATH]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ps := Profiles{Dirs: []string{dir}}
	a, err := ps.Load("p")
	if err != nil {
		t.Fatal(err)
	}
	// Both the first load (parsed) and a later one (from the cache).
	for i := range 3 {
		if !slices.Equal(a.Read, []string{"/etc"}) || !slices.Equal(a.Env, []string{"PATH"}) {
			t.Errorf("Load %d: read %q env %q, want [/etc] [PATH]: an earlier caller's changes leaked", i+1, a.Read, a.Env)
		}
		a.Read[0], a.Env[0] = "/changed", "HOME"
		if a, err = ps.Load("p"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("read: [/usr]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ps.Load("p")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Read, []string{"/usr"}) || len(c.Env) != 0 {
		t.Errorf("after an edit: read %q env %q, want [/usr] []", c.Read, c.Env)
	}
}
