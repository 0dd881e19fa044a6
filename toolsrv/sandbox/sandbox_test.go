//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ollie/internal/lab"
)

// TestMain lets the test binary play the sandbox helper, as olliesrv's main
// does, and a tiny tool (testTool) for what a shell cannot do.
func TestMain(m *testing.M) {
	if IsHelper() {
		if os.Getenv(lateListenEnv) != "" {
			lateListen()
		}
		HelperMain()
	}
	if len(os.Args) > 1 && os.Args[1] == testToolArg {
		os.Exit(testTool(os.Args[2:]))
	}
	if os.Getenv(poolTestEnv) != "" {
		testPool = NewPool(2)
		code := m.Run()
		testPool.Close()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const testToolArg = "__sandbox_test_tool"

// lateListenEnv set makes a helper wait in its start, after the Go
// runtime catches signals and before the helper listens for them, until
// a line comes on its stdin: the while a binary with much to initialise
// (olliesrv) spends there, made as long as a test needs.
const lateListenEnv = "SANDBOX_TEST_LATE_LISTEN"

func lateListen() {
	os.Unsetenv(lateListenEnv) // the confining stage goes on at once
	os.Stdout.WriteString("starting\n")
	var b [1]byte
	os.Stdin.Read(b[:])
}

// testTool: "listen PORT" listens on 127.0.0.1:PORT as Go does by
// default (Multipath TCP if it can, else TCP); "mptcp PORT" insists on
// Multipath TCP, which Landlock does not see.
func testTool(args []string) int {
	if len(args) == 2 && args[0] == "mptcp" {
		port, _ := strconv.Atoi(args[1])
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 262) // IPPROTO_MPTCP
		if err == nil {
			err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
			syscall.Close(fd)
		}
		if err != nil {
			fmt.Println("mptcp:", err)
			return 1
		}
		fmt.Println("bound")
		return 0
	}
	if len(args) == 2 && args[0] == "listen" {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:"+args[1])
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		l.Close()
		fmt.Println("listened")
		return 0
	}
	if len(args) == 2 && args[0] == "abstract" {
		c, err := net.Dial("unix", "@"+args[1])
		if err != nil {
			fmt.Println("connect:", err)
			return 1
		}
		c.Close()
		fmt.Println("connected")
		return 0
	}
	if len(args) == 1 && args[0] == "peek" {
		return peek()
	}
	fmt.Println("bad test tool args", args)
	return 2
}

// peek tries to read the memory of its parent (the helper) and of every
// thread near it, and its own, with process_vm_readv at an unmapped
// address: EFAULT means the kernel allowed the access, EPERM that it
// refused. It prints one line per target.
func peek() int {
	buf := make([]byte, 8)
	read := func(pid int) syscall.Errno {
		local := unix.Iovec{Base: &buf[0], Len: uint64(len(buf))}
		remote := unix.RemoteIovec{Base: 8, Len: len(buf)} // never mapped
		_, err := unix.ProcessVMReadv(pid, []unix.Iovec{local}, []unix.RemoteIovec{remote}, 0)
		errno, _ := err.(syscall.Errno)
		return errno
	}
	fmt.Printf("self %v\n", read(os.Getpid()))
	// The helper's threads have ids near its pid; a thread id names the
	// thread, whose Landlock domain is what the kernel checks.
	own, err := os.ReadDir("/proc/self/task") // the tool's own threads
	if err != nil {
		fmt.Println("own threads:", err)
		return 1
	}
	ppid := os.Getppid()
	for tid := ppid; tid < ppid+64; tid++ {
		if slices.ContainsFunc(own, func(d os.DirEntry) bool { return d.Name() == strconv.Itoa(tid) }) {
			continue
		}
		if errno := read(tid); errno != syscall.ESRCH {
			fmt.Printf("%d %v\n", tid, errno)
		}
	}
	return 0
}

// requireLandlock fails (never skips) a test that needs Landlock.
func requireLandlock(t *testing.T, abi int) {
	t.Helper()
	k := Status()
	if k.ABI == 0 {
		t.Fatalf("the kernel lacks Landlock (%s): these tests need it to prove the sandbox", k)
	}
	if k.ABI < abi {
		t.Fatalf("the kernel's Landlock ABI %d is older than the %d this test needs", k.ABI, abi)
	}
}

// env is a sandbox for one test: the deployed default profile resolved
// with a fresh CWD and scratch directory, a directory added to its read
// list, and two directories the profile does not name. Tests that check a
// denial aim it at these, never at a real system file that a broken
// sandbox would let root destroy (except creating /etc/ollie-test).
type env struct {
	cwd, scratch, ro, other, secret string
	profile                         *Profile
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{cwd: t.TempDir(), scratch: t.TempDir(), ro: t.TempDir(), other: t.TempDir(), secret: t.TempDir()}
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	p.Read = append(p.Read, e.ro)
	e.profile = p
	return e
}

func (e *env) policy(t *testing.T) *Policy { return e.policyWith(t, func(*Profile) {}) }

// policyWith resolves a copy of the profile changed by edit.
func (e *env) policyWith(t *testing.T, edit func(*Profile)) *Policy {
	t.Helper()
	p := *e.profile
	edit(&p)
	pol, err := p.Resolve(Vars{CWD: e.cwd, TmpDir: e.scratch, ToolsPath: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs tool with args under pol in dir and waits for it.
func run(t *testing.T, pol *Policy, dir, tool string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if testPool != nil {
		return runPooled(t, ctx, testPool, pol, dir, tool, args...)
	}
	cmd, err := Command(ctx, pol, tool, args)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	return wait(t, cmd, dir)
}

func wait(t *testing.T, cmd *exec.Cmd, dir string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Dir = &stdout, &stderr, dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	err := cmd.Wait()
	r := result{stdout.String(), stderr.String(), 0}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return r
}

func sh(t *testing.T, pol *Policy, dir, script string) result {
	t.Helper()
	return run(t, pol, dir, "/bin/sh", "-c", script)
}

func TestFilesystem(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	pol := e.policy(t)
	if err := os.WriteFile(filepath.Join(e.secret, "key"), []byte("hunter2"), 0o644); err != nil {
		t.Fatal(err)
	}
	roFile := filepath.Join(e.ro, "file")
	if err := os.WriteFile(roFile, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A copy of true where exec is not allowed, to show that exec is denied
	// by the path and not by the program.
	trueBin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.other, "true"), trueBin, 0o755); err != nil {
		t.Fatal(err)
	}
	const etcFile = "/etc/ollie-test"
	os.Remove(etcFile)
	t.Cleanup(func() { os.Remove(etcFile) })

	// Parallel cases, grouped so that the checks below run after them.
	t.Run("cases", func(t *testing.T) {
		for _, tt := range []struct {
			name, script string
			ok           bool
			want         string // in stdout when ok
		}{
			{"write in CWD", "echo hi > f && mkdir d && mv f d/g && cat d/g", true, "hi"},
			{"write in scratch", `echo hi > "$S/f" && cat "$S/f"`, true, "hi"},
			{"write in another temp dir", `echo x > "$O/f"`, false, ""},
			{"write in /etc", "echo x > " + etcFile, false, ""},
			{"read a read-only file", `cat "$R/file"`, true, "keep"},
			{"truncate a read-only file", `: > "$R/file"`, false, ""},
			{"create in a read-only dir", `echo x > "$R/new"`, false, ""},
			{"read a withheld dir", `cat "$K/key"`, false, ""},
			{"list a withheld dir", `ls "$K"`, false, ""},
			{"read /etc/hostname", "cat /etc/hostname >/dev/null && echo read", true, "read"},
			{"exec /bin/true", "/bin/true && echo ran", true, "ran"},
			{"exec from a withheld dir", `"$O/true"`, false, ""},
			{"write /dev/null", "echo x > /dev/null && echo ok", true, "ok"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				script := fmt.Sprintf("S=%q O=%q K=%q R=%q; %s", e.scratch, e.other, e.secret, e.ro, tt.script)
				r := sh(t, pol, e.cwd, script)
				if tt.ok && (r.code != 0 || !strings.Contains(r.stdout, tt.want)) {
					t.Fatalf("want success with %q, got exit %d, stdout %q, stderr %q", tt.want, r.code, r.stdout, r.stderr)
				}
				if !tt.ok && r.code == 0 {
					t.Fatalf("want denial, got exit 0, stdout %q, stderr %q", r.stdout, r.stderr)
				}
				if !tt.ok && !strings.Contains(r.stderr, "ermission denied") {
					t.Errorf("want permission denied on stderr, got %q", r.stderr)
				}
			})
		}
	})
	// Nothing written where the tool was denied, although root's DAC would
	// have allowed all of it: Landlock did the refusing.
	for _, f := range []string{etcFile, filepath.Join(e.other, "f"), filepath.Join(e.ro, "new")} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s exists after a denied write (err %v)", f, err)
		}
	}
	if b, _ := os.ReadFile(roFile); string(b) != "keep" {
		t.Errorf("read-only file holds %q after a denied truncation", b)
	}
}

