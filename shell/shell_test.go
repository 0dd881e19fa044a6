package shell

import (
	"context"
	"io"
	"log/slog"
	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/host"
	"ollie/internal/nstest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// A history that cannot be kept leaves the shell without one.
func TestShellHistoryPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	if p := shellHistoryPath(); p != filepath.Join(dir, "state", "ollie", "history") {
		t.Errorf("history path %q", p)
	}
	if fi, err := os.Stat(filepath.Join(dir, "state", "ollie", "history")); err != nil || fi.Mode().Perm() != 0600 {
		t.Errorf("history file: %v, %v", fi, err)
	}
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0600)
	t.Setenv("XDG_STATE_HOME", blocker)
	if p := shellHistoryPath(); p != "" {
		t.Errorf("history under a file: %q, want none", p)
	}
}

// The interactive shell on a real terminal: completion, ^C interrupting a
// blocked cat without leaving the shell, and history.
func TestShellTerminal(t *testing.T) {
	n := newOllieNS(t)
	state := t.TempDir()
	cmd := ollieCommand(t)
	cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+state, "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var screen nstest.SyncBuffer
	go io.Copy(&screen, tty)

	const prompt = "ollie:/% "
	// promptAfter reports whether a prompt was drawn after the last
	// occurrence of mark.
	promptAfter := func(mark string) func() bool {
		return func() bool {
			s := screen.String()
			i := strings.LastIndex(s, mark)
			return i >= 0 && strings.Contains(s[i+len(mark):], prompt)
		}
	}
	type_ := func(s string) {
		if _, err := tty.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}

	ollieWaitFor(t, "the prompt", func() bool { return strings.Contains(screen.String(), prompt) })
	// Completion: "sess" → "session/", "al" → "alpha/", "i" → "id ".
	type_("cat sess\t")
	ollieWaitFor(t, "completion of session/", func() bool { return strings.Contains(screen.String(), "session/") })
	type_("al\t")
	ollieWaitFor(t, "completion of alpha/", func() bool { return strings.Contains(screen.String(), "session/alpha/") })
	type_("i\t\r")
	ollieWaitFor(t, "the session id", func() bool { return strings.Contains(screen.String(), "s1\r\n") })
	ollieWaitFor(t, "the prompt after cat", promptAfter("s1\r\n"))

	type_("cat stream\r")
	ollieWaitFor(t, "the stream", func() bool { return strings.Contains(screen.String(), "start\r\n") })
	type_("\x03")
	ollieWaitFor(t, "the prompt after ^C", promptAfter("start\r\n"))
	type_("ls session\r")
	ollieWaitFor(t, "ls after ^C", func() bool { return strings.Contains(screen.String(), "alpha/\r\nbeta/\r\n") })
	ollieWaitFor(t, "the prompt after ls", promptAfter("beta/\r\n"))
	type_("exit\r")
	if status := ollieWait(t, cmd); status != 0 {
		t.Errorf("shell exited %d; screen:\n%s", status, screen.String())
	}

	hist, err := os.ReadFile(filepath.Join(state, "ollie", "history"))
	if err != nil || !strings.Contains(string(hist), "cat session/alpha/id \ncat stream\nls session\nexit\n") {
		t.Errorf("history: %q, %v", hist, err)
	}
	if os.Getenv("SHOW_SCREEN") != "" {
		t.Logf("screen:\n%q", screen.String())
	}
	_ = n
}

// The shell's chat: in an agent's directory, chat talks to that agent,
// on the terminal the shell makes way for; the shell goes on after.
func TestShellChat(t *testing.T) {
	llm := fakellm.Start(t)
	reg, err := backend.LoadEnv(func(k string) (string, bool) {
		v, ok := map[string]string{"OPENAI_BASE_URL": llm.URL + "/v1", "OPENAI_API_KEY": "k", "OPENAI_MODEL": "fake-model"}[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_DATA", data)
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	d, err := host.Start(host.Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	fs := nstest.Attach(t, d.Socket, "")
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=helper"); err != nil {
		t.Fatal(err)
	}
	llm.Push(fakellm.Text("hello from the shell's chat"))

	cmd := ollieCommand(t, "-a", d.Socket)
	cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+t.TempDir(), "TERM=xterm", "NO_COLOR=1")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var screen nstest.SyncBuffer
	go io.Copy(&screen, tty)
	defer func() {
		if t.Failed() {
			t.Logf("screen:\n%s", screen.String())
		}
	}()
	shows := func(what string) {
		t.Helper()
		ollieWaitFor(t, what, func() bool { return strings.Contains(screen.String(), what) })
	}
	shows("ollie:/% ")
	tty.WriteString("cd session/s/agent/helper\r")
	shows("ollie:/session/s/agent/helper% ")
	tty.WriteString("chat\r")
	shows("agent helper in session s")
	shows("› ")
	tty.WriteString("say hello\r")
	shows("hello from the shell's chat")
	shows("── idle")
	tty.WriteString("/exit\r")
	// The shell has the terminal back: what is typed next reaches it.
	ollieWaitFor(t, "the shell's prompt after the chat", func() bool {
		s := screen.String()
		i := strings.LastIndex(s, "/exit")
		return i >= 0 && strings.Contains(s[i:], "ollie:/session/s/agent/helper% ")
	})
	tty.WriteString("cat name\r")
	shows("helper\r\n")
	tty.WriteString("exit\r")
	if status := ollieWait(t, cmd); status != 0 {
		t.Errorf("shell exited %d; screen:\n%s", status, screen.String())
	}
}
