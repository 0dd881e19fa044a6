package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
)

// hooksFor returns hooks running in a temporary directory with a short
// timeout; the commands are given as name, command pairs.
func hooksFor(t *testing.T, pairs ...string) *Hooks {
	h := &Hooks{Commands: map[string]string{}, Timeout: 2 * time.Second, Dir: t.TempDir(), Data: "/opt/ollie/data",
		Session: "s-1", Agent: "a-1", Profile: "coding"}
	for i := 0; i < len(pairs); i += 2 {
		h.Commands[pairs[i]] = pairs[i+1]
	}
	return h
}

var lsCall = HookCall{ID: "call_1", Tool: "shell", Args: json.RawMessage(`{"command": "ls -l"}`)}

func TestHookPreTool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string
		timeout time.Duration
		allow   bool
		reason  string // a regular expression
		err     string // in the error; "" for none
	}{
		{"exit 0", "exit 0", 0, true, "^$", ""},
		{"stdout ignored", "echo fine; exit 0", 0, true, "^$", ""},
		{"exit 2", `echo "rm is not allowed here" >&2; exit 2`, 0, false,
			`^tool call blocked by the preTool hook: rm is not allowed here$`, ""},
		{"exit 2, reason on stdout", `echo "see policy"; exit 2`, 0, false, `blocked by the preTool hook: see policy$`, ""},
		{"exit 2, no reason", `exit 2`, 0, false, `blocked by the preTool hook: no reason given$`, ""},
		{"exit 1", `echo "jq: error" >&2; exit 1`, 0, false,
			`^tool call blocked: the preTool hook failed \(exit status 1: jq: error\), and a failing preTool hook blocks$`, "exit status 1: jq: error"},
		{"exit 3", "exit 3", 0, false, `failed \(exit status 3\)`, "exit status 3"},
		{"crash", "kill -9 $$", 0, false, `failed \(killed by signal 9 \(killed\)\)`, "killed by signal 9"},
		{"timeout", "sleep 30", 300 * time.Millisecond, false, `failed \(timed out after 300ms\)`, "timed out after 300ms"},
		{"missing program", "/nonexistent/ollie-guard", 0, false, `failed \(exit status 127: .*/nonexistent/ollie-guard.*\)`, "exit status 127"},
		{"too much output", "yes", 0, false, `failed \(wrote more than 1 MiB to stdout\)`, "wrote more than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hooksFor(t, HookPreTool, tc.command)
			if tc.timeout > 0 {
				h.Timeout = tc.timeout
			}
			// No clock here: the timeout and the overflow are told by
			// their errors, and what a hook leaves behind, by
			// TestHookProcessGroup.
			d, err := h.PreTool(context.Background(), lsCall)
			if d.Allow != tc.allow || !regexp.MustCompile(tc.reason).MatchString(d.Reason) || d.Inject != "" {
				t.Errorf("decision %+v, want allow %v, reason matching %q", d, tc.allow, tc.reason)
			}
			if tc.err == "" {
				if err != nil {
					t.Errorf("err = %v", err)
				}
				return
			}
			var he *HookError
			if !errors.As(err, &he) || he.Hook != HookPreTool || he.Command != tc.command || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want a *HookError with %q", err, tc.err)
			}
			if tc.name == "timeout" && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("timeout: %v is not context.DeadlineExceeded", err)
			}
		})
	}
}

func TestHookPreToolNone(t *testing.T) {
	var nilHooks *Hooks
	for _, h := range []*Hooks{nilHooks, {}, hooksFor(t, HookPostTool, "exit 1")} {
		if d, err := h.PreTool(context.Background(), lsCall); !d.Allow || err != nil {
			t.Errorf("%+v: %+v, %v: no preTool hook allows", h, d, err)
		}
	}
	if (HookDecision{}).Allow {
		t.Error("the zero HookDecision allows")
	}
}

