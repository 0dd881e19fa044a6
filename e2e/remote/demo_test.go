package remote

import (
	"bytes"
	"context"
	"io/fs"
	"ollie/internal/demo"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The demo end to end, as make demo runs it: the built binary, in-process
// hosts, the scripted model. It runs as the current user, and as nobody
// when that user is root (as in CI), since the demo is for people without
// root.
func TestDemo(t *testing.T) {
	runDemo(t, nil)
}

func TestDemoAsNobody(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running as another user needs root; TestDemo covers a user without root")
	}
	runDemo(t, &syscall.Credential{Uid: 65534, Gid: 65534})
}

func runDemo(t *testing.T, cred *syscall.Credential) {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	// A directory of the demo's user, the binaries and data/ in it, so
	// that nobody can read them too; it is TMPDIR, where the demo goes.
	tmp, err := os.MkdirTemp("", "ollie-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	bin, data := filepath.Join(tmp, "bin"), filepath.Join(tmp, "data")
	copyTree(t, binDir, bin)
	copyTree(t, dataDir, data)
	if cred != nil {
		filepath.WalkDir(tmp, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				err = os.Lchown(p, int(cred.Uid), int(cred.Gid))
			}
			return err
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ollie-remote"), "-data", data, "demo")
	cmd.Dir = tmp
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "OLLAMA_HOST", "OLLAMA_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL",
			"XDG_RUNTIME_DIR", "OLLIE_REMOTE_DIR", "OLLIE_DATA", "SSH_AUTH_SOCK", "TMPDIR", "HOME", "NAMESPACE":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "TMPDIR="+tmp, "HOME="+tmp)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("the demo took %v", time.Since(start))
	o := out.String()
	if err != nil {
		t.Fatalf("ollie-remote demo: %v\n%s", err, o)
	}

	rows := deployTable(o)
	if len(rows) != 3 {
		t.Errorf("deploy table has %d rows, want 3:\n%s", len(rows), o)
	}
	for i, r := range rows {
		if want := "demo" + string(rune('1'+i)); r[0] != want || r[len(r)-1] != "ok" {
			t.Errorf("deploy row %q, want %s ... ok", r, want)
		}
	}
	if !strings.Contains(o, "* "+demo.ScriptedBanner+" *") {
		t.Errorf("no scripted-model banner:\n%s", o)
	}
	if !strings.Contains(o, "── agent a on demo1, "+demo.ScriptedBanner+" ──") {
		t.Errorf("the agent's output is not labelled as scripted:\n%s", o)
	}
	if n := strings.Count(o, "demo1/a │ "+demo.ScriptedReply+"\n"); n != 1 {
		t.Errorf("the agent's reply is in the output %d times, want once:\n%s", n, o)
	}
	for _, h := range []string{"demo1", "demo2", "demo3"} {
		if !strings.Contains(o, h+": down, olliesrv stopped") {
			t.Errorf("%s was not taken down:\n%s", h, o)
		}
	}

	// Nothing is left: not the demo directory, nor the hosts' namespace
	// directories, nor any process that names them (olliesrv, its
	// toolsrv children, the keeper).
	dir := match(t, o, `demo directory: (\S+)`)
	rdir := match(t, o, `export OLLIE_REMOTE_DIR=(\S+)`)
	nsDir := filepath.Dir(filepath.Dir(match(t, o, `demo1: olliesrv serves (\S+)`)))
	for _, d := range []string{dir, rdir, nsDir} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is left after the demo", d)
		}
	}
	if ps := processesNaming(dir, rdir, nsDir); len(ps) > 0 {
		t.Errorf("left running after the demo:\n%s", strings.Join(ps, "\n"))
	}
}

// deployTable is the rows of the deploy's final table.
func deployTable(out string) [][]string {
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "HOST" && f[1] == "OS/ARCH":
			in = true
		case in && len(f) == 0:
			return rows
		case in:
			rows = append(rows, f)
		}
	}
	return rows
}

func match(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no %s in the output:\n%s", re, s)
	}
	return m[1]
}

// processesNaming lists the processes whose command line or environment
// holds one of the strings.
func processesNaming(ss ...string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(p, "environ"))
		for _, s := range ss {
			if bytes.Contains(cmdline, []byte(s)) || bytes.Contains(environ, []byte(s)) {
				found = append(found, filepath.Base(p)+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
				break
			}
		}
	}
	return found
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}
