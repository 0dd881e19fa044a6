package toolsrv

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/lab"
)

// attackerUID owns what another local user plants at predictable names.
const attackerUID = 12345

// spillPlantedEnv names, for TestSpillAsNobody's run of the tests as
// uid 65534, a state directory of ours where the attacker planted
// ollie-spill before we ran.
const spillPlantedEnv = "OLLIE_TEST_SPILL_PLANTED"

// private checks that dir is a real directory of ours with mode 0700.
func private(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0700 || owner(fi) != os.Getuid() {
		t.Fatalf("%s: mode %s owner %d, want a directory 0700 of uid %d", dir, fi.Mode(), owner(fi), os.Getuid())
	}
}

func TestSpillCallLimit(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		// A pipeline: the killed process group is both writers.
		"endless": {`{"description": "Write forever."}`, "#!/bin/sh\nyes 'endless output' | cat\n"},
	})
	r.CallOutputLimit = 256 << 10
	// The note says it was stopped at its limit, not its timeout.
	res := r.Run(context.Background(), "endless", json.RawMessage(`{"timeout": 60}`))
	if !res.Failed || !strings.HasPrefix(res.Output, "[stopped: the tool wrote more than 256 KiB of output, the limit of one call; it and every process it started were killed]") {
		t.Fatalf("endless writer: %.300q", res.Output)
	}
	if !strings.Contains(res.Output, "; what the tool wrote up to the call's limit is in "+res.Spill+"]") {
		t.Errorf("the note does not say the file holds the output up to the limit: %q", res.Output[len(res.Output)-300:])
	}
	fi, err := os.Stat(res.Spill)
	if err != nil || fi.Size() != 256<<10 {
		t.Fatalf("spill file: %v, %v; want %d bytes", fi, err, 256<<10)
	}
}

func TestSpillSessionLimit(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		"big": {`{"description": "Big."}`, "#!/bin/sh\nhead -c 100000 /dev/zero | tr '\\0' x\n"},
	})
	r.OutputCap = 1000
	r.SessionSpillLimit = 200 << 10 // two whole outputs and 4800 bytes
	ctx := context.Background()
	for i, want := range []string{
		"the whole output is in ",
		"the whole output is in ",
		"its first 4800 bytes are in ",
		"it was not kept: this session has kept 200 KiB of cut output on disk, its limit]",
	} {
		res := r.Run(ctx, "big", nil)
		if res.Failed || res.ExitCode != 0 {
			t.Fatalf("call %d: the session's limit stopped the call: %+v", i, res)
		}
		if len(res.Output) < 1000 || !strings.Contains(res.Output, "[output cut: 99000 of 100000 bytes not shown; "+want) {
			t.Fatalf("call %d: note %q, want %q", i, res.Output[1000:], want)
		}
		if i == 2 {
			if !strings.Contains(res.Output, "; the rest was not kept: this session has kept 200 KiB of cut output on disk, its limit]") {
				t.Errorf("call %d: the note does not say why the rest was not kept: %q", i, res.Output[1000:])
			}
			if fi, err := os.Stat(res.Spill); err != nil || fi.Size() != 4800 {
				t.Errorf("call %d: spill file %v %v, want 4800 bytes", i, fi, err)
			}
		}
		if i == 3 && res.Spill != "" {
			t.Errorf("call %d: over the session's limit, yet output was kept in %s", i, res.Spill)
		}
	}
}

// TestSpillDirPrivate checks the directory a Runner makes for itself
// (olliesrv tools run): private, named by MkdirTemp, and not the
// predictable name earlier versions used, even when another user has
// planted a directory or a symbolic link there.
func TestSpillDirPrivate(t *testing.T) {
	tools := map[string][2]string{
		"big": {`{"description": "Big."}`, "#!/bin/sh\nhead -c 3000 /dev/zero | tr '\\0' x\n"},
	}
	trap := t.TempDir()
	legacy := filepath.Join(os.TempDir(), "ollie-output-"+strconv.Itoa(os.Getuid()))
	if _, err := os.Lstat(legacy); os.IsNotExist(err) {
		if err := os.Symlink(trap, legacy); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(legacy)
	}
	base := t.TempDir()
	var dirs []string
	for _, b := range []string{base, base, ""} {
		r, _ := runner(t, tools)
		r.SpillDir, r.SpillBase, r.OutputCap = "", b, 1000
		res := r.Run(context.Background(), "big", nil)
		if res.Spill == "" {
			t.Fatalf("nothing kept: %q", res.Output)
		}
		dir := filepath.Dir(res.Spill)
		private(t, dir)
		want := b
		if want == "" {
			want = os.TempDir()
		}
		if filepath.Dir(dir) != want || !strings.HasPrefix(filepath.Base(dir), "ollie-output-") || dir == legacy {
			t.Errorf("spill dir %s, want a fresh ollie-output-* under %s", dir, want)
		}
		dirs = append(dirs, dir)
		os.RemoveAll(dir)
	}
	if dirs[0] == dirs[1] {
		t.Errorf("two runners share %s", dirs[0])
	}
	if ents, _ := os.ReadDir(trap); len(ents) != 0 {
		t.Errorf("output went to the planted link's target: %v", ents)
	}
}