// TestHookFailClosedCauses covers what fails a hook beyond its exit code:
// the caller's context, and a working directory that is gone.
func TestHookFailClosedCauses(t *testing.T) {
	h := hooksFor(t, HookPreTool, "sleep 30")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(ErrStopped) })
	d, err := h.PreTool(ctx, lsCall)
	if d.Allow || !errors.Is(err, ErrStopped) || !strings.Contains(d.Reason, "agent: stopped") {
		t.Errorf("cancelled: %+v, %v", d, err)
	}

	h = hooksFor(t, HookPreTool, "exit 0")
	h.Dir = filepath.Join(h.Dir, "removed")
	d, err = h.PreTool(context.Background(), lsCall)
	if d.Allow || err == nil || !strings.Contains(d.Reason, "the working directory: stat "+h.Dir+": no such file or directory") {
		t.Errorf("missing directory: %+v, %v", d, err)
	}
}

func TestHookProcessGroup(t *testing.T) {
	// On timeout, what the hook started dies with it.
	h := hooksFor(t, HookPreTool, `sleep 30 & echo $! > pid; wait`)
	h.Timeout = 200 * time.Millisecond
	if d, _ := h.PreTool(context.Background(), lsCall); d.Allow {
		t.Fatal("allowed")
	}
	waitDead(t, readPid(t, filepath.Join(h.Dir, "pid")))

	// When the hook exits, what it left running dies too, and does not
	// hold up the hook by keeping its stdout open. Here the bound is the
	// point, and generous: held up, the hook would last the sleep's 30 s;
	// it ends at once, or after its one-second grace should the kill be
	// missing (then waitDead fails).
	h = hooksFor(t, HookPostTurn, `sleep 30 & echo $! > pid; exit 0`)
	begin := time.Now()
	if err := h.PostTurn(context.Background(), TurnInfo{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 15*time.Second {
		t.Errorf("took %v: the process left running held the hook up", took)
	}
	waitDead(t, readPid(t, filepath.Join(h.Dir, "pid")))

	// A process that left the group on purpose is not waited for, even
	// while it holds the hook's stdout: it is still running when Run
	// returns (it sleeps for 30 s; a Run that waited for it would find it
	// gone).
	h = hooksFor(t, HookPostTurn, `setsid sh -c 'echo $$ > pid.new; mv pid.new pid; exec sleep 30' & until [ -s pid ]; do sleep 0.01; done; echo done`)
	out, err := h.Run(context.Background(), HookPostTurn, nil)
	if err != nil || out.ExitCode != 0 || out.Stdout != "done\n" {
		t.Errorf("%+v, %v", out, err)
	}
	if pid := readPid(t, filepath.Join(h.Dir, "pid")); procAlive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	} else {
		t.Errorf("process %d, which left the group, was gone when Run returned: Run waited for it or killed it", pid)
	}
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if !await.Poll(ctx, func() bool { return !procAlive(pid) }) {
		t.Errorf("process %d outlived its hook", pid)
	}
}

func TestHookPostTool(t *testing.T) {
	for _, tc := range []struct {
		command, result, want string
		err                   string
	}{
		{"exit 0", "ok\n", "ok\n", ""},
		{"echo 'lint: 2 warnings'", "ok\n", "ok\nlint: 2 warnings\n", ""},
		{"printf 'lint: clean'", "ok", "ok\nlint: clean", ""},
		{"echo '[redacted]'; exit 2", "password=hunter2\n", "[redacted]\n", ""},
		{"echo 'boom' >&2; exit 1", "secret\n",
			"the call ran, but its result is withheld: the postTool hook failed (exit status 1: boom), and a failing postTool hook withholds the result", "exit status 1: boom"},
		// /bin/sh exits 2 on a syntax error: that is no replacement.
		{"if then", "secret\n", "the call ran, but its result is withheld: the postTool hook failed (exit status 2: ", "exit status 2"},
		{"sleep 30", "secret\n", "the call ran, but its result is withheld: the postTool hook failed (timed out after 300ms)", "timed out"},
	} {
		h := hooksFor(t, HookPostTool, tc.command)
		h.Timeout = 300 * time.Millisecond
		got, err := h.PostTool(context.Background(), lsCall, tc.result, false)
		if !strings.HasPrefix(got, tc.want) || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q, %v\nwant %q, %q", tc.command, got, err, tc.want, tc.err)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "hunter2") {
			t.Errorf("%s: the result got through: %q", tc.command, got)
		}
	}
	if got, err := (*Hooks)(nil).PostTool(context.Background(), lsCall, "as is", true); got != "as is" || err != nil {
		t.Errorf("no hook: %q, %v", got, err)
	}
}

