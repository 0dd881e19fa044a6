package main

import (
	"context"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/agent/backend"
)

// TestLoginNameIsAdmin attaches as plan9port's 9p and 9pfuse do, with the
// OS user's login name: the server's own user is the admin whatever name
// it gives, so it prompts an agent, follows its chat as `tail -f` through a
// mount would, and writes its ctl.
func TestLoginNameIsAdmin(t *testing.T) {
	data, _ := filepath.Abs("../../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	be := streamer("hello from the agent")
	d, admin := modelDaemon(t, be)
	if _, err := rdwr(admin, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := rdwr(admin, "session/s/agent/new", "name=a"); err != nil {
		t.Fatal(err)
	}

	fs := attach(t, d.Socket, me.Username)
	if got := readFile(t, fs, "session/s/agent/a/state"); got != "idle\n" {
		t.Fatalf("state = %q", got)
	}
	chat, err := fs.Open("session/s/agent/a/chat", plan9.OREAD)
	if err != nil {
		t.Fatalf("%s cannot open the chat: %v", me.Username, err)
	}
	defer chat.Close()
	got := make(chan string, 1)
	var all syncBuffer
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
	if err := writeFile(fs, "session/s/agent/a/prompt", "hi"); err != nil {
		t.Fatalf("%s cannot prompt the agent: %v", me.Username, err)
	}
	select {
	case text := <-got:
		if !strings.Contains(text, "hi") || !strings.Contains(text, "hello from the agent") {
			t.Errorf("chat as followed by %s = %q", me.Username, text)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the chat never showed the reply: %q (state %s)", all.String(), readFile(t, fs, "session/s/agent/a/state"))
	}
	for _, f := range []string{"log", "cfg", "plan", "fifo"} {
		if _, err := tryRead(fs, "session/s/agent/a/"+f); err != nil {
			t.Errorf("%s cannot read the agent's %s: %v", me.Username, f, err)
		}
	}
	if out, err := rdwr(fs, "session/s/agent/a/ctl", "stop"); err != nil || out != "idle\n" && out != "stopped\n" {
		t.Errorf("%s: ctl stop = %q, %v", me.Username, out, err)
	}
	if out, err := rdwr(fs, "ctl", "help"); err != nil || !strings.Contains(out, "invalidate") {
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
