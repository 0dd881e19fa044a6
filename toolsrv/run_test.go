package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/broker"
	"ollie/internal/await"
	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
	"ollie/toolsrv/tool"
)

// The test binary plays the sandbox helper and the toolsrv child, as
// olliesrv does.
func TestMain(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	if IsChild() {
		ChildMain()
	}
	if os.Getenv(testParentEnv) != "" {
		testParent()
	}
	if os.Getenv(sudoHelperEnv) != "" {
		sudoHelper()
	}
	os.Exit(m.Run())
}

// runner builds a Runner over a tools dir holding the given tools: name →
// [meta, script]; an empty script leaves the meta's cmd to be run.
func runner(t testing.TB, tools map[string][2]string) (*Runner, string) {
	t.Helper()
	dir := t.TempDir()
	for name, tool := range tools {
		if err := os.WriteFile(filepath.Join(dir, name+".meta"), []byte(tool[0]), 0644); err != nil {
			t.Fatal(err)
		}
		if tool[1] == "" {
			continue // the meta's cmd is the executable
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tool[1]), 0755); err != nil {
			t.Fatal(err)
		}
	}
	reg := Load([]string{dir}, meta.LocalHost{})
	if errs := reg.Errors(); len(errs) > 0 {
		t.Fatalf("load: %v", errs)
	}
	s := NewSession(reg)
	for name := range tools {
		if err := s.Load(name); err != nil {
			t.Fatal(err)
		}
	}
	cwd := t.TempDir()
	// Sandboxed calls go through pre-started helpers, as in a session's
	// toolsrv.
	helpers := sandbox.NewPool(2)
	t.Cleanup(helpers.Close)
	r := &Runner{
		Helpers:   helpers,
		Tools:     s,
		Cwd:       cwd,
		Profiles:  sandbox.Profiles{Dirs: []string{"../data/sandbox"}},
		ToolsPath: []string{dir},
		SpillDir:  t.TempDir(),
	}
	t.Cleanup(r.Close)
	return r, cwd
}

const echoMeta = `{"description": "Echo the arguments.", "args": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}}`

func TestRunContract(t *testing.T) {
	r, cwd := runner(t, map[string][2]string{
		"echo":   {echoMeta, "#!/bin/sh\ncat\necho\necho \"pwd=$PWD tools=$OLLIE_TOOLS_PATH secret=$OLLIE_TEST_SECRET\"\n"},
		"fail":   {`{"description": "Fail."}`, "#!/bin/sh\necho partial\necho 'bad thing' >&2\nexit 3\n"},
		"blocks": {`{"description": "Structured."}`, "#!/bin/sh\necho '{\"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}'\n"},
	})
	t.Setenv("OLLIE_TEST_SECRET", "hunter2")
	ctx := context.Background()

	res := r.Run(ctx, "echo", json.RawMessage(`{"text": "hello", "timeout": 30}`))
	if res.Failed {
		t.Fatalf("echo failed: %s", res.Output)
	}
	first, rest, _ := strings.Cut(res.Output, "\n")
	if first != `{"text":"hello"}` {
		t.Errorf("the tool got %q on stdin, want its own arguments without dispatch flags", first)
	}
	if !strings.Contains(rest, "pwd="+cwd+" ") || !strings.Contains(rest, "tools=/") {
		t.Errorf("environment not set: %q", rest)
	}
	if strings.Contains(rest, "hunter2") {
		t.Errorf("a variable outside the allowlist reached the tool: %q", rest)
	}
	if res.Sandbox != "default" || res.ExitCode != 0 {
		t.Errorf("sandbox %q exit %d", res.Sandbox, res.ExitCode)
	}

	res = r.Run(ctx, "echo", json.RawMessage(`{"txt": "hello"}`))
	if !res.Failed || !strings.Contains(res.Output, `"text"`) || res.ExitCode != -1 {
		t.Errorf("schema violation: %+v", res)
	}

	res = r.Run(ctx, "fail", json.RawMessage(`{}`))
	if !res.Failed || res.ExitCode != 3 || !strings.Contains(res.Output, "exit status 3") ||
		!strings.Contains(res.Output, "partial") || !strings.Contains(res.Output, "bad thing") {
		t.Errorf("failing tool: %+v", res)
	}

	res = r.Run(ctx, "blocks", nil)
	if res.Failed || string(res.Content) != `[{"type": "text", "text": "hi"}]` {
		t.Errorf("structured output: %+v", res)
	}

	res = r.Run(ctx, "nosuch", nil)
	if !res.Failed || !strings.Contains(res.Output, "nosuch") {
		t.Errorf("unknown tool: %+v", res)
	}
}