func TestHookPreTurn(t *testing.T) {
	ctx := context.Background()
	d, err := hooksFor(t, HookPreTurn, `echo "Today is a holiday: no deploys."`).PreTurn(ctx, "deploy")
	if !d.Allow || d.Inject != "Today is a holiday: no deploys.\n" || err != nil {
		t.Errorf("exit 0: %+v, %v", d, err)
	}
	d, err = hooksFor(t, HookPreTurn, `echo "quota used up" >&2; exit 2`).PreTurn(ctx, "deploy")
	if d.Allow || d.Reason != "prompt blocked by the preTurn hook: quota used up" || err != nil {
		t.Errorf("exit 2: %+v, %v", d, err)
	}
	d, err = hooksFor(t, HookPreTurn, `echo half; exit 1`).PreTurn(ctx, "deploy")
	if d.Allow || d.Inject != "" || err == nil {
		t.Errorf("exit 1: %+v, %v", d, err)
	}
}

func TestHookAgentSpawn(t *testing.T) {
	ctx := context.Background()
	if d, err := hooksFor(t, HookAgentSpawn, "exit 0").AgentSpawn(ctx, SpawnInfo{}); !d.Allow || err != nil {
		t.Errorf("exit 0: %+v, %v", d, err)
	}
	d, err := hooksFor(t, HookAgentSpawn, `echo "no agents on this host after 18:00" >&2; exit 2`).AgentSpawn(ctx, SpawnInfo{})
	if d.Allow || d.Reason != "agent start blocked by the agentSpawn hook: no agents on this host after 18:00" || err != nil {
		t.Errorf("exit 2: %+v, %v", d, err)
	}
	if d, err := hooksFor(t, HookAgentSpawn, "exit 1").AgentSpawn(ctx, SpawnInfo{}); d.Allow || err == nil {
		t.Errorf("exit 1: %+v, %v", d, err)
	}
}

func TestHookTurnError(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		command string
		handled bool
		note    string
		err     bool
	}{
		{`echo "switched to the fallback model"`, true, "switched to the fallback model\n", false},
		{"exit 1", false, "", false},
		{"exit 2", false, "", true},
		{"kill -9 $$", false, "", true},
	} {
		handled, note, err := hooksFor(t, HookTurnError, tc.command).TurnError(ctx, TurnErrorInfo{Error: "429"})
		if handled != tc.handled || note != tc.note || (err != nil) != tc.err {
			t.Errorf("%s: %v, %q, %v", tc.command, handled, note, err)
		}
	}
	if handled, _, err := (*Hooks)(nil).TurnError(ctx, TurnErrorInfo{}); handled || err != nil {
		t.Errorf("no hook: %v, %v", handled, err)
	}
}