// The tool's /proc/self is its own; its parent is the helper (in the
// host's pid namespace) or the call's init, the helper's child (in its
// own); it shares the helper's process group; the policy pipe is closed
// before the tool runs.
func TestProcess(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	cmd, err := Command(context.Background(), e.policy(t), "/bin/sh", []string{"-c", `read -r stat < /proc/self/stat; set -- $stat; echo "pid=$$ stat=$1 ppid=$4 pgrp=$5"
if { true >&3; } 2>/dev/null; then echo fd3=open; else echo fd3=closed; fi; read -r _ || :`})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = e.cwd
	out, tree := runHeld(t, heldCmd(cmd), 2)
	var pid, stat, ppid, pgrp int
	var fd3 string
	if _, err := fmt.Sscanf(out, "pid=%d stat=%d ppid=%d pgrp=%d\nfd3=%s", &pid, &stat, &ppid, &pgrp, &fd3); err != nil {
		t.Fatalf("parsing %q: %v", out, err)
	}
	if pid != stat {
		t.Errorf("pid %d, /proc/self/stat pid %d: want equal", pid, stat)
	}
	checkParent(t, tree, cmd.Process.Pid, pid, ppid, pgrp)
	if fd3 != "closed" {
		t.Errorf("policy fd 3 is %s in the tool", fd3)
	}
}

