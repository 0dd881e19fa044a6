// Package sudolab runs the real olliesrv as a local user who has a
// password and may run anything as root with it (sudoers "USER ALL=(ALL)
// ALL"), its agents talking to a scripted model: the rig for tests of a
// sudo tool approved at the host, through bypass/pending, with the real
// gate, toolsrv and sudo, and nothing in between.
//
// It needs root (it makes the user, sets its password and writes its
// sudoers file) and sudo; without them Start skips the test in plain go
// test and fails it in the lab tier (internal/lab). The test process,
// root, attaches to the daemon's socket as its admin. Users are shared
// between tests (created if missing, their password set again); the
// sudoers file, the daemon and its directory go when the test ends.
//
// It builds olliesrv with the go command, once per test process.
package sudolab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/lab"
	"ollie/internal/nstest"
	"ollie/ns/client"
)

// Config says who runs olliesrv and with what tools.
type Config struct {
	User     string            // the local user, made if missing
	Password string            // the user's password, which sudo asks for
	Tools    map[string]string // the tools path's files: NAME (made executable) and NAME.meta
}

// Host is a running olliesrv.
type Host struct {
	Socket   string          // the namespace socket: root attaches as the admin
	Dir      string          // everything olliesrv's user owns: its home, state, tools, namespace
	Work     string          // a directory of the user's, for sessions' cwd
	LLM      *fakellm.Server // the agents' model
	Log      *nstest.SyncBuffer
	UID, GID int
}

// Start makes the user, builds and starts olliesrv as that user, and
// waits until it serves. The daemon is killed when the test ends.
func Start(t *testing.T, cfg Config) *Host {
	t.Helper()
	lab.Root(t, "sudolab makes a user with a password and sudo rights, which")
	if _, err := exec.LookPath("sudo"); err != nil {
		lab.Need(t, false, "sudolab needs sudo: apt-get install sudo (.ci/run does)")
	}
	srv := build(t)
	uid, gid := makeUser(t, cfg.User, cfg.Password)

	base, err := os.MkdirTemp("", "ollie-sudolab-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	h := &Host{Dir: base, Log: &nstest.SyncBuffer{}, UID: uid, GID: gid}
	mkdir := func(rel string, mode os.FileMode) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bin, tools, home, state, tmp, nsDir := mkdir("bin", 0755), mkdir("tools", 0755), mkdir("home", 0700), mkdir("state", 0700), mkdir("tmp", 0700), mkdir("ns", 0700)
	h.Work = mkdir("work", 0755)
	mkdir("home/.config/ollie", 0700)
	exe, err := os.ReadFile(srv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "olliesrv"), exe, 0755); err != nil {
		t.Fatal(err)
	}
	os.Symlink("olliesrv", filepath.Join(bin, "ollie"))
	for name, text := range cfg.Tools {
		mode := os.FileMode(0755)
		if strings.HasSuffix(name, ".meta") {
			mode = 0644
		}
		if err := os.WriteFile(filepath.Join(tools, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(base, "data")
	if out, err := exec.Command("cp", "-r", filepath.Join(moduleDir(t), "data"), data).CombinedOutput(); err != nil {
		t.Fatalf("sudolab: copying data: %v %s", err, out)
	}
	os.Chmod(base, 0755)
	if err := filepath.Walk(base, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, uid, gid)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	h.LLM = fakellm.Start(t)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "NAMESPACE" || k == "TMPDIR" || k == "USER" || k == "LOGNAME" || k == "SUDO_ASKPASS" ||
			strings.HasPrefix(k, "XDG_") || strings.HasPrefix(k, "OLLIE_") || strings.HasPrefix(k, "OPENAI_") || strings.HasPrefix(k, "OLLAMA_") {
			continue
		}
		env = append(env, kv)
	}
	cmd := exec.Command(filepath.Join(bin, "olliesrv"))
	cmd.Dir = h.Work
	cmd.Env = append(env, "NAMESPACE="+nsDir, "HOME="+home, "USER="+cfg.User, "LOGNAME="+cfg.User,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_STATE_HOME="+state, "TMPDIR="+tmp,
		"OLLIE_DATA="+data, "OLLIE_TOOLS_PATH="+tools,
		"OPENAI_BASE_URL="+h.LLM.URL+"/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model")
	cmd.Stdout, cmd.Stderr = h.Log, h.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	h.Socket = filepath.Join(nsDir, "ollie")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("sudolab: olliesrv exited:\n%s", h.Log.String())
		default:
		}
		if c, err := client.DialAs(h.Socket, ""); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sudolab: olliesrv did not serve %s:\n%s", h.Socket, h.Log.String())
		}
	}
	return h
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// build builds olliesrv, once per test process, into a directory other
// users can read.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ollie-sudolab-bin-")
		if err != nil {
			buildErr = err
			return
		}
		nstest.AtExit(func() { os.RemoveAll(dir) })
		built = filepath.Join(dir, "olliesrv")
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", built, "ollie/cmd/olliesrv")
		cmd.Dir = moduleDir(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("sudolab: building olliesrv: %v", buildErr)
	}
	return built
}

// moduleDir is the root of the ollie module, which the test runs in.
func moduleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("sudolab: where is the module? %v", err)
	}
	return strings.TrimSpace(string(out))
}

// makeUser makes (or reuses) name with password, and lets it run
// anything as root with that password until the test ends.
func makeUser(t *testing.T, name, password string) (uid, gid int) {
	t.Helper()
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "-M", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
			t.Fatalf("sudolab: useradd %s: %v %s", name, err, out)
		}
	}
	chpw := exec.Command("chpasswd")
	chpw.Stdin = strings.NewReader(name + ":" + password + "\n")
	if out, err := chpw.CombinedOutput(); err != nil {
		t.Fatalf("sudolab: chpasswd: %v %s", err, out)
	}
	file := "/etc/sudoers.d/ollie-sudolab-" + name
	if err := os.WriteFile(file, []byte(name+" ALL=(ALL) ALL\n"), 0440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(file) })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// ToolOutput waits until the model has been asked n times and returns
// what the last tool call in the nth request gave it: a tool's output,
// or why it did not run.
func (h *Host) ToolOutput(ctx context.Context, n int) (string, error) {
	for {
		if reqs := h.LLM.ChatRequests(); len(reqs) >= n {
			out := ""
			for _, m := range reqs[n-1].Messages {
				if m.Role == "tool" {
					out = m.Text()
				}
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("sudolab: the model was asked %d times, not %d: %w", len(h.LLM.ChatRequests()), n, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