// TestRunTimeoutKillsGroup checks that a timeout kills the tool's
// grandchildren too.
func TestRunTimeoutKillsGroup(t *testing.T) {
	// The grandchild is found by its arguments, not by the pid the tool
	// sees: in the call's own pid namespace that is not the host's.
	mark := fmt.Sprintf("300.%06d", rand.IntN(1000000))
	r, _ := runner(t, map[string][2]string{
		"hang": {`{"description": "Hang."}`, "#!/bin/sh\nsleep " + mark + " &\nsleep 300\n"},
	})
	start := time.Now()
	done := make(chan *tool.Result, 1)
	// 5 s, so that a loaded machine still shows the grandchild before
	// the timeout ends it (at 1 s a full make test once did not).
	go func() { done <- r.Run(context.Background(), "hang", json.RawMessage(`{"timeout": 5}`)) }()
	pid := 0
	await.Until(t, 30*time.Second, fmt.Sprintf("the grandchild (sleep %s) showing", mark), func() bool {
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range cmdlines {
			if b, _ := os.ReadFile(f); string(b) == "sleep\x00"+mark+"\x00" {
				pid, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/cmdline"))
			}
		}
		return pid != 0
	})
	res := <-done
	if !res.Failed || !strings.Contains(res.Output, "timed out after 5s") {
		t.Fatalf("hang: %+v", res)
	}
	// The bound is the point, and generous: a call its grandchild held
	// open (it keeps stdout) would end with the grandchild, after 300 s.
	if el := time.Since(start); el > 60*time.Second {
		t.Errorf("timeout took %s: the grandchild held the call open", el)
	}
	// A killed child of a killed shell is reparented and reaped by init,
	// a moment later: until then it is a zombie.
	await.Until(t, 5*time.Second, fmt.Sprintf("grandchild %d ending with the timeout", pid), func() bool {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		state, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return strings.Contains(string(state), ") Z ")
	})
}

func TestRunOutputCap(t *testing.T) {
	r, _ := runner(t, map[string][2]string{
		"big": {`{"description": "Big."}`, "#!/bin/sh\nhead -c 300000 /dev/zero | tr '\\0' x\n"},
	})
	r.OutputCap = 1000
	res := r.Run(context.Background(), "big", nil)
	if res.Failed {
		t.Fatal(res.Output)
	}
	if res.Cut != 299000 || !strings.Contains(res.Output, "[output cut: 299000 of 300000 bytes not shown; the whole output is in "+res.Spill+"]") {
		t.Fatalf("cut %d, output tail %q", res.Cut, res.Output[len(res.Output)-200:])
	}
	whole, err := os.ReadFile(res.Spill)
	if err != nil || len(whole) != 300000 || strings.Trim(string(whole), "x") != "" {
		t.Fatalf("spill file: %d bytes, %v", len(whole), err)
	}
}

func TestRunSandboxAndApproval(t *testing.T) {
	outside := t.TempDir()
	r, cwd := runner(t, map[string][2]string{
		"write": {`{"description": "Write a file.", "args": {"type": "object", "properties": {"path": {"type": "string"}}}}`,
			"#!/bin/sh\np=$(sed 's/.*\"path\": *\"\\([^\"]*\\)\".*/\\1/')\necho data > \"$p\" && echo wrote \"$p\"\n"},
		"priv": {`{"description": "Needs elevation.", "elevated": true}`, "#!/bin/sh\ntouch \"$PWD/ran\"\n"},
	})
	ctx := context.Background()
	res := r.Run(ctx, "write", json.RawMessage(`{"path": "`+cwd+`/ok"}`))
	if res.Failed {
		t.Fatalf("write inside cwd: %s", res.Output)
	}
	res = r.Run(ctx, "write", json.RawMessage(`{"path": "`+outside+`/escape"}`))
	if !res.Failed {
		t.Fatalf("write outside the profile succeeded: %s", res.Output)
	}
	if _, err := os.Stat(filepath.Join(outside, "escape")); err == nil {
		t.Fatal("the file outside the profile was written")
	}
	res = r.Run(ctx, "write", json.RawMessage(`{"path": "`+outside+`/escape", "bypass": true}`))
	if !res.Failed || !strings.Contains(res.Output, "no approval broker") {
		t.Fatalf("bypass without a broker: %+v", res)
	}
	res = r.Run(ctx, "priv", nil)
	if !res.Failed || !strings.Contains(res.Output, "priv needs approval to run outside its sandbox") {
		t.Fatalf("elevated tool: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(cwd, "ran")); err == nil {
		t.Fatal("an unapproved elevated tool ran")
	}
	res = r.Run(ctx, "write", json.RawMessage(`{"path": "x", "sandbox": "nonesuch"}`))
	if !res.Failed || !strings.Contains(res.Output, "nonesuch") {
		t.Fatalf("unknown profile: %+v", res)
	}
}

// recordApprover approves every request and keeps them.
type recordApprover struct {
	mu   sync.Mutex
	reqs []broker.Request
}

func (a *recordApprover) Approve(_ context.Context, req *broker.Request) (broker.Grant, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, *req)
	return approveAll{}, nil
}

