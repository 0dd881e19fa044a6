package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/agent/backend"
	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/nstest"
)

// putTool writes to the path its text argument names (twoStep passes the
// prompt as the text).
const putTool = "#!/bin/sh\np=$(sed 's/.*\"text\": *\"\\([^\"]*\\)\".*/\\1/')\necho here > \"$p\" && echo wrote \"$p\"\n"

// yoloRig is one state directory and namespace directory across restarts
// of an in-process daemon whose model calls put with the prompt.
type yoloRig struct {
	t          *testing.T
	state, dir string
	d          *Daemon
	fs         *client.Fsys
}

func newYoloRig(t *testing.T) *yoloRig {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "put.meta"), []byte(`{"description": "Write a file."}`), 0644)
	os.WriteFile(filepath.Join(tools, "put"), []byte(putTool), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	r := &yoloRig{t: t, state: t.TempDir(), dir: nstest.ShortTempDir(t)}
	r.start()
	return r
}

func (r *yoloRig) start() {
	r.t.Helper()
	be := &twoStep{}
	d, err := Start(Config{StateDir: r.state, Dir: r.dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backends: func(string) (backend.Backend, error) { return putBackend{be}, nil }})
	if err != nil {
		r.t.Fatal(err)
	}
	r.d = d
	r.t.Cleanup(func() { r.stop() })
	r.fs = nstest.Attach(r.t, d.Socket, "")
}

func (r *yoloRig) stop() {
	if r.d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.d.Shutdown(ctx)
	r.d = nil
}

// putBackend is twoStep calling put rather than echo.
type putBackend struct{ *twoStep }

func (b putBackend) Chat(ctx context.Context, msgs []backend.Message, tools []backend.Tool, p backend.Params, on func(backend.Delta)) (*backend.Reply, error) {
	reply, err := b.twoStep.Chat(ctx, msgs, tools, p, on)
	if err == nil {
		for i := range reply.Message.ToolCalls {
			reply.Message.ToolCalls[i].Name = "put"
		}
	}
	return reply, err
}

// turn prompts agent a of session s with text and returns the chat of
// that turn, from the line before its prompt (a note, if any) to the
// model's answer to the tool's result.
func (r *yoloRig) turn(s, text string) string {
	r.t.Helper()
	chat, err := r.fs.Open("session/"+s+"/agent/a/chat", plan9.OREAD)
	if err != nil {
		r.t.Fatal(err)
	}
	defer chat.Close()
	if err := nstest.WriteFile(r.fs, "session/"+s+"/agent/a/prompt", text); err != nil {
		r.t.Fatal(err)
	}
	var lines []string
	for start := -1; ; {
		lines = append(lines, readLines(r.t, chat, 1)...)
		for i, l := range lines {
			if start < 0 && l == text {
				start = max(i-1, 0)
			}
			if start >= 0 && i > start+1 && strings.Contains(l, "the tool said") {
				return strings.Join(lines[start:i+1], "\n") + "\n"
			}
		}
	}
}