func TestHookNotify(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{HookPostTurn, HookPreCompact, HookPostCompact} {
		run := func(h *Hooks) error {
			switch name {
			case HookPostTurn:
				return h.PostTurn(ctx, TurnInfo{})
			case HookPreCompact:
				return h.PreCompact(ctx, CompactInfo{})
			}
			return h.PostCompact(ctx, CompactInfo{})
		}
		if err := run(hooksFor(t, name, "echo ignored")); err != nil {
			t.Errorf("%s exit 0: %v", name, err)
		}
		err := run(hooksFor(t, name, "echo 'disk full' >&2; exit 5"))
		var he *HookError
		if !errors.As(err, &he) || he.Hook != name || he.ExitCode != 5 || he.Stderr != "disk full\n" ||
			err.Error() != "agent: hook "+name+" `echo 'disk full' >&2; exit 5`: exit status 5: disk full" {
			t.Errorf("%s exit 5: %v", name, err)
		}
		if err := run(nil); err != nil {
			t.Errorf("%s, no hooks: %v", name, err)
		}
	}
}

func TestHookRun(t *testing.T) {
	h := hooksFor(t, HookPostTurn, `cat >/dev/null; echo out; echo err >&2; exit 4`)
	out, err := h.Run(context.Background(), HookPostTurn, map[string]int{"steps": 1})
	if err != nil || !out.Ran || out.ExitCode != 4 || out.Stdout != "out\n" || out.Stderr != "err\n" || out.Hook != HookPostTurn {
		t.Errorf("%+v, %v: an exit code is not Run's error", out, err)
	}
	if out, err := h.Run(context.Background(), HookPreTool, nil); out.Ran || err != nil {
		t.Errorf("no command: %+v, %v", out, err)
	}
	if _, err := h.Run(context.Background(), "onExit", nil); !errors.Is(err, ErrUnknownHook) {
		t.Errorf("unknown hook: %v", err)
	}
	if _, err := h.Run(context.Background(), HookPostTurn, []int{1}); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("payload not an object: %v", err)
	}
	// A big payload reaches a hook that does not read it without blocking.
	big := strings.Repeat("x", 4<<20)
	if got, err := hooksFor(t, HookPostTool, "exit 0").PostTool(context.Background(), lsCall, big, false); err != nil || got != big {
		t.Errorf("unread stdin: %v", err)
	}
}