func TestSpillRoot(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	state := filepath.Join(t.TempDir(), "state")
	root, err := SpillRoot(state)
	if err != nil || root != filepath.Join(state, "ollie-spill") {
		t.Fatalf("SpillRoot = %q %v", root, err)
	}
	private(t, root)

	// A private XDG_RUNTIME_DIR is preferred; one others can enter is not.
	xdg := t.TempDir()
	os.Chmod(xdg, 0700)
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	if root, err := SpillRoot(state); err != nil || root != filepath.Join(xdg, "ollie-spill") {
		t.Errorf("with a private XDG_RUNTIME_DIR: %q %v", root, err)
	}
	os.Chmod(xdg, 0755)
	if root, err := SpillRoot(state); err != nil || root != filepath.Join(state, "ollie-spill") {
		t.Errorf("with XDG_RUNTIME_DIR 0755: %q %v", root, err)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")

	// Ours but loose is made private.
	os.Chmod(root, 0755)
	if _, err := SpillRoot(state); err != nil {
		t.Fatal(err)
	}
	private(t, root)

	// A link at the predictable name is refused, its target untouched.
	trap := t.TempDir()
	os.RemoveAll(root)
	if err := os.Symlink(trap, root); err != nil {
		t.Fatal(err)
	}
	if _, err := SpillRoot(state); err == nil || !strings.Contains(err.Error(), root+" is not a directory") {
		t.Errorf("a symbolic link at %s: %v", root, err)
	}
	os.Remove(root)

	// A state directory others may write to is refused.
	os.Chmod(state, 0777)
	if _, err := SpillRoot(state); err == nil || !strings.Contains(err.Error(), "others may change") {
		t.Errorf("a state directory of mode 0777: %v", err)
	}
	os.Chmod(state, 0700)

	// Another user's directory at the predictable name.
	switch planted := os.Getenv(spillPlantedEnv); {
	case planted != "":
		// Planted by root for TestSpillAsNobody, before we ran.
		if _, err := SpillRoot(planted); err == nil || !strings.Contains(err.Error(), "belongs to uid "+strconv.Itoa(attackerUID)) {
			t.Errorf("the attacker's %s/ollie-spill: %v", planted, err)
		}
	case os.Getuid() == 0:
		os.Mkdir(root, 0777)
		os.Chown(root, attackerUID, attackerUID)
		if _, err := SpillRoot(state); err == nil || !strings.Contains(err.Error(), "belongs to uid "+strconv.Itoa(attackerUID)) {
			t.Errorf("the attacker's %s: %v", root, err)
		}
		os.Remove(root)
		os.Chown(xdg, attackerUID, attackerUID)
		os.Chmod(xdg, 0700)
		t.Setenv("XDG_RUNTIME_DIR", xdg)
		if root, err := SpillRoot(state); err != nil || root != filepath.Join(state, "ollie-spill") {
			t.Errorf("with the attacker's XDG_RUNTIME_DIR: %q %v", root, err)
		}
	default:
		lab.Root(t, "planting another user's directory (or TestSpillAsNobody's planted one)")
	}
	if ents, _ := os.ReadDir(trap); len(ents) != 0 {
		t.Errorf("something was made in the link's target: %v", ents)
	}
}

func TestSpillArea(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	state := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	live, err := OpenSpillArea(state, log)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	root := filepath.Dir(live.Dir)
	private(t, live.Dir)
	if !strings.HasPrefix(filepath.Base(live.Dir), "daemon-") || root != filepath.Join(state, "ollie-spill") {
		t.Fatalf("area %s", live.Dir)
	}

	mk := func(name string, lock bool, age time.Duration) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "session-x"), []byte("output"), 0600)
		if lock {
			os.WriteFile(filepath.Join(dir, "lock"), nil, 0600)
		}
		old := time.Now().Add(-age)
		os.Chtimes(dir, old, old)
		return dir
	}
	dead := mk("daemon-dead", true, 0)
	deadOld := mk("daemon-nolock", false, time.Hour)
	starting := mk("daemon-starting", false, 0) // made its dir, not yet its lock
	other := mk("notours", true, time.Hour)
	run := mk("ollie-output-x", false, time.Hour) // olliesrv tools run's: kept
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "precious"), nil, 0600)
	link := filepath.Join(root, "daemon-link")
	os.Symlink(outside, link)
	var foreign string
	if os.Getuid() == 0 {
		foreign = mk("daemon-foreign", true, time.Hour)
		os.Chown(foreign, attackerUID, attackerUID)
	}

	second, err := OpenSpillArea(state, log)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	for _, gone := range []string{dead, deadOld} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("a dead daemon's %s was not swept: %v", gone, err)
		}
	}
	for _, kept := range []string{live.Dir, starting, other, run, link, filepath.Join(outside, "precious"), foreign} {
		if _, err := os.Lstat(kept); kept != "" && err != nil {
			t.Errorf("%s was swept: %v", kept, err)
		}
	}
	if second.Dir == live.Dir {
		t.Error("two daemons share an area")
	}
	live.Close()
	if _, err := os.Lstat(live.Dir); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", live.Dir, err)
	}
}

