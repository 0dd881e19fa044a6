package toolsrv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
)

// TestSudoPasswordNowhere runs the credential gate as a real user against
// the real sudo, with a wrong password and then the right one, and looks
// for both where they must never be while the tool runs as root: on argv
// and in the environment of every sudo started (sudo -l, sudo -v and the
// one running the tool) and of the tool, in any regular file those
// processes hold open, in every process's argv and environment, and in
// any file under /tmp, /var/tmp and /dev/shm.
func TestSudoPasswordNowhere(t *testing.T) {
	right, wrong := "pw-right-"+randomHex(t), "pw-wrong-"+randomHex(t)
	secrets := map[string]string{"the password": right, "the wrong password": wrong}
	uid, gid := sudoUser(t, "olsudo5", right, "olsudo5 ALL=(ALL) ALL")
	realSudo, err := exec.LookPath("sudo")
	if err == nil {
		realSudo, err = filepath.EvalSymlinks(realSudo)
	}
	if err != nil {
		t.Fatal(err)
	}
	rig := newSudoRig(t, realSudo)

	args := `{"n": 1}`
	spec, _ := json.Marshal(sudoSpec{Tool: rig.tool, Args: args, Passwords: []string{wrong, right}, Sudo: rig.wrapper})
	helper := exec.Command(rig.exe, "-test.run=^$")
	helper.Env = []string{sudoHelperEnv + "=1", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/"}
	helper.Dir = "/"
	helper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	helper.Stdin = bytes.NewReader(spec)
	var out bytes.Buffer
	helper.Stdout, helper.Stderr = &out, &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- helper.Wait() }()
	t.Cleanup(func() {
		helper.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})

	// The tool, as root, is held: find it and every process between it
	// and the helper.
	toolPid := rig.waitTool(t, exited, &out)
	chain := []int{toolPid}
	for p := toolPid; p != helper.Process.Pid; {
		p = parentPid(t, p)
		if p <= 1 {
			t.Fatalf("tool %d does not descend from the helper %d", toolPid, helper.Process.Pid)
		}
		chain = append(chain, p)
	}
	if !searchChain(t, secrets, chain, realSudo) {
		t.Fatalf("no process between the tool and the helper runs %s: %v", realSudo, chain)
	}
	searchProc(t, secrets)
	searchDisk(t, secrets, rig.logDir)
	searchSudoLogs(t, secrets, rig.logDir)

	rig.release()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool did not end once released")
	}
	var o sudoOutcome
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatalf("helper said %q: %v", out.String(), err)
	}
	if o.Err != "" || o.Output != "0\n"+args || fmt.Sprint(o.Problems) != "[ wrong password]" {
		t.Errorf("outcome %+v: want the tool run as root with its arguments after one wrong password", o)
	}
	searchDisk(t, secrets, rig.logDir)
}

// sudoRig is where the user and root can reach: the test binary, the
// tool, a wrapper that records how each sudo was started, and a fifo that
// holds the tool while it runs.
type sudoRig struct {
	exe     string // the test binary, as the helper
	logDir  string // the wrapper's records
	wrapper string // the sudo the gate runs
	tool    string // writes its pid to pidFile, then waits on the fifo
	pidFile string
	fifo    string
}

