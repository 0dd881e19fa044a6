package toolsrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"ollie/internal/lab"
)

// The sudo tests run the credential gate as real users against the real
// sudo: the test binary re-executes itself as the user (sudoHelper) with
// the passwords a person would type.
const sudoHelperEnv = "OLLIE_TEST_SUDO_HELPER"

type sudoSpec struct {
	Tool      string   `json:"tool"`
	Args      string   `json:"args"`
	Passwords []string `json:"passwords"`
	Sudo      string   `json:"sudo"` // sudoPath; "" keeps "sudo"
}

type sudoOutcome struct {
	Output   string   `json:"output"`
	Err      string   `json:"err"`
	Problems []string `json:"problems"` // one per password asked
	Closed   string   `json:"closed"`
}

// typist is a grant whose person types the passwords in order.
type typist struct {
	pws      []string
	problems []string
}

func (g *typist) Password(ctx context.Context, attempt int, problem string) ([]byte, error) {
	g.problems = append(g.problems, problem)
	if len(g.pws) == 0 {
		return nil, errors.New("denied: no more passwords")
	}
	pw := g.pws[0]
	g.pws = g.pws[1:]
	return []byte(pw), nil
}

func (g *typist) Close(string) error { return nil }

func sudoHelper() {
	var spec sudoSpec
	json.NewDecoder(os.Stdin).Decode(&spec)
	if spec.Sudo != "" {
		sudoPath = spec.Sudo
	}
	g := &typist{pws: spec.Passwords}
	r := &Runner{Cwd: "/"}
	var out sudoOutcome
	cmd, err := r.sudoCommand(context.Background(), &Tool{Name: "whoami_root", Path: spec.Tool}, json.RawMessage(spec.Args), g)
	if err == nil {
		var b strings.Builder
		cmd.Stdout, cmd.Stderr = &b, &b
		p := &callProc{cmd: cmd}
		if err = p.start(); err == nil {
			err = p.wait()
		}
		out.Output = b.String()
	}
	if err != nil {
		out.Err = err.Error()
	}
	out.Problems = g.problems
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

// sudoUser makes (or reuses) a local user with a password and the given
// sudoers lines, removed when the test ends.
func sudoUser(t *testing.T, name, password, sudoers string) (uid, gid int) {
	t.Helper()
	if os.Getuid() != 0 {
		lab.Root(t, "the sudo tests create users, which")
	}
	if _, err := exec.LookPath("sudo"); err != nil {
		lab.Need(t, false, "the sudo tests need sudo: apt-get install sudo (.ci/run does)")
	}
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "-M", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v %s", name, err, out)
		}
	}
	chpw := exec.Command("chpasswd")
	chpw.Stdin = strings.NewReader(name + ":" + password + "\n")
	if out, err := chpw.CombinedOutput(); err != nil {
		t.Fatalf("chpasswd: %v %s", err, out)
	}
	file := "/etc/sudoers.d/ollie-test-" + name
	if sudoers != "" {
		if err := os.WriteFile(file, []byte(sudoers+"\n"), 0440); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(file) })
	u, _ := user.Lookup(name)
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// asUser runs the gate as uid with spec.
func asUser(t *testing.T, exe string, uid, gid int, spec sudoSpec) sudoOutcome {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = []string{sudoHelperEnv + "=1", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	b, _ := json.Marshal(spec)
	cmd.Stdin = strings.NewReader(string(b))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var o sudoOutcome
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	return o
}

func TestSudoGate(t *testing.T) {
	// The test binary and the tool, where the users can run them.
	dir, err := os.MkdirTemp("", "ollie-sudo-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0755)
	self, _ := os.Executable()
	exe := filepath.Join(dir, "toolsrv.test")
	src, _ := os.Open(self)
	dst, _ := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0755)
	io.Copy(dst, src)
	src.Close()
	dst.Close()
	tool := filepath.Join(dir, "whoami_root")
	os.WriteFile(tool, []byte("#!/bin/sh\nid -u\ncat\n"), 0755)
	args := `{"path": "/etc", "n": 1}`

	uid, gid := sudoUser(t, "olsudo1", "right-pw", "olsudo1 ALL=(ALL) ALL")
	t.Run("password, wrong then right", func(t *testing.T) {
		o := asUser(t, exe, uid, gid, sudoSpec{Tool: tool, Args: args, Passwords: []string{"wrong-pw", "right-pw"}})
		if o.Err != "" || o.Output != "0\n"+args {
			t.Errorf("outcome %+v: want the tool as root with exactly its arguments on stdin", o)
		}
		if fmt.Sprint(o.Problems) != "[ wrong password]" {
			t.Errorf("asked %q", o.Problems)
		}
	})
	t.Run("wrong three times", func(t *testing.T) {
		o := asUser(t, exe, uid, gid, sudoSpec{Tool: tool, Args: args, Passwords: []string{"a", "b", "c", "right-pw"}})
		if !strings.Contains(o.Err, "wrong 3 times") || len(o.Problems) != 3 || o.Output != "" {
			t.Errorf("outcome %+v", o)
		}
	})
	t.Run("declined", func(t *testing.T) {
		o := asUser(t, exe, uid, gid, sudoSpec{Tool: tool, Args: args})
		if !strings.Contains(o.Err, "not run") || o.Output != "" {
			t.Errorf("outcome %+v", o)
		}
	})
	t.Run("sudo missing", func(t *testing.T) {
		o := asUser(t, exe, uid, gid, sudoSpec{Tool: tool, Args: args, Sudo: "/nonexistent/sudo"})
		if !strings.Contains(o.Err, "sudo is not installed") {
			t.Errorf("outcome %+v", o)
		}
	})

	nuid, ngid := sudoUser(t, "olsudo2", "pw2", "olsudo2 ALL=(ALL) NOPASSWD: ALL")
	t.Run("NOPASSWD", func(t *testing.T) {
		o := asUser(t, exe, nuid, ngid, sudoSpec{Tool: tool, Args: args, Passwords: []string{"unused"}})
		if o.Err != "" || o.Output != "0\n"+args || len(o.Problems) != 0 {
			t.Errorf("outcome %+v: want no password asked", o)
		}
	})

	xuid, xgid := sudoUser(t, "olsudo3", "pw3", "")
	t.Run("not in sudoers", func(t *testing.T) {
		o := asUser(t, exe, xuid, xgid, sudoSpec{Tool: tool, Args: args, Passwords: []string{"pw3"}})
		if !strings.Contains(o.Err, "not in the host's sudoers") {
			t.Errorf("outcome %+v", o)
		}
	})

	tuid, tgid := sudoUser(t, "olsudo4", "pw4", "Defaults:olsudo4 requiretty\nolsudo4 ALL=(ALL) ALL")
	t.Run("requiretty", func(t *testing.T) {
		o := asUser(t, exe, tuid, tgid, sudoSpec{Tool: tool, Args: args, Passwords: []string{"pw4"}})
		if !strings.Contains(o.Err, "requiretty") {
			t.Errorf("outcome %+v", o)
		}
	})
}
