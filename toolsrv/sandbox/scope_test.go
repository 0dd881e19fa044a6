//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Landlock's promises the profile relies on, each checked from inside a
// tool: a test here fails if the protection is dropped from apply (write
// rights with MakeChar or MakeBlock, cfg.Scoped unset).

// Root can make device nodes; write rights never include it, so a node
// made in a writable directory cannot reopen a disk behind Landlock.
func TestNoDeviceNodes(t *testing.T) {
	requireLandlock(t, 3)
	if os.Getuid() != 0 {
		t.Skip("only root can make device nodes: as another user this proves nothing")
	}
	e := newEnv(t)
	r := sh(t, e.policy(t), e.cwd, `mknod char c 1 3 && echo made char
mknod block b 7 0 && echo made block
mkfifo fifo && echo made fifo`)
	if r.stdout != "made fifo\n" || strings.Count(r.stderr, "ermission denied") != 2 {
		t.Errorf("stdout %q, stderr %q; want only the fifo made and two denials", r.stdout, r.stderr)
	}
	for _, name := range []string{"char", "block"} {
		if _, err := os.Lstat(filepath.Join(e.cwd, name)); err == nil {
			t.Errorf("device node %s exists", name)
		}
	}
}

// A tool cannot signal a process outside its sandbox (not the test, not a
// sibling of the helper), but can signal itself and its own children.
func TestSignalScope(t *testing.T) {
	requireLandlock(t, 6)
	sibling := exec.Command("/bin/sleep", "30")
	if err := sibling.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sibling.Process.Kill(); sibling.Wait() }()
	e := newEnv(t)
	r := sh(t, e.policy(t), e.cwd, fmt.Sprintf(`kill -0 %d; echo test=$?
kill -0 %d; echo sibling=$?
kill -0 $PPID; echo helper=$?
kill -0 $$; echo self=$?
sleep 5 & kill -0 $!; echo child=$?; kill $!`, os.Getpid(), sibling.Process.Pid))
	want := "test=1\nsibling=1\nhelper=1\nself=0\nchild=0\n"
	if r.stdout != want || strings.Count(r.stderr, "Operation not permitted") != 3 {
		t.Errorf("stdout %q, stderr %q; want %q and three EPERMs", r.stdout, r.stderr, want)
	}
}

// A tool cannot connect to an abstract Unix socket made outside its
// sandbox; the same tool unsandboxed can.
func TestAbstractSocketScope(t *testing.T) {
	requireLandlock(t, 6)
	name := "ollie-sandbox-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	l, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	pol := e.policy(t)
	r := run(t, pol, e.cwd, self, testToolArg, "abstract", name)
	if r.code == 0 || !strings.Contains(r.stdout, "operation not permitted") {
		t.Errorf("sandboxed: exit %d, stdout %q, stderr %q; want operation not permitted", r.code, r.stdout, r.stderr)
	}
	cmd, err := Unsandboxed(context.Background(), pol, self, []string{testToolArg, "abstract", name})
	if err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, e.cwd); r.code != 0 {
		t.Errorf("unsandboxed: exit %d, stdout %q: the listener does not work", r.code, r.stdout)
	}
}

// The helper is outside the tool's Landlock domain, every thread of it: the
// tool cannot read (nor so write) its memory, which would let it run code
// unconfined. It can its own.
func TestHelperOutOfReach(t *testing.T) {
	requireLandlock(t, 3)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	r := run(t, e.policy(t), e.cwd, self, testToolArg, "peek")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 2 || lines[0] != "self bad address" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want self readable and the helper's threads listed", r.code, r.stdout, r.stderr)
	}
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, " "+syscall.EPERM.Error()) {
			t.Errorf("thread %s: want %v", l, syscall.EPERM)
		}
	}
}
