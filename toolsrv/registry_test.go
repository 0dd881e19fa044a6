package toolsrv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/toolsrv/meta"
)

func names(ts []*Tool) []string {
	var ns []string
	for _, t := range ts {
		ns = append(ns, t.Name)
	}
	return ns
}

func errorStrings(errs []error) []string {
	var ss []string
	for _, e := range errs {
		ss = append(ss, e.Error())
	}
	return ss
}

// TestLoad loads two tools dirs holding good, bad, hidden, broken and
// shadowed declarations: one bad file never hides the others.
func TestLoad(t *testing.T) {
	root := t.TempDir()
	user, deployed, bin := filepath.Join(root, "user"), filepath.Join(root, "deployed"), filepath.Join(root, "bin")
	missing := filepath.Join(root, "missing")

	// The user's dir, first on the path.
	writeFile(t, user, "shell.meta", `{"description": "user shell"}`, 0o644)
	writeExec(t, user, "shell")
	writeFile(t, user, "file_read.meta", `{"description": "broken", "bogus": 1}`, 0o644)
	writeFile(t, user, "gui.meta", `{"description": "gui", "variants": [{"match": {"env": "DISPLAY"}}]}`, 0o644)
	writeFile(t, user, "rg.meta", `{"description": "ripgrep", "cmd": "rg"}`, 0o644)
	writeFile(t, user, "Bad-Name.meta", `{"description": "d"}`, 0o644)
	writeFile(t, user, "notes.txt", `not a .meta, never read`, 0o644)
	writeFile(t, user, ".#shell.meta", `an editor's lock file`, 0o644)
	writeFile(t, user, "garbage", "\x00\x01 an executable is never read", 0o755)
	if err := os.Mkdir(filepath.Join(user, "dir.meta"), 0o755); err != nil {
		t.Fatal(err)
	}

	// The deployed dir.
	writeFile(t, deployed, "shell.meta", `{"description": "deployed shell"}`, 0o644)
	writeFile(t, deployed, "file_read.meta", `{"description": "deployed file_read", "readOnly": true}`, 0o644)
	writeExec(t, deployed, "file_read")
	writeFile(t, deployed, "gui.meta", `{"description": "deployed gui"}`, 0o644)
	writeExec(t, deployed, "gui")
	writeFile(t, deployed, "think.meta", `{"description": "think", "cmd": "cat"}`, 0o644)
	writeExec(t, bin, "cat")

	h := &fakeHost{root: root, path: []string{bin}, goos: "linux", goarch: "amd64"}
	r := Load([]string{missing, user, deployed}, h)

	if got, want := names(r.Tools()), []string{"file_read", "shell", "think"}; !slices.Equal(got, want) {
		t.Errorf("Tools() = %v, want %v", got, want)
	}
	if sh, ok := r.Tool("shell"); !ok || sh.Description != "user shell" || sh.Dir != user {
		t.Errorf("shell: %+v; want the user's", sh)
	}
	if fr, ok := r.Tool("file_read"); !ok || fr.Description != "deployed file_read" {
		t.Errorf("file_read: %+v; want the deployed one, since the user's does not parse", fr)
	}
	if _, ok := r.Tool("gui"); ok {
		t.Error("gui is offered; the user's hidden declaration should claim the name")
	}

	wantErrs := []string{
		filepath.Join(user, "Bad-Name.meta") + `: tool name "Bad-Name" (the file name without .meta) must match ^[a-z][a-z0-9_]{0,63}$`,
		filepath.Join(user, "dir.meta") + `: cannot read: is a directory`,
		filepath.Join(user, "file_read.meta") + `: unknown field "bogus" (expected description, prompt, args, tier, readOnly, scope, scopeArg, cmd, sudo, elevated, timeout, replaySafe, variants)`,
		filepath.Join(user, "rg.meta") + `: cmd: cmd "rg" is neither in the tools dir ` + user + ` nor in PATH`,
	}
	if got := errorStrings(r.Errors()); !slices.Equal(got, wantErrs) {
		t.Errorf("Errors():\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantErrs, "\n"))
	}
	for _, e := range r.Errors() {
		var me *meta.Error
		if !errors.As(e, &me) {
			t.Errorf("%v is not a *meta.Error", e)
		}
	}
	if !errors.Is(r.Errors()[3], ErrNoExecutable) {
		t.Errorf("%v does not wrap ErrNoExecutable", r.Errors()[3])
	}

	warns := r.Warnings()
	if len(warns) != 3 || !errors.Is(warns[0], os.ErrNotExist) {
		t.Fatalf("Warnings() = %v", warns)
	}
	var se *ShadowError
	if !errors.As(warns[1], &se) || se.Name != "gui" && se.Name != "shell" {
		t.Errorf("warning %v is not a *ShadowError", warns[1])
	}
	wantWarn := filepath.Join(deployed, "shell.meta") + `: ignored: tool "shell" is declared earlier on the tools path, by ` + filepath.Join(user, "shell.meta")
	if !slices.Contains(errorStrings(warns), wantWarn) {
		t.Errorf("Warnings() = %v; want %q", warns, wantWarn)
	}

	var explained []string
	for _, ex := range r.Explain() {
		explained = append(explained, ex.Name+" "+ex.Status.String())
	}
	if want := []string{"file_read available", "gui hidden", "rg broken", "shell available", "think available"}; !slices.Equal(explained, want) {
		t.Errorf("Explain() = %v, want %v", explained, want)
	}

	if got := r.Path(); !slices.Equal(got, []string{missing, user, deployed}) {
		t.Errorf("Path() = %v", got)
	}
}

func TestToolsPath(t *testing.T) {
	t.Setenv("OLLIE_TOOLS_PATH", "/a::/b:")
	if got := ToolsPath(); !slices.Equal(got, []string{"/a", "/b"}) {
		t.Errorf("ToolsPath() = %v", got)
	}
	t.Setenv("OLLIE_TOOLS_PATH", "")
	if got := ToolsPath(); len(got) != 0 {
		t.Errorf("ToolsPath() with an empty OLLIE_TOOLS_PATH = %v, want none", got)
	}

	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	os.Unsetenv("OLLIE_TOOLS_PATH") // t.Setenv restores it
	if got := ToolsPath(); len(got) != 0 {
		t.Errorf("ToolsPath() = %v; want none, since no default dir exists", got)
	}
	if err := os.MkdirAll(filepath.Join(cfg, "ollie", "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := ToolsPath(); !slices.Equal(got, []string{filepath.Join(cfg, "ollie", "tools")}) {
		t.Errorf("ToolsPath() = %v, want the user's dir", got)
	}
}

// fixture is a tools dir with shell, file_read and a hidden gui.
func fixture(t *testing.T) (dir string, h *fakeHost) {
	t.Helper()
	dir = t.TempDir()
	for _, n := range []string{"shell", "file_read", "gui"} {
		writeExec(t, dir, n)
	}
	writeFile(t, dir, "shell.meta", `{"description": "sh"}`, 0o644)
	writeFile(t, dir, "file_read.meta", `{"description": "read", "readOnly": true}`, 0o644)
	writeFile(t, dir, "gui.meta", `{"description": "gui", "variants": [{"match": {"env": "DISPLAY"}}]}`, 0o644)
	writeFile(t, dir, "nope.meta", `{"description": "nope", "cmd": "/nonexistent/nope"}`, 0o644)
	return dir, &fakeHost{root: dir, goos: "linux", goarch: "amd64"}
}

func TestSession(t *testing.T) {
	dir, h := fixture(t)
	s := NewSession(Load([]string{dir}, h))
	step := func(what string, err error, wantErr error, wantRev uint64, wantTools ...string) {
		t.Helper()
		if !errors.Is(err, wantErr) {
			t.Errorf("%s: err %v, want %v", what, err, wantErr)
		}
		if got := s.Revision(); got != wantRev {
			t.Errorf("%s: revision %d, want %d", what, got, wantRev)
		}
		if got := names(s.Tools()); !slices.Equal(got, wantTools) {
			t.Errorf("%s: Tools() = %v, want %v", what, got, wantTools)
		}
	}
	step("new", nil, nil, 1)
	step("load shell", s.Load("shell"), nil, 2, "shell")
	step("load shell again", s.Load("shell"), nil, 2, "shell")
	step("load file_read", s.Load("file_read"), nil, 3, "shell", "file_read")
	step("load unknown", s.Load("nosuch"), ErrUnknownTool, 3, "shell", "file_read")
	step("load hidden", s.Load("gui"), ErrUnknownTool, 3, "shell", "file_read")
	step("load broken", s.Load("nope"), ErrUnknownTool, 3, "shell", "file_read")
	step("unload shell", s.Unload("shell"), nil, 4, "file_read")
	step("unload shell again", s.Unload("shell"), ErrNotLoaded, 4, "file_read")

	if err := s.Load("gui"); err == nil || !strings.Contains(err.Error(), "no variant of "+filepath.Join(dir, "gui.meta")+" matches this host") {
		t.Errorf("hidden tool's error %v does not say why", err)
	}
	if err := s.Load("nope"); err == nil || !strings.Contains(err.Error(), `cmd "/nonexistent/nope" is not an executable file`) {
		t.Errorf("broken tool's error %v does not say why", err)
	}
	if _, err := s.Tool("shell"); !errors.Is(err, ErrNotLoaded) {
		t.Errorf("Tool(shell) after unload: %v", err)
	}
	if tool, err := s.Tool("file_read"); err != nil || tool.Name != "file_read" {
		t.Errorf("Tool(file_read): %v %v", tool, err)
	}

	// A reload moves the revision; a tool that disappears stays loaded by
	// name and comes back with its .meta.
	os.Rename(filepath.Join(dir, "file_read.meta"), filepath.Join(dir, "file_read.off"))
	s.SetRegistry(s.Registry().Reload())
	step("reload without file_read", nil, nil, 5)
	if got := s.Loaded(); !slices.Equal(got, []string{"file_read"}) {
		t.Errorf("Loaded() = %v", got)
	}
	if _, err := s.Tool("file_read"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Tool(file_read) while gone: %v", err)
	}
	os.Rename(filepath.Join(dir, "file_read.off"), filepath.Join(dir, "file_read.meta"))
	h.env = map[string]string{"DISPLAY": ":0"}
	s.SetRegistry(s.Registry().Reload())
	step("reload with file_read, on a host with a display", s.Load("gui"), nil, 7, "file_read", "gui")
}

func TestSessionWait(t *testing.T) {
	dir, h := fixture(t)
	s := NewSession(Load([]string{dir}, h))

	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("agent stopped")
	cancel(cause)
	if _, err := s.Wait(ctx, 1); !errors.Is(err, cause) {
		t.Errorf("Wait on a cancelled context: %v, want its cause", err)
	}
	if rev, err := s.Wait(context.Background(), 0); rev != 1 || err != nil {
		t.Errorf("Wait(0) = %d %v, want 1 at once", rev, err)
	}

	got := make(chan uint64)
	go func() {
		rev, _ := s.Wait(context.Background(), 1)
		got <- rev
	}()
	if err := s.Load("shell"); err != nil {
		t.Fatal(err)
	}
	select {
	case rev := <-got:
		if rev != 2 {
			t.Errorf("Wait woke with %d, want 2", rev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake on Load")
	}
}

// TestSessionConcurrent is for the race detector: loads, unloads, reads and
// reloads from many goroutines.
func TestSessionConcurrent(t *testing.T) {
	dir, h := fixture(t)
	r := Load([]string{dir}, h)
	s := NewSession(r)
	var wg sync.WaitGroup
	// One writer per tool, so that every Load and Unload changes the
	// set; the other goroutines only read.
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"shell", "file_read"}[i%2]
			for range 50 {
				if i < 2 {
					s.Load(name)
				}
				s.Tools()
				s.Tool(name)
				s.Revision()
				if i < 2 {
					s.Unload(name)
				}
				if i == 0 {
					s.SetRegistry(r)
				}
			}
		}()
	}
	wg.Wait()
	if len(s.Loaded()) != 0 {
		t.Errorf("Loaded() = %v after balanced loads and unloads", s.Loaded())
	}
	if got, want := s.Revision(), uint64(1+2*50*2+50); got != want {
		t.Errorf("Revision() = %d, want %d", got, want)
	}
}

func ExampleExplanation_String() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "system_logs.meta"), []byte(`{
		"description": "Read system logs.",
		"variants": [
			{"match": {"env": "OLLIE_EXAMPLE_UNSET"}, "cmd": "/bin/cat"},
			{"match": {}, "cmd": "/bin/sh"}
		]
	}`), 0o644)
	r := Load([]string{dir}, meta.LocalHost{})
	for _, ex := range r.Explain() {
		fmt.Println(strings.ReplaceAll(ex.String(), dir, "DIR"))
	}
	// Output:
	// system_logs (DIR/system_logs.meta): variants[1] (match {} always holds)
	//   variants[0] skipped: env OLLIE_EXAMPLE_UNSET is empty
	//   executable: /bin/sh (cmd "/bin/sh")
}