func TestNetwork(t *testing.T) {
	requireLandlock(t, 4)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
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
	port := l.Addr().(*net.TCPAddr).Port
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed for /dev/tcp:", err)
	}
	connect := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port)

	e := newEnv(t)
	t.Run("connect", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			connect Ports
			ok      bool
		}{
			{"no connect", Ports{}, false},
			{"another port", Ports{Ports: []uint16{uint16(port + 1)}}, false},
			{"connect PORT", Ports{Ports: []uint16{uint16(port)}}, true},
			{"connect any", Ports{Any: true}, true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				pol := e.policyWith(t, func(p *Profile) { p.Connect = tt.connect })
				r := run(t, pol, e.cwd, bash, "-c", connect)
				if tt.ok != (r.code == 0) {
					t.Fatalf("want ok=%v, got exit %d, stdout %q, stderr %q", tt.ok, r.code, r.stdout, r.stderr)
				}
				if !tt.ok && !strings.Contains(r.stderr, "ermission denied") {
					t.Errorf("want permission denied, got %q", r.stderr)
				}
			})
		}
	})

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("bind", func(t *testing.T) {
		for _, tt := range []struct {
			name, allow, mode string
			ok                bool
		}{
			{"no bind", "none", "listen", false},
			{"bind PORT", "port", "listen", true},
			// Multipath TCP would pass Landlock; the helper's seccomp filter
			// refuses it, and Go falls back to TCP (the case above).
			{"no bind, Multipath TCP", "none", "mptcp", false},
			{"bind PORT, Multipath TCP", "port", "mptcp", false},
			{"bind and connect any, Multipath TCP", "any", "mptcp", true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				port := freePort(t)
				pol := e.policyWith(t, func(p *Profile) {
					switch tt.allow {
					case "port":
						p.Bind = Ports{Ports: []uint16{port}}
					case "any": // and connect: no TCP rule at all, so no filter
						p.Bind, p.Connect = Ports{Any: true}, Ports{Any: true}
					}
				})
				r := run(t, pol, e.cwd, self, testToolArg, tt.mode, strconv.Itoa(int(port)))
				if tt.ok != (r.code == 0) {
					t.Fatalf("want ok=%v, got exit %d, stdout %q, stderr %q", tt.ok, r.code, r.stdout, r.stderr)
				}
				want := map[bool]string{true: "protocol not supported", false: "permission denied"}[tt.mode == "mptcp"]
				if !tt.ok && !strings.Contains(r.stdout, want) {
					t.Errorf("want %q, got %q", want, r.stdout)
				}
			})
		}
	})
}

