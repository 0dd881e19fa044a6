package olliesrv

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// binaries builds olliesrv the way the Makefile does (static) and links
// it as ollie, once per test run.
func binaries(t testing.TB) (olliesrv, ollie string) {
	t.Helper()
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "olliebin")
		if buildErr != nil {
			return
		}
		dir := builtDir
		nstest.AtExit(func() { os.RemoveAll(dir) })
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", filepath.Join(builtDir, "olliesrv"), "../../cmd/olliesrv")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			builtDir = string(out)
			return
		}
		buildErr = os.Symlink("olliesrv", filepath.Join(builtDir, "ollie"))
	})
	if buildErr != nil {
		t.Fatalf("build: %v\n%s", buildErr, builtDir)
	}
	return filepath.Join(builtDir, "olliesrv"), filepath.Join(builtDir, "ollie")
}

// startBinary starts the real olliesrv in namespace dir and waits for its
// socket.
func startBinary(t testing.TB, dir string, env ...string) (*exec.Cmd, *logBuffer) {
	t.Helper()
	srv, _ := binaries(t)
	cmd := exec.Command(srv)
	cmd.Env = append(append(os.Environ(), "NAMESPACE="+dir, "XDG_STATE_HOME="+t.TempDir()), env...)
	var log logBuffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// Dial rather than stat: a stale socket left by a killed server
	// exists before the new one listens.
	await.Until(t, 10*time.Second, "olliesrv listening on its socket", func() bool {
		c, err := net.Dial("unix", filepath.Join(dir, "ollie"))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, log.String)
	return cmd, &log
}

func runBinary(t testing.TB, dir, stdin string, args ...string) (string, int) {
	t.Helper()
	_, ollie := binaries(t)
	cmd := exec.Command(ollie, args...)
	cmd.Env = append(os.Environ(), "NAMESPACE="+dir)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestBinaryLifecycle runs the built binary: busybox dispatch by name, a
// refused second server, and a clean SIGTERM that interrupts a blocked
// reader and removes the socket.
func TestBinaryLifecycle(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	srv, ollie := binaries(t)
	cmd, log := startBinary(t, dir)

	out, code := runBinary(t, dir, "", "ls", "/")
	if code != 0 || !strings.Contains(out, "session/") || !strings.Contains(out, "help") {
		t.Fatalf("ollie ls / = %d %q", code, out)
	}
	out, code = runBinary(t, dir, "name=e2e", "rdwr", "session/new")
	if code != 0 || out != "e2e\n" {
		t.Fatalf("ollie rdwr session/new = %d %q", code, out)
	}

	second := exec.Command(srv)
	second.Env = append(os.Environ(), "NAMESPACE="+dir, "XDG_STATE_HOME="+t.TempDir())
	msg, err := second.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(msg), "already serving") {
		t.Fatalf("second olliesrv: %v %q", err, msg)
	}

	// A reader blocked on event when the server stops gets an error, not a hang.
	reader := exec.Command(ollie, "read", "event")
	reader.Env = append(os.Environ(), "NAMESPACE="+dir)
	var rout nstest.SyncBuffer
	reader.Stdout, reader.Stderr = &rout, &rout
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	// The reader is attached once it shows an event: setting the bypass
	// policy to what it is publishes one. Its next read then blocks.
	policy, _ := runBinary(t, dir, "", "read", "bypass/policy")
	await.Until(t, 10*time.Second, "the reader showing an event", func() bool {
		runBinary(t, dir, policy, "write", "bypass/policy")
		return strings.Contains(rout.String(), "bypass.policy")
	}, rout.String)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("olliesrv exit after SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("olliesrv did not exit after SIGTERM\n%s", log.String())
	}
	rdone := make(chan error, 1)
	go func() { rdone <- reader.Wait() }()
	select {
	case <-rdone:
	case <-time.After(10 * time.Second):
		reader.Process.Kill()
		t.Fatal("blocked reader did not return when the server stopped")
	}
	t.Logf("blocked reader said: %q", rout.String())
	if strings.Contains(rout.String(), "no olliesrv") {
		t.Fatalf("the reader never attached, so nothing was blocked: %q", rout.String())
	}
	if _, err := os.Lstat(filepath.Join(dir, "ollie")); !os.IsNotExist(err) {
		t.Errorf("socket left behind after SIGTERM: %v", err)
	}
	if !strings.Contains(log.String(), "shutting down") {
		t.Errorf("log does not say it shut down:\n%s", log.String())
	}
	out, code = runBinary(t, dir, "", "ls", "/")
	if code != 3 {
		t.Errorf("ollie with no server: exit %d %q, want 3", code, out)
	}
}

// TestBinarySessionTools checks that a session gets its own toolsrv child,
// reports how tools are sandboxed, and loses the child when killed.
func TestBinarySessionTools(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo."}`), 0644)
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\ncat\n"), 0755)
	os.WriteFile(filepath.Join(tools, "broken.meta"), []byte(`{"description": "Broken.", "colour": "red"}`), 0644)
	data, _ := filepath.Abs("../../data")
	srv, _ := startBinary(t, dir, "OLLIE_TOOLS_PATH="+tools, "OLLIE_DATA="+data)

	if out, code := runBinary(t, dir, "name=t cwd=/tmp", "rdwr", "session/new"); code != 0 {
		t.Fatalf("session/new: %d %q", code, out)
	}
	out, code := runBinary(t, dir, "", "read", "session/t/tools")
	if code != 0 || out != "echo\tEcho.\n" {
		t.Fatalf("session tools = %d %q", code, out)
	}
	if out, _ := runBinary(t, dir, "", "read", "tools"); out != "echo\tEcho.\n" {
		t.Errorf("host tools = %q", out)
	}
	if out, _ := runBinary(t, dir, "", "read", "toolerrors"); !strings.Contains(out, "broken.meta") || !strings.Contains(out, "colour") {
		t.Errorf("toolerrors = %q", out)
	}
	env, _ := runBinary(t, dir, "", "read", "session/t/env")
	// How the host keeps the protected paths ends the line (docs/security.md).
	if !strings.Contains(env, "OLLIE_SANDBOX=sandboxed (Landlock ABI ") || !strings.Contains(env, "profile "+data+"/sandbox/default.yaml; protected paths ") {
		t.Errorf("env does not say how tools are sandboxed:\n%s", env)
	}
	children := func() []string {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(srv.Process.Pid), "-f", "__ollie_toolsrv").Output()
		return strings.Fields(string(out))
	}
	before := children()
	if len(before) == 0 {
		t.Fatal("no toolsrv child is running")
	}
	if out, code := runBinary(t, dir, "kill", "rdwr", "session/t/ctl"); code != 0 {
		t.Fatalf("kill: %d %q", code, out)
	}
	for _, pid := range before {
		if _, err := os.Stat("/proc/" + pid); err == nil {
			stat, _ := os.ReadFile("/proc/" + pid + "/stat")
			if !strings.Contains(string(stat), ") Z ") {
				t.Errorf("toolsrv %s still running after session kill", pid)
			}
		}
	}
}

