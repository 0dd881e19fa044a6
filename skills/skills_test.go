package skills

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/paths"
	"ollie/toolsrv/meta"
)

// fakeHost is a machine with the binaries named in bins and nothing else.
type fakeHost struct {
	bins map[string]bool
	env  map[string]string
}

func (h fakeHost) LookPath(f string) (string, error) {
	if h.bins[f] {
		return "/usr/bin/" + f, nil
	}
	return "", errors.New("not found")
}
func (fakeHost) Stat(name string) (fs.FileInfo, error) { return nil, fs.ErrNotExist }
func (h fakeHost) Getenv(k string) string              { return h.env[k] }
func (fakeHost) GOOS() string                          { return "linux" }
func (fakeHost) GOARCH() string                        { return "amd64" }

func TestParse(t *testing.T) {
	s, err := Parse("/d/apt/SKILL.md", []byte("---\nname: apt\ndescription: Packages with apt.\nwhen:\n  binary: apt-get\n  os: linux\ntools: [shell]\n---\n# Apt\nUse apt-get.\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "apt" || s.Description != "Packages with apt." || len(s.When) != 2 || s.When[0].Key != "binary" ||
		s.Tools[0] != "shell" || s.Dir != "/d/apt" || s.Body != "# Apt\nUse apt-get.\n" {
		t.Fatalf("parsed %+v", s)
	}
}

// Every mistake is an error naming the file, the line where known, and
// the field.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"nofront", "# just markdown\n", "skills: x.md:1: malformed front matter"},
		{"unclosed", "---\nname: x\n", "skills: x.md:1: malformed front matter"},
		{"yaml", "---\nname: [x\n---\nbody\n", "skills: x.md: malformed front matter"},
		{"unknown", "---\nname: x\ndescription: d\ncolour: red\n---\nbody\n", `skills: x.md:4: unknown field "colour" (expected name, description, when, tools)`},
		{"noname", "---\ndescription: d\n---\nbody\n", `skills: x.md:2: name: missing`},
		{"nodesc", "---\nname: x\n---\nbody\n", `skills: x.md:2: description: missing`},
		{"emptydesc", "---\nname: x\ndescription: \"\"\n---\nbody\n", `skills: x.md:3: description: empty`},
		{"twolines", "---\nname: x\ndescription: |\n  one\n  two\n---\nbody\n", `skills: x.md:3: description: more than one line`},
		{"wrongname", "---\nname: y\ndescription: d\n---\nbody\n", `skills: x.md:2: name: "y" differs from the name the file is found by, "x"`},
		{"nametype", "---\nname: 12\ndescription: d\n---\nbody\n", `skills: x.md:2: name: expected a string, got a number`},
		{"dup", "---\nname: x\nname: x\ndescription: d\n---\nbody\n", `skills: x.md:3: name: given twice (first on line 2)`},
		{"whenkey", "---\nname: x\ndescription: d\nwhen:\n  bin: apt\n---\nbody\n", `skills: x.md:5: when: unknown key "bin" (expected binary, file, os, arch, env, nenv)`},
		{"whenvalue", "---\nname: x\ndescription: d\nwhen:\n  file: etc/debian_version\n---\nbody\n", `skills: x.md:5: when.file: "etc/debian_version" (expected an absolute path)`},
		{"whenos", "---\nname: x\ndescription: d\nwhen:\n  os: linxu\n---\nbody\n", `skills: x.md:5: when.os: unknown "linxu" (expected a GOOS`},
		{"whenlist", "---\nname: x\ndescription: d\nwhen: [apt]\n---\nbody\n", `skills: x.md:4: when: expected a mapping of conditions`},
		{"toolname", "---\nname: x\ndescription: d\ntools: [Shell]\n---\nbody\n", `skills: x.md:4: tools[0]: "Shell" is not a tool name`},
		{"tooltwice", "---\nname: x\ndescription: d\ntools: [shell, shell]\n---\nbody\n", `skills: x.md:4: tools[1]: "shell" is listed twice`},
		{"nobody", "---\nname: x\ndescription: d\n---\n\n", `skills: x.md: body: empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("x.md", []byte(tt.text))
			if err == nil || s != nil {
				t.Fatalf("parsed: %+v", s)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error\n%v\nwant it to contain\n%s", err, tt.want)
			}
			var fe *paths.FileError
			if !errors.As(err, &fe) || fe.File != "x.md" {
				t.Fatalf("not a located *paths.FileError naming the file: %#v", err)
			}
		})
	}
	// All the problems at once, each named.
	_, err := Parse("x.md", []byte("---\nname: Y\nwhen:\n  os: linxu\nextra: 1\n---\nbody\n"))
	for _, want := range []string{"x.md:2: name:", "x.md:4: when.os:", `x.md:5: unknown field "extra"`, "x.md:2: description: missing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
}

func write(t *testing.T, file, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func skillText(name, desc, when string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n" + when + "---\nThe body of " + name + ".\n"
}

// The same files on two hosts with different binaries: each offers the
// skills whose conditions hold there, and says why of every one.
func TestResolveTwoHosts(t *testing.T) {
	data := t.TempDir()
	write(t, filepath.Join(data, "debian-packages.md"), skillText("debian-packages", "apt", "when:\n  binary: apt-get\n"))
	write(t, filepath.Join(data, "systemd", "SKILL.md"), skillText("systemd", "units", "when:\n  binary: systemctl\n"))
	write(t, filepath.Join(data, "namespace.md"), skillText("namespace", "ollie", ""))
	debian := Catalog{Dirs: []string{data}, Host: fakeHost{bins: map[string]bool{"apt-get": true, "systemctl": true}}}
	alpine := Catalog{Dirs: []string{data}, Host: fakeHost{bins: map[string]bool{"apk": true}}}

	names := func(c Catalog) string {
		var n []string
		for _, s := range c.Offered() {
			n = append(n, s.Name)
		}
		return strings.Join(n, " ")
	}
	if got := names(debian); got != "debian-packages namespace systemd" {
		t.Errorf("debian offers %q", got)
	}
	if got := names(alpine); got != "namespace" {
		t.Errorf("alpine offers %q", got)
	}
	reasons := map[string]string{}
	for _, e := range alpine.Resolve() {
		reasons[e.Name] = e.Status.String() + ": " + e.Reason()
	}
	want := map[string]string{
		"debian-packages": `skipped: binary "apt-get" not found in PATH`,
		"systemd":         `skipped: binary "systemctl" not found in PATH`,
		"namespace":       "offered: no conditions",
	}
	for n, w := range want {
		if reasons[n] != w {
			t.Errorf("%s on alpine: %q, want %q", n, reasons[n], w)
		}
	}
	for _, e := range debian.Resolve() {
		if e.Name == "debian-packages" && e.Reason() != `binary "apt-get" found at /usr/bin/apt-get` {
			t.Errorf("debian-packages on debian: %q", e.Reason())
		}
	}
	if _, err := alpine.Lookup("debian-packages"); !errors.Is(err, ErrNotOffered) || !strings.Contains(err.Error(), `apt-get" not found`) {
		t.Errorf("lookup of a skipped skill: %v", err)
	}
	if _, err := alpine.Lookup("nope"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "offered: namespace") {
		t.Errorf("lookup of an unknown skill: %v", err)
	}
}

// The host's own directory wins on a name; broken files are listed with
// their error, not dropped.
func TestResolveShadowAndBroken(t *testing.T) {
	own, data := t.TempDir(), t.TempDir()
	write(t, filepath.Join(own, "apt.md"), skillText("apt", "mine", ""))
	write(t, filepath.Join(data, "apt", "SKILL.md"), skillText("apt", "deployed", ""))
	write(t, filepath.Join(data, "bad.md"), "---\nname: bad\n---\nbody\n")
	write(t, filepath.Join(data, "empty", "notes.txt"), "x")
	write(t, filepath.Join(data, "twice.md"), skillText("twice", "a", ""))
	write(t, filepath.Join(data, "twice", "SKILL.md"), skillText("twice", "b", ""))
	write(t, filepath.Join(data, "README.txt"), "not a skill")
	c := Catalog{Dirs: []string{own, data}, Host: fakeHost{}}
	got := map[string][]string{}
	for _, e := range c.Resolve() {
		got[e.Name] = append(got[e.Name], e.Status.String()+" "+e.Reason())
	}
	check := func(name string, i int, want string) {
		t.Helper()
		if len(got[name]) <= i || !strings.HasPrefix(got[name][i], want) {
			t.Errorf("%s: %q, want %q first", name, got[name], want)
		}
	}
	check("apt", 0, "offered")
	check("apt", 1, "shadowed shadowed by "+filepath.Join(own, "apt.md"))
	check("bad", 0, "broken skills: "+filepath.Join(data, "bad.md")+":2: description: missing")
	check("empty", 0, "broken skills: "+filepath.Join(data, "empty")+": a folder among the skills has no SKILL.md")
	check("twice", 0, "broken")
	if len(got) != 4 {
		t.Errorf("entries: %q", got)
	}
	s, err := c.Lookup("apt")
	if err != nil || s.Description != "mine" {
		t.Fatalf("apt: %+v, %v", s, err)
	}
}

// A folder skill lists the files beside it, and reads only those.
func TestSideFiles(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "tool")
	write(t, filepath.Join(dir, "SKILL.md"), "---\nname: tool\ndescription: d\ntools: [shell]\n---\nRun scripts/check.sh.\n")
	write(t, filepath.Join(dir, "scripts", "check.sh"), "echo ok\n")
	write(t, filepath.Join(dir, ".hidden"), "secret")
	write(t, filepath.Join(data, "outside"), "outside")
	os.Symlink(filepath.Join(data, "outside"), filepath.Join(dir, "link"))
	s, err := Catalog{Dirs: []string{data}, Host: fakeHost{}}.Lookup("tool")
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Files(); len(f) != 1 || f[0] != "scripts/check.sh" {
		t.Fatalf("files %q", f)
	}
	text := s.Text()
	for _, want := range []string{"Run scripts/check.sh.", "expects the tools: shell", "- scripts/check.sh"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if got, err := s.ReadFile("scripts/check.sh"); err != nil || got != "echo ok\n" {
		t.Errorf("read: %q, %v", got, err)
	}
	for _, bad := range []string{"../outside", "link", ".hidden", "SKILL.md", "/etc/passwd"} {
		if _, err := s.ReadFile(bad); !errors.Is(err, ErrNoFile) {
			t.Errorf("read %q: %v", bad, err)
		}
	}
}

// The deployed skills parse, and a Debian host and an Alpine one offer
// different ones.
func TestStarterSkills(t *testing.T) {
	dir, _ := filepath.Abs("../data/skills")
	offered := func(bins ...string) string {
		h := fakeHost{bins: map[string]bool{}}
		for _, b := range bins {
			h.bins[b] = true
		}
		var names []string
		for _, e := range (Catalog{Dirs: []string{dir}, Host: h}).Resolve() {
			if e.Status == Broken {
				t.Errorf("%s: %v", e.File, e.Err)
			}
			if e.Status == Offered {
				names = append(names, e.Name)
			}
		}
		return strings.Join(names, " ")
	}
	if got := offered("apt-get", "systemctl"); got != "debian-packages ollie-namespace systemd" {
		t.Errorf("a Debian host offers %q", got)
	}
	if got := offered("apk"); got != "ollie-namespace" {
		t.Errorf("an Alpine host offers %q", got)
	}
	s, err := Catalog{Dirs: []string{dir}, Host: fakeHost{bins: map[string]bool{"systemctl": true}}}.Lookup("systemd")
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Files(); len(f) != 1 || f[0] != "example.service" {
		t.Errorf("systemd's files: %q", f)
	}
}

// The real host's matcher (meta.LocalHost: exec.LookPath on PATH) on
// two PATHs, as two hosts with different binaries: one with apt-get and
// systemctl, one with neither.
func TestStarterSkillsOnTwoPATHs(t *testing.T) {
	dir, _ := filepath.Abs("../data/skills")
	debian, bare := t.TempDir(), t.TempDir()
	for _, b := range []string{"apt-get", "systemctl"} {
		write(t, filepath.Join(debian, b), "#!/bin/sh\n")
		os.Chmod(filepath.Join(debian, b), 0o755)
	}
	for path, want := range map[string]string{debian: "debian-packages ollie-namespace systemd", bare: "ollie-namespace"} {
		t.Setenv("PATH", path)
		var names []string
		for _, s := range (Catalog{Dirs: []string{dir}, Host: meta.LocalHost{}}).Offered() {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("PATH=%s offers %q, want %q", path, got, want)
		}
	}
}

// BenchmarkOffered is what each turn of every agent pays to learn the
// skills on offer: the starter skills read, parsed and resolved.
func BenchmarkOffered(b *testing.B) {
	dir, _ := filepath.Abs("../data/skills")
	c := Catalog{Dirs: []string{dir}, Host: meta.LocalHost{}}
	for b.Loop() {
		c.Offered()
	}
}