func (a *recordApprover) last() broker.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reqs[len(a.reqs)-1]
}

// TestApprovalNamesCaller: a request for approval names the session and
// the agent a call runs for, in the foreground and in the background, and
// variant -1 for a tool without variants.
func TestApprovalNamesCaller(t *testing.T) {
	r, cwd := runner(t, map[string][2]string{
		"priv": {`{"description": "Needs elevation.", "elevated": true}`, "#!/bin/sh\necho ran\n"},
	})
	rec := &recordApprover{}
	r.Approver, r.SessionID = rec, "sess-1"
	ctx := context.Background()
	check := func(how, agent string) {
		t.Helper()
		got := rec.last()
		if got.Session != "sess-1" || got.Agent != agent || got.Tool != "priv" || got.Variant != -1 || got.Cwd != cwd {
			t.Errorf("%s: asked %+v, want session sess-1, agent %q, tool priv, variant -1, cwd %s", how, got, agent, cwd)
		}
	}
	if res := r.RunFor(ctx, Caller{Agent: "agent-7", SessionName: "web", AgentName: "fixer"}, "priv", nil); res.Failed {
		t.Fatalf("RunFor: %s", res.Output)
	}
	check("RunFor", "agent-7")
	if got := rec.last(); got.SessionName != "web" || got.AgentName != "fixer" {
		t.Errorf("RunFor's request names session %q and agent %q, want web and fixer", got.SessionName, got.AgentName)
	}
	if res := r.Run(ctx, "priv", nil); res.Failed {
		t.Fatalf("Run: %s", res.Output)
	}
	check("Run", "")
	ps := &Procs{Runner: r}
	defer ps.Close()
	if _, err := ps.StartFor(ctx, Caller{Agent: "agent-8"}, "priv", nil); err != nil {
		t.Fatal(err)
	}
	check("StartFor", "agent-8")
}

// TestRunYolo: a yolo Runner runs every call outside the sandbox without
// asking anyone, in the foreground and the background, and still asks
// for a sudo tool.
func TestRunYolo(t *testing.T) {
	outside := t.TempDir()
	r, _ := runner(t, map[string][2]string{
		"write": {`{"description": "Write a file.", "args": {"type": "object", "properties": {"path": {"type": "string"}}}}`,
			"#!/bin/sh\np=$(sed 's/.*\"path\": *\"\\([^\"]*\\)\".*/\\1/')\necho data > \"$p\" && echo wrote \"$p\"\n"},
		"priv": {`{"description": "Needs elevation.", "elevated": true}`, "#!/bin/sh\necho ran\n"},
		"root": {`{"description": "Runs as root.", "sudo": true}`, "#!/bin/sh\nid -u\n"},
	})
	r.Yolo = true
	ctx := context.Background()
	res := r.Run(ctx, "write", json.RawMessage(`{"path": "`+outside+`/escape"}`))
	if res.Failed || res.Sandbox != "none" {
		t.Fatalf("yolo write outside the session's directory: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(outside, "escape")); err != nil {
		t.Fatal("the file outside the session's directory was not written")
	}
	if res := r.Run(ctx, "priv", nil); res.Failed || res.Output != "ran\n" {
		t.Fatalf("yolo elevated tool without an approver: %+v", res)
	}
	ps := &Procs{Runner: r}
	defer ps.Close()
	p, err := ps.Start(ctx, "write", json.RawMessage(`{"path": "`+outside+`/bg"}`))
	if err != nil || p.Sandbox != "none" {
		t.Fatalf("yolo background call: %v, %+v", err, p)
	}
	// sudo still needs the approval (and then the password): no approver
	// denies it.
	if res := r.Run(ctx, "root", nil); !res.Failed || !strings.Contains(res.Output, "no approval broker") {
		t.Fatalf("yolo sudo tool without an approver: %+v", res)
	}
	rec := &recordApprover{}
	r.Approver = rec
	r.Run(ctx, "priv", nil)
	r.Run(ctx, "write", json.RawMessage(`{"path": "`+outside+`/x", "bypass": true}`))
	if len(rec.reqs) != 0 {
		t.Errorf("a yolo Runner asked for approval: %+v", rec.reqs)
	}
}