func freePort(t *testing.T) uint16 {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func TestEnvAllowlist(t *testing.T) {
	requireLandlock(t, 3)
	t.Setenv("OLLIE_TEST_SECRET", "hunter2")
	t.Setenv("LC_TEST_PASSED", "yes")
	t.Setenv("LANG", "C.UTF-8")
	e := newEnv(t)
	pol := e.policy(t)
	const script = `echo "secret=[$OLLIE_TEST_SECRET] lc=[$LC_TEST_PASSED] lang=[$LANG] pwd=[$PWD] extra=[$EXTRA]"`

	ctx := context.Background()
	cmd, err := Command(ctx, pol, "/bin/sh", []string{"-c", script})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range cmd.Env {
		if strings.HasPrefix(kv, "OLLIE_TEST_SECRET=") {
			t.Errorf("the secret is in cmd.Env")
		}
	}
	// Appended by the caller: PWD is allowed, EXTRA is dropped by the helper.
	cmd.Env = append(cmd.Env, "PWD="+e.cwd, "EXTRA=leak")
	r := wait(t, cmd, e.cwd)
	want := fmt.Sprintf("secret=[] lc=[yes] lang=[C.UTF-8] pwd=[%s] extra=[]", e.cwd)
	if strings.TrimSpace(r.stdout) != want {
		t.Errorf("sandboxed: got %q (stderr %q), want %q", r.stdout, r.stderr, want)
	}

	// The bypass escapes Landlock and keeps the allowlist.
	cmd, err = Unsandboxed(ctx, pol, "/bin/sh", []string{"-c", script + `; echo x > "$1"`, "sh", filepath.Join(e.other, "f")})
	if err != nil {
		t.Fatal(err)
	}
	r = wait(t, cmd, e.cwd)
	if r.code != 0 || !strings.Contains(r.stdout, "secret=[] lc=[yes]") {
		t.Errorf("unsandboxed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.other, "f")); err != nil {
		t.Errorf("unsandboxed tool could not write outside the profile: %v", err)
	}
	if a := cmd.SysProcAttr; a == nil || !a.Setpgid || a.Pdeathsig != syscall.SIGKILL {
		t.Errorf("SysProcAttr = %+v, want Setpgid and Pdeathsig SIGKILL", a)
	}
}

// The helper refuses to run anything without a policy, and reports an exec
// that Landlock denies.
func TestHelperFailures(t *testing.T) {
	requireLandlock(t, 3)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := wait(t, exec.Command(self, helperArg, "--", "/bin/echo", "ran"), "")
	if r.code != 126 || r.stdout != "" || !strings.Contains(r.stderr, "no policy on fd 3") {
		t.Errorf("helper without policy: exit %d, stdout %q, stderr %q; want 126 and no policy", r.code, r.stdout, r.stderr)
	}

	// A script whose interpreter lies outside the exec paths.
	e := newEnv(t)
	shBin, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	interp := filepath.Join(e.other, "sh")
	script := filepath.Join(e.cwd, "tool")
	if err := os.WriteFile(interp, shBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("#!"+interp+"\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = run(t, e.policy(t), e.cwd, script)
	if r.code != 126 || !strings.Contains(r.stderr, "sandbox: exec "+script) || !strings.Contains(r.stderr, "interpreter") {
		t.Errorf("denied interpreter: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestCommandRefuses(t *testing.T) {
	ctx := context.Background()
	if _, err := Command(ctx, nil, "/bin/true", nil); err == nil {
		t.Error("Command with a nil policy succeeded")
	}
	if _, err := Command(ctx, &Policy{}, "true", nil); err == nil {
		t.Error("Command with a relative tool path succeeded")
	}
	if _, err := Unsandboxed(ctx, nil, "/bin/true", nil); err == nil {
		t.Error("Unsandboxed with a nil policy succeeded")
	}
}

// This kernel: the tests that prove the sandbox need real Landlock.
func TestStatus(t *testing.T) {
	k := Status()
	t.Logf("kernel: %s", k)
	requireLandlock(t, 4)
	if err := (&Policy{}).Check(); err != nil {
		t.Errorf("a TCP-restricting policy is refused on %s: %v", k, err)
	}
}

// The seccomp program assembles for every GOARCH it knows, with each
// socket(2) number routed to the protocol check.
func TestMPTCPFilter(t *testing.T) {
	for arch, arches := range seccompArches {
		prog, err := mptcpFilter(arches)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		n := 0
		for _, a := range arches {
			n += 3 + len(a.socket) + len(a.socketcall) // arch check, load nr, the jumps, allow
		}
		if want := 2 + n + 5; len(prog) != want {
			t.Errorf("%s: %d instructions, want %d", arch, len(prog), want)
		}
	}
}

// checkParent checks what a tool said of itself (pid, ppid, pgrp, as
// /proc/self/stat shows them) against tree, the helper's descendants seen
// from the host (pid to parent) while it ran: in the host's pid namespace
// the helper is its parent and group leader; in the call's own it is pid
// 1's child, its group leader outside (0), and pid 1 is the helper's one
// child.
func checkParent(t *testing.T, tree map[int]int, helper, pid, ppid, pgrp int) {
	t.Helper()
	if !HostProtection().OwnProc {
		if ppid != helper || pgrp != helper || pid == helper {
			t.Errorf("tool pid %d, ppid %d, pgrp %d; helper %d: want the helper as parent and group", pid, ppid, pgrp, helper)
		}
		return
	}
	if ppid != 1 || pgrp != 0 || pid <= 1 {
		t.Errorf("tool pid %d, ppid %d, pgrp %d: want pid 1 as its parent, its group outside its namespace", pid, ppid, pgrp)
	}
	var inits []int
	for p, parent := range tree {
		if parent == helper {
			inits = append(inits, p)
		}
	}
	if len(inits) != 1 {
		t.Fatalf("the helper %d had children %v (of %v), want one: the call's init", helper, inits, tree)
	}
}

// held is what runHeld needs of an *exec.Cmd or a *Call.
type held struct {
	setIO       func(stdin io.Reader, stdout, stderr io.Writer)
	start, wait func() error
	helper      func() int
}

func heldCmd(cmd *exec.Cmd) held {
	return held{
		setIO: func(in io.Reader, out, errw io.Writer) { cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw },
		start: func() error {
			err := cmd.Start()
			for _, f := range cmd.ExtraFiles {
				f.Close()
			}
			return err
		},
		wait:   cmd.Wait,
		helper: func() int { return cmd.Process.Pid },
	}
}

// runHeld starts h, whose tool prints lines lines and then waits to read
// a line, and returns what it printed and the helper's descendants as the
// host sees them then (pid to parent); then it lets the tool end and
// waits for it.
func runHeld(t *testing.T, h held, lines int) (string, map[int]int) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	var stderr bytes.Buffer
	h.setIO(inR, outW, &stderr)
	err = h.start()
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(outR)
	var out strings.Builder
	for range lines {
		l, err := br.ReadString('\n')
		out.WriteString(l)
		if err != nil {
			inW.Close()
			h.wait()
			t.Fatalf("the tool said %q, then %v: %s", out.String(), err, stderr.String())
		}
	}
	tree := descendants(h.helper())
	inW.Close()
	if err := h.wait(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	return out.String(), tree
}

// descendants maps each descendant of root, as the host's /proc shows
// them, to its parent.
func descendants(root int) map[int]int { return lab.Descendants(root) }