func newSudoRig(t *testing.T, realSudo string) *sudoRig {
	dir, err := os.MkdirTemp("", "ollie-sudo-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0755)
	r := &sudoRig{exe: filepath.Join(dir, "toolsrv.test"), logDir: filepath.Join(dir, "log"), wrapper: filepath.Join(dir, "sudo"),
		tool: filepath.Join(dir, "hold_root"), pidFile: filepath.Join(dir, "tool.pid"), fifo: filepath.Join(dir, "hold")}
	copyFile(t, r.exe)
	os.Mkdir(r.logDir, 0777)
	os.Chmod(r.logDir, 0777)
	os.WriteFile(r.wrapper, []byte(fmt.Sprintf(`#!/bin/sh
# What sudo was started with, as the kernel shows it.
f=%[1]s/sudo.$$
cat /proc/$$/cmdline > "$f.cmdline"
cat /proc/$$/environ > "$f.environ"
exec %[2]s "$@"
`, r.logDir, realSudo)), 0755)
	if err := syscall.Mkfifo(r.fifo, 0600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(r.tool, []byte(fmt.Sprintf("#!/bin/sh\necho $$ > %[1]s.tmp && mv %[1]s.tmp %[1]s\ncat %[2]s >/dev/null\nid -u\ncat\n", r.pidFile, r.fifo)), 0755)
	t.Cleanup(r.release)
	return r
}

// release lets the tool go: opening the fifo for writing (the tool reads
// it).
func (r *sudoRig) release() {
	if f, err := os.OpenFile(r.fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

// waitTool waits for the tool's pid file, unless the helper ends first.
func (r *sudoRig) waitTool(t *testing.T, exited <-chan error, out *bytes.Buffer) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var toolPid int
	var ended error
	started := await.Poll(ctx, func() bool {
		select {
		case ended = <-exited:
			cancel()
			return false
		default:
		}
		if b, err := os.ReadFile(r.pidFile); err == nil {
			toolPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return toolPid != 0
	})
	switch {
	case started:
		return toolPid
	case ended != nil || ctx.Err() == context.Canceled:
		t.Fatalf("the helper ended before the tool ran: %v\n%s", ended, out.String())
	default:
		t.Fatalf("the tool did not start within 60s\n%s", out.String())
	}
	return 0
}

// searchChain looks for the secrets in the argv, environment and open
// regular files of each process in chain, and says whether one of them
// runs realSudo.
func searchChain(t *testing.T, secrets map[string]string, chain []int, realSudo string) (sawSudo bool) {
	t.Helper()
	for _, pid := range chain {
		exePath, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		sawSudo = sawSudo || exePath == realSudo
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if err != nil {
				t.Fatalf("pid %d (%s): %v", pid, exePath, err)
			}
			for what, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s is in the %s of pid %d (%s)", what, f, pid, exePath)
				}
			}
		}
		// A file it reads the password from, even one already unlinked.
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			p := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() || fi.Size() > 64<<20 {
				continue
			}
			b, _ := os.ReadFile(p)
			target, _ := os.Readlink(p)
			for what, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s is in %s, open in pid %d (%s) as fd %s", what, target, pid, exePath, fd.Name())
				}
			}
		}
	}
	return sawSudo
}

// searchSudoLogs looks through every sudo started, as the wrapper saw it:
// sudo -l, sudo -v for each password, and the one running the tool.
func searchSudoLogs(t *testing.T, secrets map[string]string, logDir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(logDir, "sudo.*.cmdline"))
	if len(logs) < 4 {
		t.Errorf("%d sudo commands recorded, want sudo -l, sudo -v twice and the tool's", len(logs))
	}
	for _, cmdline := range logs {
		for _, f := range []string{cmdline, strings.TrimSuffix(cmdline, ".cmdline") + ".environ"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for what, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					argv, _ := os.ReadFile(cmdline)
					t.Errorf("%s is in the %s of sudo started as %q", what, filepath.Ext(f)[1:], bytes.ReplaceAll(argv, []byte{0}, []byte{' '}))
				}
			}
		}
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// copyFile copies the test binary to dst, where other users can run it.
func copyFile(t *testing.T, dst string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func parentPid(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			p, _ := strconv.Atoi(strings.TrimSpace(v))
			return p
		}
	}
	t.Fatalf("pid %d: no PPid", pid)
	return 0
}

// searchProc looks through every process's argv and environment.
func searchProc(t *testing.T, secrets map[string]string) {
	t.Helper()
	for _, f := range []string{"cmdline", "environ"} {
		files, _ := filepath.Glob("/proc/[0-9]*/" + f)
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				continue // gone
			}
			for what, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s is in %s", what, p)
				}
			}
		}
	}
}

// searchDisk looks through the regular files under the temporary
// directories, except the wrapper's records under skip.
func searchDisk(t *testing.T, secrets map[string]string, skip string) {
	t.Helper()
	roots := []string{"/tmp", "/var/tmp", "/dev/shm"}
	if d := os.TempDir(); !slices.Contains(roots, d) {
		roots = append(roots, d)
	}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone, or unreadable
			}
			if p == skip {
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if fi, err := d.Info(); err != nil || fi.Size() > 64<<20 {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for what, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s is in the file %s", what, p)
				}
			}
			return nil
		})
	}
}
