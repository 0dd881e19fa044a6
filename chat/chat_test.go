package chat

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/host"
	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/ns/client"

	"github.com/creack/pty"
)

// chatLab is a daemon whose model is the scripted one, and a directory
// to start chats in.
type chatLab struct {
	d   *host.Daemon
	llm *fakellm.Server
	dir string
}

func newChatLab(t testing.TB, withModel bool) *chatLab {
	t.Helper()
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo.", "readOnly": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\necho \"echo got $(cat)\"\n"), 0755)
	os.WriteFile(filepath.Join(tools, "climb.meta"), []byte(`{"description": "Needs approval.", "elevated": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "climb"), []byte("#!/bin/sh\necho climbed\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	l := &chatLab{dir: filepath.Join(t.TempDir(), "my project")}
	os.MkdirAll(l.dir, 0755)
	if withModel {
		l.llm = fakellm.Start(t)
	}
	d, err := host.Start(host.Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: l.registry(t),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	l.d = d
	return l
}

// registry is the lab's model backends: the scripted model, or none that
// answers.
func (l *chatLab) registry(t testing.TB) *backend.Registry {
	env := map[string]string{}
	if l.llm != nil {
		env = map[string]string{"OPENAI_BASE_URL": l.llm.URL + "/v1", "OPENAI_API_KEY": "k", "OPENAI_MODEL": "fake-model"}
	}
	reg, err := backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func (l *chatLab) options(path string) Options {
	sock := l.d.Socket // the same for a daemon restarted in the same directory
	return Options{Path: path, Cwd: l.dir, Dial: func() (*client.Conn, error) { return client.DialAs(sock, "") }}
}

// run runs a chat with the script as its standard input.
func (l *chatLab) run(t *testing.T, opt Options, script string) (stdout, stderr string, status int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status = Run(ctx, opt, strings.NewReader(script), &out, &errb)
	return out.String(), errb.String(), status
}

// A chat without a terminal: each line of its input is a prompt, whose
// reply streams, whose tool calls show one line each, and whose end says
// so; coming back shows the last turns.
func TestChatScript(t *testing.T) {
	l := newChatLab(t, true)
	l.llm.Push(fakellm.ToolCall("echo", `{"text": "x"}`), fakellm.Text("All **done**", ", friend."))
	l.llm.Push(fakellm.Text("second reply"))
	out, errs, status := l.run(t, l.options(""), "ping-one\nping-two \\\nand more\n")
	if status != 0 || errs != "" {
		t.Fatalf("status %d, stderr %q", status, errs)
	}
	for _, want := range []string{
		"ollie chat: agent chat in session my-project on this host",
		"→ echo {\"text\":\"x\"}",
		"← echo: ",
		"All **done**, friend.",
		"second reply",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "── idle"); n != 2 {
		t.Errorf("%d turn ends shown, want 2:\n%s", n, out)
	}
	if strings.Contains(out, "ping-one") {
		t.Errorf("our own prompt was echoed back:\n%s", out)
	}
	// The second prompt was one, joined by the trailing backslash.
	reqs := l.llm.ChatRequests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Text(); got != "ping-two \nand more" {
		t.Errorf("the joined prompt reached the model as %q", got)
	}

	// /expand shows a call's whole output, from the turn that made it.
	l.llm.Push(fakellm.ToolCall("echo", `{"text": "whole"}`), fakellm.Text("ok"))
	out, _, _ = l.run(t, l.options(""), "again\n/expand 1\n")
	if !strings.Contains(out, "── 1. echo") || !strings.Contains(out, `echo got {"text":"whole"}`) {
		t.Errorf("/expand 1:\n%s", out)
	}

	// Coming back: the last turns, then nothing new.
	out, _, status = l.run(t, l.options(""), "")
	if status != 0 || !strings.Contains(out, "› ping-one") || !strings.Contains(out, "second reply") || !strings.Contains(out, "→ echo") || !strings.Contains(out, "› again") {
		t.Errorf("coming back, status %d:\n%s", status, out)
	}
}

// Bad input gets one line saying what to do, and no session or agent is
// made for it.
func TestChatBadInput(t *testing.T) {
	l := newChatLab(t, true)
	_, errs, status := l.run(t, l.options("session/nope/agent/none"), "")
	if status != 1 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no agent at session/nope/agent/none") {
		t.Errorf("unknown agent: status %d, stderr %q", status, errs)
	}
	_, errs, status = l.run(t, l.options("not/an/agent/path/at/all"), "")
	if status != 1 || !strings.Contains(errs, "is not an agent's path") {
		t.Errorf("a bad path: status %d, stderr %q", status, errs)
	}
	opt := l.options("")
	opt.Model = "no-such-model"
	_, errs, status = l.run(t, opt, "")
	if status != 1 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no-such-model") {
		t.Errorf("an unknown model: status %d, stderr %q", status, errs)
	}

	none := newChatLab(t, false)
	_, errs, status = none.run(t, none.options(""), "hello\n")
	if status != 1 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no model answers on this host") {
		t.Errorf("no model: status %d, stderr %q", status, errs)
	}
	c, _ := client.DialAs(none.d.Socket, "")
	defer c.Close()
	if idx, _ := c.ReadAll(context.Background(), "session/idx"); len(idx) != 0 {
		t.Errorf("a session was made on a host with no model: %q", idx)
	}
}

// screen is what a pty's other end has shown, read as it comes.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the screen shows want n times in all.
func (s *screen) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	await.Until(t, 20*time.Second, fmt.Sprintf("the screen to show %q %d times", want, n),
		func() bool { return strings.Count(s.String(), want) >= n },
		func() string { return "it shows:\n" + s.String() })
}

// onPty runs a chat on a terminal: a pty whose other end the test types
// into and reads.
func (l *chatLab) onPty(t testing.TB, opt Options, scr io.Writer) (keys io.Writer, done chan int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 100})
	go io.Copy(scr, ptmx)
	done = make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- Run(ctx, opt, tty, tty, scr)
	}()
	t.Cleanup(func() {
		cancel()
		ptmx.Close()
		tty.Close()
	})
	return ptmx, done
}

// A whole conversation on a terminal: the reply streams, a tool call is a
// line, the turn's end shows, ^C stops a turn and ^C twice at the prompt
// leaves; coming back shows the last turns.
func TestChatTerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	l := newChatLab(t, true)
	l.llm.Push(fakellm.ToolCall("echo", `{"text": "x"}`), fakellm.Text("first ", "answer"))
	scr := &screen{}
	keys, done := l.onPty(t, l.options(""), scr)
	scr.waitFor(t, "› ", 1)
	io.WriteString(keys, "hello there\r")
	scr.waitFor(t, "first answer", 1)
	scr.waitFor(t, "── idle", 1)
	if !strings.Contains(scr.String(), "→ echo") {
		t.Errorf("no tool call line:\n%s", scr.String())
	}

	// A call that needs approval is asked in place; y runs it.
	l.llm.Push(fakellm.ToolCall("climb", `{}`), fakellm.Text("climbed it"))
	scr.waitFor(t, "› ", 2)
	io.WriteString(keys, "go up\r")
	scr.waitFor(t, "approve? [y]es, [a]lways, [n]o: ", 1)
	if !strings.Contains(scr.String(), "tool:     climb") {
		t.Errorf("the approval does not name the tool:\n%s", scr.String())
	}
	// Issue 31: the request names this host, and the chat asks y/a/n
	// itself, not "write … to this file".
	if s := scr.String(); !strings.Contains(s, "ollie: this host asks to run outside its sandbox") || strings.Contains(s, "(unknown host)") || strings.Contains(s, "to this file") {
		t.Errorf("the in-place approval names no host or tells the person to write to a file:\n%s", s)
	}
	io.WriteString(keys, "y\r")
	scr.waitFor(t, "← climb: climbed", 1)
	scr.waitFor(t, "── idle", 2)

	// ^C stops a turn that hangs.
	l.llm.Push(fakellm.Response{Text: []string{"thinking hard"}, Hang: true})
	scr.waitFor(t, "› ", 3)
	io.WriteString(keys, "take your time\r")
	scr.waitFor(t, "thinking hard", 1)
	io.WriteString(keys, "\x03")
	scr.waitFor(t, "[stopping the turn", 1)
	scr.waitFor(t, "── idle", 3)

	// A paste is one prompt, sent with the Enter after it.
	l.llm.Push(fakellm.Text("got both lines"))
	scr.waitFor(t, "› ", 4)
	io.WriteString(keys, "\x1b[200~first pasted line\rsecond pasted line\x1b[201~\r")
	scr.waitFor(t, "got both lines", 1)
	scr.waitFor(t, "── idle", 4)
	reqs := l.llm.ChatRequests()
	last := reqs[len(reqs)-1].Messages
	if got := last[len(last)-1].Text(); got != "first pasted line\nsecond pasted line" {
		t.Errorf("the paste reached the model as %q", got)
	}

	// ^C twice at an empty prompt leaves.
	scr.waitFor(t, "› ", 5)
	io.WriteString(keys, "\x03")
	scr.waitFor(t, "^C again, or ^D, to leave", 1)
	io.WriteString(keys, "\x03")
	select {
	case status := <-done:
		if status != 0 {
			t.Errorf("left with status %d", status)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("^C twice did not leave:\n%s", scr.String())
	}

	// The history is the agent's, in the state directory.
	c, err := client.DialAs(l.d.Socket, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, _ := c.ReadAll(context.Background(), "session/my-project/agent/chat/id")
	path, err := HistoryPath(strings.TrimSpace(string(id)))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "hello there\n") || !strings.Contains(string(b), "take your time\n") {
		t.Errorf("history %s: %q %v", path, b, err)
	}

	// Coming back shows the last turns.
	scr2 := &screen{}
	l.onPty(t, l.options(""), scr2)
	scr2.waitFor(t, "earlier messages; the last turns:]", 1)
	scr2.waitFor(t, "› first pasted line", 1)
	scr2.waitFor(t, "got both lines", 1)
}

// A chat outlives a restart of olliesrv: it says so, follows the restored
// agent again, and the next prompt goes through. Two people on one agent
// each see what the other asked.
func TestChatRestartAndTwoPeople(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	l := newChatLab(t, true)
	state := t.TempDir()
	restart := func() {
		t.Helper()
		l.d.Shutdown(context.Background())
		reg := l.registry(t)
		d, err := host.Start(host.Config{StateDir: state, Dir: filepath.Dir(l.d.Socket), Registry: reg,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Shutdown(context.Background()) })
		l.d = d
	}
	restart() // a daemon with a state directory of the test's own

	a, b := &screen{}, &screen{}
	keysA, _ := l.onPty(t, l.options(""), a)
	keysB, _ := l.onPty(t, l.options(""), b)
	a.waitFor(t, "› ", 1)
	b.waitFor(t, "› ", 1)
	l.llm.Push(fakellm.Text("answer for a"))
	io.WriteString(keysA, "question from a\r")
	a.waitFor(t, "answer for a", 1)
	b.waitFor(t, "question from a", 1)
	b.waitFor(t, "answer for a", 1)

	restart()
	a.waitFor(t, "[olliesrv restarted; following the agent again]", 1)
	l.llm.Push(fakellm.Text("after the restart"))
	io.WriteString(keysB, "question from b\r")
	b.waitFor(t, "after the restart", 1)
	b.waitFor(t, "── idle", 1)
	a.waitFor(t, "question from b", 1)
}

// The / commands, from a script.
func TestChatCommands(t *testing.T) {
	l := newChatLab(t, true)
	l.llm.Push(fakellm.Text("a reply"))
	out, errs, status := l.run(t, l.options(""), "hello\n/stats\n/model\n/plan\n/profile\n/expand\n/nope\n/help\n/exit\nnever sent\n")
	if status != 0 || errs != "" {
		t.Fatalf("status %d, stderr %q", status, errs)
	}
	for _, want := range []string{
		"1 turn · ",                      // /stats
		"(the backend's default)",        // /model
		"(no plan)",                      // /plan
		"default",                        // /profile
		"(the last turn called no tool)", // /expand
		"[unknown command /nope; /help lists them]",
		"/expand [N]", // /help
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "never sent") || len(l.llm.ChatRequests()) != 1 {
		t.Errorf("a prompt after /exit was sent: %d requests\n%s", len(l.llm.ChatRequests()), out)
	}
}

// On a terminal a finished reply with markdown is drawn again, rendered;
// with NO_COLOR (and without a terminal, TestChatScript) it stays as
// written.
func TestChatRendersMarkdown(t *testing.T) {
	l := newChatLab(t, true)
	reply := "# Findings\n\nThe disk is **nearly full**: clean `/var/log`.\n"
	for _, noColor := range []string{"", "1"} {
		t.Setenv("NO_COLOR", noColor)
		t.Setenv("TERM", "xterm-256color")
		l.llm.Push(fakellm.Text(reply))
		scr := &screen{}
		keys, _ := l.onPty(t, l.options(""), scr)
		scr.waitFor(t, "› ", 1)
		io.WriteString(keys, "how is the disk?\r")
		scr.waitFor(t, "── idle", 1)
		out := scr.String()
		tail := out[strings.LastIndex(out, "how is the disk?"):]
		// The rendered reply is drawn after the streamed one.
		rendered := tail[strings.LastIndex(tail, "Findings"):]
		if noColor == "" {
			if strings.Contains(rendered, "**nearly full**") || strings.Contains(rendered, "# Findings") || !strings.Contains(rendered, "nearly full") || !strings.Contains(rendered, "\x1b[") {
				t.Errorf("on a terminal the reply was not rendered:\n%q", tail)
			}
		} else if !strings.Contains(tail, "# Findings") || !strings.Contains(tail, "**nearly full**") || strings.Contains(tail, "\x1b[1m") {
			t.Errorf("with NO_COLOR the reply was not as written:\n%q", tail)
		}
		io.WriteString(keys, "/exit\r")
	}
}

// slowOnce is a standard output that takes its time over the first write
// holding a mark, as a slow terminal or link does.
type slowOnce struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	mark string
	done bool
}

func (w *slowOnce) Write(p []byte) (int, error) {
	w.mu.Lock()
	slow := !w.done && bytes.Contains(p, []byte(w.mark))
	w.done = w.done || slow
	w.mu.Unlock()
	if slow {
		// The pause is the point: the slow terminal under test.
		await.For(context.Background(), 500*time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// A turn's end line comes after the whole reply, however far the stream
// lags behind the agent's state: the reply is never drawn after the
// line that says the turn is over.
func TestChatTurnEndsAfterItsReply(t *testing.T) {
	l := newChatLab(t, true)
	l.llm.Push(fakellm.ToolCall("echo", `{"text": "x"}`), fakellm.Text("the reply after the tool"))
	out := &slowOnce{mark: "→ echo"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errb bytes.Buffer
	if status := Run(ctx, l.options(""), strings.NewReader("go\n"), out, &errb); status != 0 {
		t.Fatalf("status %d, stderr %q", status, errb.String())
	}
	s := out.buf.String()
	reply, end := strings.Index(s, "the reply after the tool"), strings.Index(s, "── idle")
	if reply < 0 || end < 0 || end < reply {
		t.Errorf("the turn's end line is not after its reply:\n%s", s)
	}
}

// TestChatRedrawOnScreen (issue 31): on a real pty, as a person sees the
// screen, a finished reply with markdown is replaced by its rendered form
// whole (the raw first line gone too, a one-line reply as well), and a
// reply without markdown stays as written; for replies of 1, 2 and 30
// lines.
func TestChatRedrawOnScreen(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "xterm-256color")
	for _, n := range []int{1, 2, 30} {
		for _, md := range []bool{true, false} {
			l := newChatLab(t, true) // a chat of its own: no earlier turns shown
			var lines []string
			for k := 1; k <= n; k++ {
				if md {
					lines = append(lines, fmt.Sprintf("- row %d has **bold %d**", k, k))
				} else {
					lines = append(lines, fmt.Sprintf("row %d is plain", k))
				}
			}
			l.llm.Push(fakellm.Text(strings.Join(lines, "\n")))
			scr := &screen{}
			keys, _ := l.onPty(t, l.options(""), scr)
			scr.waitFor(t, "› ", 1)
			io.WriteString(keys, "show me\r")
			scr.waitFor(t, "── idle", 1)
			scr.waitFor(t, "› ", 2)
			shown := vtScreen(scr.String(), 40, 100)
			text := strings.Join(shown, "\n")
			for k := 1; k <= n; k++ {
				want := fmt.Sprintf("row %d is plain", k)
				if md {
					want = fmt.Sprintf("row %d has bold %d", k, k)
				}
				if c := strings.Count(text, want); c != 1 {
					t.Errorf("%d lines, markdown %v: %q is on the screen %d times, want once:\n%s", n, md, want, c, text)
				}
			}
			if md && strings.Contains(text, "**") {
				t.Errorf("%d lines: the raw reply is still on the screen:\n%s", n, text)
			}
			io.WriteString(keys, "/exit\r")
		}
	}
}