func TestHookEnv(t *testing.T) {
	h := hooksFor(t, HookPostTurn, `printf '%s\n' "$OLLIE_HOOK" "$OLLIE" "$OLLIE_CWD" "$PWD" "$OLLIE_SESSION" "$OLLIE_AGENT" "$OLLIE_PROFILE" "$SESSION_VAR" > env`)
	h.Env = []string{"SESSION_VAR=v", "OLLIE_HOOK=spoofed"}
	if err := h.PostTurn(context.Background(), TurnInfo{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(h.Dir, "env"))
	want := strings.Join([]string{"postTurn", "/opt/ollie/data", h.Dir, h.Dir, "s-1", "a-1", "coding", "v"}, "\n") + "\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	p := &Profile{Name: "ops", Hooks: map[string]string{HookPreTool: "exit 0"}}
	env := PromptEnv{Data: "/d", Cwd: "/c", Session: "s", Agent: "a", Env: []string{"X=1"}}
	want2 := &Hooks{Commands: p.Hooks, Dir: "/c", Env: []string{"X=1"}, Data: "/d", Session: "s", Agent: "a", Profile: "ops"}
	if got := NewHooks(p, env); !reflect.DeepEqual(got, want2) {
		t.Errorf("NewHooks = %+v, want %+v", got, want2)
	}
}

// TestHookPayloads checks that each hook gets on stdin the JSON that
// data/agents/README.md shows: the same fields, with values of the same
// types, one object on one line.
func TestHookPayloads(t *testing.T) {
	documented := readmePayloads(t)
	h := hooksFor(t)
	for _, name := range HookNames {
		h.Commands[name] = `cat > "payload.$OLLIE_HOOK"`
	}
	ctx := context.Background()
	h.AgentSpawn(ctx, SpawnInfo{Model: "m", Backend: "b", Tools: []string{"shell"}})
	h.PreTurn(ctx, "fix it")
	h.PreTool(ctx, lsCall)
	h.PostTool(ctx, lsCall, "total 0\n", false)
	h.PostTurn(ctx, TurnInfo{Prompt: "fix it", Reply: "done", Steps: 3})
	h.PreCompact(ctx, CompactInfo{Reason: "overflow", Messages: 80})
	h.PostCompact(ctx, CompactInfo{Reason: "overflow", Messages: 19})
	h.TurnError(ctx, TurnErrorInfo{Error: "429", Attempt: 1, Model: "m", Backend: "b"})

	for _, name := range HookNames {
		raw, err := os.ReadFile(filepath.Join(h.Dir, "payload."+name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n := strings.Count(string(raw), "\n"); n != 1 || !strings.HasSuffix(string(raw), "\n") {
			t.Errorf("%s: %q is not one line", name, raw)
		}
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		common := map[string]any{"hook": name, "session": "s-1", "agent": "a-1", "profile": "coding", "cwd": h.Dir}
		for k, v := range common {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", name, k, got[k], v)
			}
		}
		doc, ok := documented[name]
		if !ok {
			t.Errorf("%s: the README shows no payload", name)
			continue
		}
		if jsonShape(got) != jsonShape(doc) {
			t.Errorf("%s: payload %s\nREADME shows %s", name, jsonShape(got), jsonShape(doc))
		}
	}

	// The lsCall's arguments as the model sent them.
	raw, _ := os.ReadFile(filepath.Join(h.Dir, "payload.preTool"))
	var pre struct{ Args map[string]string }
	json.Unmarshal(raw, &pre)
	if pre.Args["command"] != "ls -l" {
		t.Errorf("preTool args: %s", raw)
	}
	for args, want := range map[string]string{"": `{}`, "  ": `{}`, `{"a":`: `"{\"a\":"`, `[1]`: `[1]`} {
		h.PreTool(ctx, HookCall{ID: "c", Tool: "t", Args: json.RawMessage(args)})
		raw, _ := os.ReadFile(filepath.Join(h.Dir, "payload.preTool"))
		var got struct{ Args json.RawMessage }
		json.Unmarshal(raw, &got)
		if string(got.Args) != want {
			t.Errorf("args %q reach the hook as %s, want %s", args, got.Args, want)
		}
	}
}

// readmePayloads reads the payload examples of data/agents/README.md: each
// ```json block with a "hook" field.
func readmePayloads(t *testing.T) map[string]map[string]any {
	text, err := os.ReadFile("../data/agents/README.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
		var v map[string]any
		if err := json.Unmarshal([]byte(m[1]), &v); err != nil {
			t.Fatalf("README: %v in\n%s", err, m[1])
		}
		if name, ok := v["hook"].(string); ok {
			out[name] = v
		}
	}
	return out
}

// shape is an object's keys with the JSON types of their values.
func jsonShape(v map[string]any) string {
	var fields []string
	for k, x := range v {
		var kind string
		switch x.(type) {
		case string:
			kind = "string"
		case float64:
			kind = "number"
		case bool:
			kind = "bool"
		case []any:
			kind = "array"
		case map[string]any:
			kind = "object"
		default:
			kind = "null"
		}
		fields = append(fields, k+":"+kind)
	}
	slices.Sort(fields)
	return "{" + strings.Join(fields, " ") + "}"
}

// TestHookParallel runs one Hooks from many goroutines, as the loop does for
// the calls of one round.
func TestHookParallel(t *testing.T) {
	h := hooksFor(t, HookPreTool, `grep -q '"tool":"shell"' && exit 0; echo "only shell" >&2; exit 2`)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c := lsCall
			if i%2 == 1 {
				c.Tool = "file_write"
			}
			d, err := h.PreTool(context.Background(), c)
			if d.Allow != (i%2 == 0) || err != nil {
				t.Errorf("%d: %+v, %v", i, d, err)
			}
		})
	}
	wg.Wait()
}