// TestSpillChild runs the whole path through a real toolsrv: a session's
// spill directory is private and under its SpillBase, a call's note names
// a file there that the real file_read opens under the sandbox, another
// session's is not readable, and Close removes the directory.
func TestSpillChild(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		"big": {`{"description": "Big."}`, "#!/bin/sh\nseq 1 20000 | sed 's/^/line /'\n"},
	})
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_DATA", data)
	base := t.TempDir()
	c, err := Spawn(context.Background(), SpawnConfig{Cwd: r.Cwd, SessionID: "s1", SpillBase: base, Stderr: os.Stderr,
		ToolsPath: append(r.ToolsPath, filepath.Join(data, "tools"))})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	ctx := context.Background()
	res, err := c.Call(ctx, "big", nil)
	if err != nil || res.Failed {
		t.Fatalf("big: %v %+v", err, res)
	}
	m := regexp.MustCompile(`the whole output is in (\S+)\]`).FindStringSubmatch(res.Output)
	if m == nil || m[1] != res.Spill {
		t.Fatalf("no note naming the file: %q", res.Output[len(res.Output)-200:])
	}
	dir := filepath.Dir(res.Spill)
	private(t, dir)
	if filepath.Dir(dir) != base || !strings.HasPrefix(filepath.Base(dir), "session-") {
		t.Fatalf("spill dir %s, want a session-* under %s", dir, base)
	}

	res, err = c.Call(ctx, "file_read", json.RawMessage(`{"path": "`+m[1]+`", "offset": 19999}`))
	if err != nil || res.Failed || !strings.Contains(res.Output, "line 20000") {
		t.Fatalf("file_read of the spill file under the sandbox: %v %+v", err, res)
	}
	// Another session's directory beside it stays out of reach.
	otherDir := filepath.Join(base, "session-other")
	os.Mkdir(otherDir, 0700)
	other := filepath.Join(otherDir, "big.stdout-1")
	os.WriteFile(other, []byte("another session's output\n"), 0600)
	res, err = c.Call(ctx, "file_read", json.RawMessage(`{"path": "`+other+`"}`))
	if err != nil || !res.Failed || strings.Contains(res.Output, "another session's output") {
		t.Fatalf("file_read of another session's spill file: %v %+v", err, res)
	}

	c.Close()
	closed = true
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the session's spill dir outlived its toolsrv: %v", err)
	}
}

// TestSpillAsNobody runs the spill tests as an unprivileged user (uid
// 65534), against a state directory where another user planted
// ollie-spill first.
func TestSpillAsNobody(t *testing.T) {
	if os.Getuid() != 0 {
		lab.Root(t, "running the tests as another user")
	}
	bin, err := os.MkdirTemp("", "ollie-spill-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	os.Chmod(bin, 0755)
	exe, _ := os.Executable()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copyExe := filepath.Join(bin, "toolsrv.test")
	if err := os.WriteFile(copyExe, b, 0755); err != nil {
		t.Fatal(err)
	}
	// The victim's state directory; the attacker got to ollie-spill first.
	state := filepath.Join(bin, "state")
	os.Mkdir(state, 0700)
	os.Chown(state, 65534, 65534)
	planted := filepath.Join(state, "ollie-spill")
	os.Mkdir(planted, 0777)
	os.Chown(planted, attackerUID, attackerUID)
	legacy := filepath.Join(os.TempDir(), "ollie-output-65534")
	if err := os.Mkdir(legacy, 0777); err == nil {
		os.Chown(legacy, attackerUID, attackerUID)
		defer os.RemoveAll(legacy)
	}
	cwd, _ := os.Getwd()
	cmd := exec.Command(copyExe, "-test.run=^TestSpill(CallLimit|SessionLimit|DirPrivate|Root|Area|Child)$", "-test.v", "-test.count=1")
	cmd.Dir = cwd
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=/tmp", spillPlantedEnv + "=" + state}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the spill tests as uid 65534: %v\n%s", err, out)
	}
	for _, name := range []string{"TestSpillCallLimit", "TestSpillSessionLimit", "TestSpillDirPrivate", "TestSpillRoot", "TestSpillArea", "TestSpillChild"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass as uid 65534:\n%s", name, out)
		}
	}
	if ents, _ := os.ReadDir(legacy); len(ents) != 0 {
		t.Errorf("output went into the attacker's %s: %v", legacy, ents)
	}
	if ents, _ := os.ReadDir(planted); len(ents) != 0 {
		t.Errorf("output went into the attacker's %s: %v", planted, ents)
	}
}
