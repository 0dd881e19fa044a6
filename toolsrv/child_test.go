package toolsrv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/internal/await"
	"ollie/toolsrv/tool"
)

// testParentEnv makes the test binary a parent that spawns a toolsrv,
// reports the child's pid and socket, and waits to be killed.
const testParentEnv = "OLLIE_TEST_TOOLSRV_PARENT"

func testParent() {
	var cfg SpawnConfig
	json.Unmarshal([]byte(os.Getenv(testParentEnv)), &cfg)
	c, err := Spawn(context.Background(), cfg)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(c.current().cmd.Process.Pid, c.current().socket)
	select {}
}

func spawnChild(t testing.TB, tools map[string][2]string) (*Child, *Runner) {
	t.Helper()
	r, _ := runner(t, tools)
	os.Setenv("OLLIE_DATA", "../data") // the child finds data/sandbox there
	t.Cleanup(func() { os.Unsetenv("OLLIE_DATA") })
	c, err := Spawn(context.Background(), SpawnConfig{Cwd: r.Cwd, SessionID: "s1", ToolsPath: r.ToolsPath, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, r
}

func TestChild(t *testing.T) {
	c, r := spawnChild(t, map[string][2]string{
		"echo":   {echoMeta, "#!/bin/sh\ncat\n"},
		"ticker": {`{"description": "Tick."}`, "#!/bin/sh\nwhile true; do echo tick; sleep 0.05; done\n"},
	})
	ctx := context.Background()

	res, err := c.Call(ctx, "echo", json.RawMessage(`{"text": "over 9P"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed || !strings.Contains(res.Output, "over 9P") || res.Sandbox != "default" {
		t.Fatalf("call: %+v", res)
	}
	res, err = c.Call(ctx, "echo", json.RawMessage(`{}`))
	if err != nil || !res.Failed || !strings.Contains(res.Output, "text") {
		t.Fatalf("invalid call: %+v %v", res, err)
	}
	tools, err := c.ReadFile(ctx, "tools")
	if err != nil || string(tools) != "echo\tEcho the arguments.\nticker\tTick.\n" {
		t.Fatalf("tools = %q %v", tools, err)
	}
	var decls []tool.FunctionDecl
	b, _ := c.ReadFile(ctx, "schema")
	if err := json.Unmarshal(b, &decls); err != nil || len(decls) != 2 || !strings.Contains(string(decls[0].Parameters), `"background"`) {
		t.Fatalf("schema: %v %s", err, b)
	}

	// tool_unload changes the revision; revwait sees it.
	rev, _ := c.ReadFile(ctx, "revision")
	waited := make(chan string, 1)
	go func() {
		b, _ := c.ReadFile(ctx, "revwait")
		waited <- string(b)
	}()
	// Nothing tells when the read has reached the child: a change made
	// before it did is not the one it waits for. So unload, and if the
	// wait goes on, load and unload again, each a new revision, ending
	// unloaded.
	changes := 0
	for gap, deadline := 50*time.Millisecond, time.After(10*time.Second); ; gap = min(2*gap, time.Second) {
		if changes > 0 {
			if _, err := c.RdWr(ctx, "ctl", []byte("load ticker")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.RdWr(ctx, "ctl", []byte("unload ticker")); err != nil {
			t.Fatal(err)
		}
		changes++
		select {
		case got := <-waited:
			if got == string(rev) {
				t.Errorf("revwait returned the old revision %q", got)
			}
		case <-time.After(gap):
			continue
		case <-deadline:
			t.Fatalf("revwait did not return after %d unloads", changes)
		}
		break
	}
	if _, err := c.RdWr(ctx, "ctl", []byte("load ticker")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RdWr(ctx, "ctl", []byte("fly")); err == nil || !strings.Contains(err.Error(), "valid: help, load NAME") {
		t.Errorf("bad ctl: %v", err)
	}

	// A background process, through the namespace.
	id, err := c.RdWr(ctx, "proc/new.bg", []byte(`{"tool": "ticker", "args": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(id))
	if status, _ := c.ReadFile(ctx, "proc/"+pid+"/status"); string(status) != "running\n" {
		t.Errorf("status = %q", status)
	}
	// The first read of out blocks until the process has written.
	fsys, done, err := c.attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Open("proc/"+pid+"/out", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 100)
	if n, err := f.Read(first); err != nil || !strings.HasPrefix(string(first[:n]), "tick\n") {
		t.Fatalf("first read of out: %q %v", first[:n], err)
	}
	done(false)
	if _, err := c.RdWr(ctx, "proc/"+pid+"/ctl", []byte("kill")); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReadFile(ctx, "proc/"+pid+"/out") // ends: the process was killed
	if err != nil || !strings.Contains(string(out), "tick\n") || !strings.HasSuffix(string(out), "[ticker 1: killed by kill]\n") {
		t.Fatalf("out = %q %v", out, err)
	}
	if _, err := c.RdWr(ctx, "proc/"+pid+"/ctl", []byte("dismiss")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFile(ctx, "proc/"+pid+"/status"); err == nil {
		t.Error("dismissed process still there")
	}

	// A cancelled call kills the tool. It ends with its context's error,
	// not with a result at the tool's own timeout (DefaultTimeout).
	_ = r
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Call(cctx, "ticker", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a cancelled call returned %v, want its context's deadline", err)
	}
}

// TestChildSecret checks that only the holder of the spawn secret gets in.
func TestChildSecret(t *testing.T) {
	c, _ := spawnChild(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
	fi, err := os.Stat(filepath.Dir(c.current().socket))
	if err != nil || fi.Mode().Perm() != 0700 {
		t.Fatalf("socket dir mode %v %v", fi.Mode().Perm(), err)
	}
	for _, aname := range []string{"", "guess", c.current().secret[:len(c.current().secret)-1]} {
		nc, err := net.Dial("unix", c.current().socket)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := client.NewConn(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Attach(nil, "agent", aname); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Errorf("attach with aname %q: %v", aname, err)
		}
		conn.Close()
	}
	// The secret is in neither argv nor the environment of the child.
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", c.current().cmd.Process.Pid, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), c.current().secret) {
			t.Errorf("the secret is in the child's %s", f)
		}
	}
}

// TestChildDiesWithParent kills the parent outright and checks that the
// toolsrv and its background process go too.
func TestChildDiesWithParent(t *testing.T) {
	r, _ := runner(t, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
	cfg, _ := json.Marshal(SpawnConfig{Cwd: r.Cwd, ToolsPath: r.ToolsPath})
	parent := exec.Command(os.Args[0])
	parent.Env = append(os.Environ(), testParentEnv+"="+string(cfg), "OLLIE_DATA=../data")
	stdout, _ := parent.StdoutPipe()
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var childPid int
	var sock string
	if _, err := fmt.Sscan(line, &childPid, &sock); err != nil {
		t.Fatalf("parent said %q", line)
	}
	if err := syscall.Kill(childPid, 0); err != nil {
		t.Fatalf("child %d not running: %v", childPid, err)
	}
	parent.Process.Kill()
	parent.Wait()
	await.Until(t, 10*time.Second, fmt.Sprintf("toolsrv %d ending with its parent", childPid), func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(childPid) + "/stat")
		return err != nil || strings.Contains(string(stat), ") Z ")
	})
	// Its socket's private directory goes with it: a daemon killed
	// outright leaves no directory per session behind in /tmp.
	await.Until(t, 5*time.Second, filepath.Dir(sock)+" going after the toolsrv's parent was killed", func() bool {
		_, err := os.Stat(filepath.Dir(sock))
		return os.IsNotExist(err)
	})
}

// Calls reuse the connections earlier ones finished with, and a call whose
// context ends takes only its own connection down: the tool is killed,
// and the call beside it finishes on its own.
func TestChildConnections(t *testing.T) {
	c, r := spawnChild(t, map[string][2]string{
		"echo": {echoMeta, "#!/bin/sh\ncat\n"},
		"hang": {`{"description": "Hang until killed."}`, "#!/bin/sh\n: > started\nexec sleep 300\n"},
		"slow": {`{"description": "Answer after a moment."}`, "#!/bin/sh\nsleep 0.3\necho slow done\n"},
	})
	ctx := context.Background()
	for range 5 {
		if res, err := c.Call(ctx, "echo", json.RawMessage(`{"text": "again"}`)); err != nil || res.Failed {
			t.Fatalf("call: %+v %v", res, err)
		}
	}
	c.mu.Lock()
	idle := len(c.idle)
	c.mu.Unlock()
	if idle != 1 {
		t.Fatalf("after five calls one after another, %d idle connections; want the one they all used", idle)
	}

	hctx, cancel := context.WithCancel(ctx)
	hung := make(chan error, 1)
	go func() {
		_, err := c.Call(hctx, "hang", nil)
		hung <- err
	}()
	slow := make(chan *tool.Result, 1)
	go func() {
		res, err := c.Call(ctx, "slow", nil)
		if err != nil {
			t.Errorf("the call beside the cancelled one: %v", err)
		}
		slow <- res
	}()
	// The hanging call is running once its tool has left its mark.
	await.Until(t, 10*time.Second, "the hanging tool starting", func() bool {
		_, err := os.Stat(filepath.Join(r.Cwd, "started"))
		return err == nil
	})
	cancel()
	if err := <-hung; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	if res := <-slow; res == nil || res.Failed || !strings.Contains(res.Output, "slow done") {
		t.Fatalf("the call beside the cancelled one: %+v", res)
	}
	c.mu.Lock()
	idle = len(c.idle)
	c.mu.Unlock()
	if idle < 1 || idle > 2 {
		t.Fatalf("%d idle connections after a cancelled and a finished call", idle)
	}
}

// The schema, rendered once per revision, follows the tool set: unloading
// a tool takes it out of what the model is shown, loading it puts it back.
func TestChildSchemaFollowsTools(t *testing.T) {
	c, _ := spawnChild(t, map[string][2]string{
		"echo": {echoMeta, "#!/bin/sh\ncat\n"},
		"two":  {`{"description": "Two."}`, "#!/bin/sh\necho two\n"},
	})
	ctx := context.Background()
	names := func() string {
		decls, err := c.Decls(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, d := range decls {
			n = append(n, d.Name)
		}
		return strings.Join(n, " ")
	}
	if got := names(); got != "echo two" {
		t.Fatalf("at first: %q", got)
	}
	if _, err := c.RdWr(ctx, "ctl", []byte("unload two")); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "echo" {
		t.Errorf("after unload two: %q", got)
	}
	if _, err := c.RdWr(ctx, "ctl", []byte("load two")); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "echo two" {
		t.Errorf("after load two: %q", got)
	}
}