// TestSandboxedToolIsNotAdmin checks that a tool, which runs as the same OS
// user as olliesrv, cannot use the namespace socket as the admin: every
// sandboxed process has no_new_privs, and such peers are not trusted.
func TestSandboxedToolIsNotAdmin(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	srv, ollie := binaries(t)
	startBinary(t, dir)
	sock := filepath.Join(dir, "ollie")
	os.Chmod(dir, 0755) // the tool may not read it; Landlock does not stop connect before ABI 9

	tools := t.TempDir()
	os.Chmod(filepath.Dir(srv), 0755)
	os.WriteFile(filepath.Join(tools, "peek.meta"), []byte(`{"description": "Use the namespace as the admin."}`), 0644)
	// The ollie beside olliesrv: the default profile lets tools run it.
	script := "#!/bin/sh\necho help | " + ollie + " -a " + sock + " rdwr ctl 2>&1\n"
	os.WriteFile(filepath.Join(tools, "peek"), []byte(script), 0755)

	// The same command outside the sandbox is the admin.
	out, err := exec.Command("/bin/sh", filepath.Join(tools, "peek")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "invalidate") {
		t.Fatalf("outside the sandbox: %v %q", err, out)
	}
	data, _ := filepath.Abs("../../data")
	cmd := exec.Command(srv, "tools", "run", "peek", "{}")
	cmd.Env = append(os.Environ(), "OLLIE_TOOLS_PATH="+tools, "OLLIE_DATA="+data)
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "ctl: permission denied") || strings.Contains(string(out), "invalidate") {
		t.Fatalf("a sandboxed tool used the namespace as the admin:\n%s", out)
	}
}

