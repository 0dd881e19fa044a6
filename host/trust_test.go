package host

import (
	"context"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/agent/backend"
	"ollie/internal/nstest"
)

// TestLoginNameIsAdmin attaches as plan9port's 9p and 9pfuse do, with the
// OS user's login name: the server's own user is the admin whatever name
// it gives, so it prompts an agent, follows its chat as `tail -f` through a
// mount would, and writes its ctl.
func TestLoginNameIsAdmin(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	be := streamer("hello from the agent")
	d, admin := modelDaemon(t, be)
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(admin, "session/s/agent/new", "name=a"); err != nil {
		t.Fatal(err)
	}

	fs := nstest.Attach(t, d.Socket, me.Username)
	if got := nstest.ReadFile(t, fs, "session/s/agent/a/state"); got != "idle\n" {
		t.Fatalf("state = %q", got)
	}
	chat, err := fs.Open("session/s/agent/a/chat", plan9.OREAD)
	if err != nil {
		t.Fatalf("%s cannot open the chat: %v", me.Username, err)
	}
	defer chat.Close()
	got := make(chan string, 1)
	var all nstest.SyncBuffer
	go func() {
		buf := make([]byte, 8192)
		for {
			n, err := chat.Read(buf) // blocks at the end of the stream, as tail -f would wait
			all.Write(buf[:n])
			if strings.Contains(all.String(), "hello from the agent") || err != nil {
				got <- all.String()
				return
			}
		}
	}()
	if err := nstest.WriteFile(fs, "session/s/agent/a/prompt", "hi"); err != nil {
		t.Fatalf("%s cannot prompt the agent: %v", me.Username, err)
	}
	select {
	case text := <-got:
		if !strings.Contains(text, "hi") || !strings.Contains(text, "hello from the agent") {
			t.Errorf("chat as followed by %s = %q", me.Username, text)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the chat never showed the reply: %q (state %s)", all.String(), nstest.ReadFile(t, fs, "session/s/agent/a/state"))
	}
	for _, f := range []string{"log", "cfg", "plan", "fifo"} {
		if _, err := nstest.TryRead(fs, "session/s/agent/a/"+f); err != nil {
			t.Errorf("%s cannot read the agent's %s: %v", me.Username, f, err)
		}
	}
	if out, err := nstest.RdWr(fs, "session/s/agent/a/ctl", "stop"); err != nil || out != "idle\n" && out != "stopped\n" {
		t.Errorf("%s: ctl stop = %q, %v", me.Username, out, err)
	}
	if out, err := nstest.RdWr(fs, "ctl", "help"); err != nil || !strings.Contains(out, "invalidate") {
		t.Errorf("%s: root ctl help = %q, %v", me.Username, out, err)
	}
}

// streamer is a Backend that streams one reply, as a real model does.
type streamer string

func (b streamer) Name() string                              { return "streamer" }
func (b streamer) DefaultModel() string                      { return "m" }
func (b streamer) Models(context.Context) ([]string, error)  { return []string{"m"}, nil }
func (b streamer) ContextLength(context.Context, string) int { return 0 }
func (b streamer) Chat(ctx context.Context, msgs []backend.Message, tools []backend.Tool, p backend.Params, on func(backend.Delta)) (*backend.Reply, error) {
	on(backend.Delta{Text: string(b)})
	return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, Content: string(b)}}, nil
}

// TestMakerDrivesWhatItMade: an agent whose profile may spawn briefs,
// follows and stops the agents it made, as the orchestrator's prompt says;
// another agent of the same session can do none of it, nor can the maker
// once it is gone.
func TestMakerDrivesWhatItMade(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, admin := modelDaemon(t, streamer("done"))
	work := t.TempDir()
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+work); err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"name=orch profile=orchestrator", "name=other"} {
		if _, err := nstest.RdWr(admin, "session/s/agent/new", req); err != nil {
			t.Fatal(err)
		}
	}
	id := func(name string) string {
		return strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/"+name+"/id"))
	}
	orch, other := attachAgent(t, d, id("orch")), attachAgent(t, d, id("other"))
	if _, err := nstest.RdWr(orch, "session/s/agent/new", "name=worker profile=worker"); err != nil {
		t.Fatalf("the orchestrator cannot make a worker: %v", err)
	}
	if err := nstest.WriteFile(orch, "session/s/agent/worker/plan", "step 1"); err != nil {
		t.Errorf("the maker cannot write its worker's plan: %v", err)
	}
	if got := nstest.ReadFile(t, admin, "session/s/agent/worker/plan"); got != "step 1" {
		t.Errorf("worker's plan = %q", got)
	}
	for _, f := range []string{"log", "fifo", "cfg"} {
		if _, err := nstest.TryRead(orch, "session/s/agent/worker/"+f); err != nil {
			t.Errorf("the maker cannot read its worker's %s: %v", f, err)
		}
	}
	if got, err := nstest.RdWr(orch, "session/s/agent/worker/ctl", "cwd"); err != nil || got != work+"\n" {
		t.Errorf("the maker's ctl cwd: %q %v", got, err)
	}
	if err := nstest.WriteFile(orch, "session/s/agent/worker/prompt", "go"); err != nil {
		t.Errorf("the maker cannot brief its worker: %v", err)
	}

	// Another agent of the session is not the maker.
	if err := nstest.WriteFile(other, "session/s/agent/worker/plan", "mine now"); err == nil {
		t.Error("another agent wrote the worker's plan")
	}
	if err := nstest.WriteFile(other, "session/s/agent/worker/prompt", "obey"); err == nil {
		t.Error("another agent prompted the worker")
	}
	if _, err := nstest.TryRead(other, "session/s/agent/worker/log"); err == nil {
		t.Error("another agent read the worker's log")
	}
	if _, err := nstest.RdWr(other, "session/s/agent/worker/ctl", "kill"); err == nil {
		t.Error("another agent killed the worker")
	}
	// Nor the other way round: a worker does not drive its maker.
	worker := attachAgent(t, d, id("worker"))
	if err := nstest.WriteFile(worker, "session/s/agent/orch/plan", "x"); err == nil {
		t.Error("the worker wrote its maker's plan")
	}

	// The maker stops what it made; once the maker is gone, its
	// capability opens nothing.
	if got, err := nstest.RdWr(orch, "session/s/agent/worker/ctl", "stop"); err != nil || got != "idle\n" && got != "stopped\n" {
		t.Errorf("the maker's ctl stop: %q %v", got, err)
	}
	if _, err := nstest.RdWr(admin, "session/s/agent/orch/ctl", "kill"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(orch, "session/s/agent/worker/plan", "from beyond"); err == nil {
		t.Error("a killed maker's connection still writes its worker's plan")
	}
}