// TestYoloSession: the admin's yolo session runs its tools unsandboxed and
// without approval, says so in session/idx, env, status and at the start
// of every turn, and stays yolo across a restart; an agent's tool can
// never make one; bypass/policy yolo=deny refuses them.
func TestYoloSession(t *testing.T) {
	r := newYoloRig(t)
	// The yolo session's directory lies inside the safe one's, where an
	// orchestrator works: it still may not add an agent there.
	outside, safe := t.TempDir(), t.TempDir()
	work := filepath.Join(safe, "wild")
	os.Mkdir(work, 0755)
	for _, req := range []string{"name=wild cwd=" + work + " yolo=true", "name=safe cwd=" + safe + " yolo=false"} {
		if _, err := nstest.RdWr(r.fs, "session/new", req); err != nil {
			t.Fatalf("session/new %s: %v", req, err)
		}
	}
	for _, s := range []string{"wild", "safe"} {
		if _, err := nstest.RdWr(r.fs, "session/"+s+"/agent/new", "name=a profile=default"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nstest.RdWr(r.fs, "session/new", "name=x yolo=maybe"); err == nil || !strings.Contains(err.Error(), `yolo "maybe" is not true or false`) {
		t.Errorf("yolo=maybe: %v", err)
	}

	// The sandbox keeps the safe session's tool in its directory.
	chat := r.turn("safe", filepath.Join(outside, "from-safe"))
	if _, err := os.Stat(filepath.Join(outside, "from-safe")); err == nil || !strings.Contains(chat, "error:") || strings.Contains(chat, "yolo") {
		t.Fatalf("the safe session's tool wrote outside its directory, or its chat says yolo:\n%s", chat)
	}
	// The yolo session's is unsandboxed and asks no one.
	chat = r.turn("wild", filepath.Join(outside, "from-wild"))
	if _, err := os.Stat(filepath.Join(outside, "from-wild")); err != nil {
		t.Fatalf("the yolo session's tool did not write outside its directory:\n%s", chat)
	}
	if !strings.HasPrefix(chat, "["+yoloNote+"]\n"+filepath.Join(outside, "from-wild")+"\n") {
		t.Errorf("the yolo turn's chat does not start with the note:\n%s", chat)
	}
	if n := len(r.d.gate.Pending()); n != 0 {
		t.Errorf("%d approval requests pending", n)
	}

	checkMarks := func(when string) {
		t.Helper()
		idx := nstest.ReadFile(t, r.fs, "session/idx")
		for _, line := range strings.Split(strings.TrimSpace(idx), "\n") {
			f := strings.Split(line, "\t")
			if len(f) != 8 {
				t.Errorf("%s: idx line %q has %d columns, want 8", when, line, len(f))
				continue
			}
			want := "-"
			if f[1] == "wild" {
				want = "yolo"
			}
			if f[7] != want || f[6] != "ok" {
				t.Errorf("%s: idx line %q: want state ok and yolo column %q", when, line, want)
			}
		}
		if env := nstest.ReadFile(t, r.fs, "session/wild/env"); !strings.Contains(env, "\nOLLIE_YOLO=1\n") || !strings.Contains(env, "\nOLLIE_SANDBOX=NONE: a yolo session") {
			t.Errorf("%s: the yolo session's env:\n%s", when, env)
		}
		if env := nstest.ReadFile(t, r.fs, "session/safe/env"); !strings.Contains(env, "\nOLLIE_YOLO=0\n") || strings.Contains(env, "OLLIE_SANDBOX=NONE") {
			t.Errorf("%s: the safe session's env:\n%s", when, env)
		}
		if st := nstest.ReadFile(t, r.fs, "status"); !strings.Contains(st, "\nyolo 1\n") {
			t.Errorf("%s: status does not count one yolo session:\n%s", when, st)
		}
	}
	checkMarks("created")

	// An agent's tool may not make one, even an orchestrator's.
	if _, err := nstest.RdWr(r.fs, "session/safe/agent/new", "name=boss profile=orchestrator"); err != nil {
		t.Fatal(err)
	}
	boss := attachAgent(t, r.d, strings.TrimSpace(nstest.ReadFile(t, r.fs, "session/safe/agent/boss/id")))
	if _, err := nstest.RdWr(boss, "session/new", "name=nested cwd="+safe+" yolo=true"); err == nil || !strings.Contains(err.Error(), "only the admin may create a yolo session") {
		t.Errorf("an orchestrator's tool asked for a yolo session: %v", err)
	}
	if _, err := nstest.RdWr(boss, "session/new", "name=nested cwd="+safe); err != nil {
		t.Errorf("the orchestrator's ordinary nested session: %v", err)
	}
	if _, err := nstest.RdWr(boss, "session/wild/agent/new", "name=sneak profile=default cwd="+work); err == nil || !strings.Contains(err.Error(), "yolo session") {
		t.Errorf("an orchestrator's tool added an agent to a yolo session: %v", err)
	}
	if _, err := nstest.RdWr(r.fs, "session/wild/agent/new", "name=b profile=default"); err != nil {
		t.Errorf("the admin's second agent in the yolo session: %v", err)
	}
	a := attachAgent(t, r.d, strings.TrimSpace(nstest.ReadFile(t, r.fs, "session/safe/agent/a/id")))
	if _, err := nstest.RdWr(a, "session/new", "name=n2 yolo=true"); err == nil {
		t.Error("a default agent's tool made a yolo session")
	}

	// The host's policy forbids them.
	if err := nstest.WriteFile(r.fs, "bypass/policy", "yolo=deny"); err != nil {
		t.Fatal(err)
	}
	if p := nstest.ReadFile(t, r.fs, "bypass/policy"); !strings.Contains(p, "yolo=deny") {
		t.Errorf("bypass/policy = %q", p)
	}
	if _, err := nstest.RdWr(r.fs, "session/new", "name=wild2 yolo=true"); err == nil || !strings.Contains(err.Error(), "yolo=deny") {
		t.Errorf("yolo=deny: %v", err)
	}
	if _, ok := r.d.ns.sessions.Lookup("wild2"); ok {
		t.Error("a refused yolo session exists")
	}

	// A restart keeps it yolo: the marks, and its tools unsandboxed.
	r.stop()
	r.start()
	checkMarks("restarted")
	chat = r.turn("wild", filepath.Join(outside, "after-restart"))
	if _, err := os.Stat(filepath.Join(outside, "after-restart")); err != nil || !strings.HasPrefix(chat, "["+yoloNote+"]\n") {
		t.Errorf("after the restart the yolo session's turn (wrote: %v):\n%s", err, chat)
	}
}

// denyAll is a desktop that denies every request, and remembers them.
type denyAll struct {
	mu    sync.Mutex
	asked []broker.Request
}

func (d *denyAll) Approve(_ context.Context, req *broker.Request) (broker.Answer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, *req)
	return broker.Answer{Decision: broker.Deny, Reason: "not on my desktop"}, nil
}

func (d *denyAll) Password(context.Context, *broker.Request, int, string) ([]byte, error) {
	return nil, errors.New("no password")
}

// TestYoloAsksDesktop: with a desktop broker connected, a yolo session is
// created only if the desktop allows it.
func TestYoloAsksDesktop(t *testing.T) {
	r := newYoloRig(t)
	sock := filepath.Join(nstest.ShortTempDir(t), "desk")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	desk := &denyAll{}
	go (&desktop.Broker{Approver: desk}).Serve("h1", l)
	if err := nstest.WriteFile(r.fs, "bypass/broker", sock); err != nil {
		t.Fatal(err)
	}
	_, err = nstest.RdWr(r.fs, "session/new", "name=wild cwd="+t.TempDir()+" yolo=true")
	if err == nil || !strings.Contains(err.Error(), "not on my desktop") {
		t.Fatalf("a yolo session the desktop denied: %v", err)
	}
	if len(desk.asked) != 1 || !desk.asked[0].Yolo || desk.asked[0].Session != "wild" || desk.asked[0].Tool != broker.YoloTool {
		t.Errorf("the desktop was asked %+v", desk.asked)
	}
	if _, ok := r.d.ns.sessions.Lookup("wild"); ok {
		t.Error("the refused session exists")
	}
}
