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

	"ollie/internal/lab"
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
// In the host's pid namespace Landlock refuses it (EPERM); in the call's
// own, the processes outside are not even there (ESRCH), and the parent
// it sees is the call's init, its own.
func TestSignalScope(t *testing.T) {
	requireLandlock(t, 6)
	sibling := exec.Command("/bin/sleep", "30")
	if err := sibling.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sibling.Process.Kill(); sibling.Wait() }()
	script := fmt.Sprintf(`kill -0 %d; echo test=$?
kill -0 %d; echo sibling=$?
kill -0 $PPID; echo parent=$?
kill -0 $$; echo self=$?
sleep 5 & kill -0 $!; echo child=$?; kill $!`, os.Getpid(), sibling.Process.Pid)
	t.Run("host pid namespace", func(t *testing.T) {
		t.Setenv(noOwnProcEnv, "1")
		if testPool != nil {
			// Its helpers were started before: a pool of its own.
			defer func(p *Pool) { testPool = p }(testPool)
			testPool = newTestPool(t)
		}
		e := newEnv(t)
		r := sh(t, e.policy(t), e.cwd, script)
		want := "test=1\nsibling=1\nparent=1\nself=0\nchild=0\n"
		if r.stdout != want || strings.Count(r.stderr, "Operation not permitted") != 3 {
			t.Errorf("stdout %q, stderr %q; want %q and three EPERMs", r.stdout, r.stderr, want)
		}
	})
	t.Run("own pid namespace", func(t *testing.T) {
		p := HostProtection()
		lab.Need(t, p.OwnProc, "a pid namespace and /proc of its own per call (root, or unprivileged user namespaces): "+p.String())
		e := newEnv(t)
		r := sh(t, e.policy(t), e.cwd, script)
		want := "test=1\nsibling=1\nparent=0\nself=0\nchild=0\n"
		if r.stdout != want || strings.Count(r.stderr, "No such process") != 2 {
			t.Errorf("stdout %q, stderr %q; want %q and two ESRCHs", r.stdout, r.stderr, want)
		}
	})
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

// Issue 31 item 2: under the default profile's /proc/self, programs a tool
// starts read their own /proc entry (df read no mount table: "cannot read
// table of mounted file systems"), and the call's /proc shows the call's
// processes only: not the test's, and not root's kernel memory.
func TestOwnProc(t *testing.T) {
	requireLandlock(t, 3)
	p := HostProtection()
	lab.Need(t, p.OwnProc, "a pid namespace and /proc of its own per call (root, or unprivileged user namespaces): "+p.String())
	e := newEnv(t)
	pol := e.policy(t)
	pol.Paths = append(pol.Paths, PathRule{Path: "/proc/self", Access: Read})
	r := sh(t, pol, e.cwd, fmt.Sprintf(`df . >/dev/null && echo df=ok
sh -c 'read -r s < /proc/self/mountinfo && echo child=ok'
test -e /proc/%d && echo test=seen || echo test=hidden
echo procs=$(ls /proc | grep -c '^[0-9]')
cat /proc/kcore >/dev/null 2>&1 && echo kcore=read || echo kcore=denied`, os.Getpid()))
	var procs int
	fmt.Sscanf(r.stdout[strings.Index(r.stdout, "procs=")+len("procs="):], "%d", &procs)
	want := "df=ok\nchild=ok\ntest=hidden\n"
	if !strings.HasPrefix(r.stdout, want) || !strings.HasSuffix(r.stdout, "kcore=denied\n") || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q first and kcore denied", r.stdout, r.stderr, want)
	}
	// The init, sh, ls and grep: a handful, not the host's hundreds.
	if procs < 2 || procs > 8 {
		t.Errorf("the call's /proc lists %d processes, want only its own", procs)
	}
}