// TestCrashDuringTool kills olliesrv with SIGKILL while an agent's tool is
// running, starts it again on the same state, and checks that nothing was
// lost or repeated: the session and agent are back, the call was settled
// once as interrupted and not run again, and the agent goes on working
// with the real openai-go client against the scripted model server.
func TestCrashDuringTool(t *testing.T) {
	llm := fakellm.Start(t)
	work := t.TempDir()
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "slow.meta"), []byte(`{"description": "Slow.", "timeout": 600}`), 0644)
	os.WriteFile(filepath.Join(tools, "slow"), []byte("#!/bin/sh\necho run >> "+work+"/runs\nsleep 300\n"), 0755)
	data, _ := filepath.Abs("../../data")
	state := t.TempDir()
	env := []string{"OLLIE_TOOLS_PATH=" + tools, "OLLIE_DATA=" + data, "XDG_STATE_HOME=" + state,
		"OPENAI_BASE_URL=" + llm.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"}
	dir := nstest.ShortTempDir(t)
	srv, log := startBinary(t, dir, env...)

	llm.Push(fakellm.ToolCall("slow", `{}`))
	for _, step := range [][]string{
		{"name=crash cwd=" + work + " resume=manual", "rdwr", "session/new"},
		{"name=a backend=openai", "rdwr", "session/crash/agent/new"},
		{"wait for it", "write", "session/crash/agent/a/prompt"},
	} {
		if out, code := runBinary(t, dir, step[0], step[1:]...); code != 0 {
			t.Fatalf("%v: %d %q\n%s", step, code, out, log.String())
		}
	}
	runs := func() int {
		b, _ := os.ReadFile(filepath.Join(work, "runs"))
		return strings.Count(string(b), "run\n")
	}
	agentLog := func() string { out, _ := runBinary(t, dir, "", "read", "session/crash/agent/a/log"); return out }
	await.Until(t, 20*time.Second, "the tool starting", func() bool { return runs() > 0 },
		func() string { return "log:\n" + agentLog() + "\nolliesrv:\n" + log.String() })
	srv.Process.Kill() // SIGKILL: no chance to clean up
	srv.Wait()

	srv2, log2 := startBinary(t, dir, env...)
	defer srv2.Process.Kill()
	out, code := runBinary(t, dir, "", "read", "session/crash/agent/a/log")
	if code != 0 || !strings.Contains(out, "not run again") {
		t.Fatalf("restored log (%d):\n%s\nolliesrv:\n%s", code, out, log2.String())
	}
	chat, _ := runBinary(t, dir, "", "read", "session/crash/agent/a/state")
	if chat != "idle\n" {
		t.Errorf("restored state %q", chat)
	}
	files, _ := filepath.Glob(filepath.Join(state, "ollie", "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("session files: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if n := strings.Count(string(b), `"kind":"tool.settle"`); n != 1 {
		t.Errorf("%d settlements of the interrupted call, want exactly 1:\n%s", n, b)
	}

	// The agent goes on: the model sees a well-formed conversation.
	llm.Push(fakellm.Text("still here"))
	if out, code := runBinary(t, dir, "and now?", "write", "session/crash/agent/a/prompt"); code != 0 {
		t.Fatalf("prompt after restart: %d %q", code, out)
	}
	await.Until(t, 20*time.Second, "an answer after the restart", func() bool { return strings.Contains(agentLog(), "still here") },
		func() string { return "log:\n" + agentLog() + "\nolliesrv:\n" + log2.String() })
	reqs := llm.ChatRequests()
	last := reqs[len(reqs)-1]
	if len(last.Messages) < 4 {
		t.Errorf("the model got %d messages after the restart", len(last.Messages))
	}
	for _, e := range conversationErrors(last) {
		t.Errorf("the request after the restart: %s", e)
	}
	// Counted after that turn, not after a while: a call the restore ran
	// again stays open in the history until its run ends, and the turn's
	// request has every call answered; a run marks the file first thing.
	if n := runs(); n != 1 {
		t.Errorf("the tool ran %d times; a call interrupted by a crash must not run again", n)
	}
}

// TestBinaryToolsRunAsksTheGate: "olliesrv tools run" of an elevated tool
// asks the running daemon's approval gate, as an agent's call does.
func TestBinaryToolsRunAsksTheGate(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "lift.meta"), []byte(`{"description": "Lift.", "elevated": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "lift"), []byte("#!/bin/sh\necho lifted\n"), 0755)
	data, _ := filepath.Abs("../../data")
	startBinary(t, dir, "OLLIE_TOOLS_PATH="+tools, "OLLIE_DATA="+data)
	if out, code := runBinary(t, dir, "nobroker=deny", "write", "bypass/policy"); code != 0 {
		t.Fatalf("bypass/policy: %d %q", code, out)
	}
	srv, _ := binaries(t)
	cmd := exec.Command(srv, "tools", "run", "lift", "{}")
	cmd.Env = append(os.Environ(), "NAMESPACE="+dir, "OLLIE_TOOLS_PATH="+tools, "OLLIE_DATA="+data)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "no desktop broker is connected to this host") || strings.Contains(string(out), "lifted") {
		t.Errorf("tools run of an elevated tool with the gate denying: %s", out)
	}
}

// logBuffer is a daemon's stderr, which a test may read while the daemon
// still writes it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
