package desktop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"ollie/broker"
	tier "ollie/internal/lab"
)

// fakeDialog puts a zenity or kdialog on a fresh PATH that records its
// arguments and answers as the test says with setAnswer.
type fakeDialog struct {
	t    *testing.T
	dir  string
	path string
}

func newFakeDialog(t *testing.T, name string) *fakeDialog {
	dir := t.TempDir()
	f := &fakeDialog{t: t, dir: dir}
	f.path = scriptFile(t, dir, name, `
d="`+dir+`"
: > "$d/argv"
for a in "$@"; do printf '%s\0' "$a" >> "$d/argv"; done
[ -f "$d/print" ] && cat "$d/print"
exit "$(cat "$d/status")"
`)
	t.Setenv("PATH", dir+":/usr/bin:/bin")
	return f
}

// setAnswer makes the next dialog print out and exit with status.
func (f *fakeDialog) setAnswer(status, out string) {
	os.WriteFile(filepath.Join(f.dir, "status"), []byte(status), 0o644)
	os.WriteFile(filepath.Join(f.dir, "print"), []byte(out), 0o644)
}

func (f *fakeDialog) argv() []string {
	b, err := os.ReadFile(filepath.Join(f.dir, "argv"))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// after returns the argument that follows flag.
func after(argv []string, flag string) (string, bool) {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1], true
		}
	}
	return "", false
}

func hasArg(argv []string, flag string) bool {
	for _, a := range argv {
		if a == flag {
			return true
		}
	}
	return false
}

func TestDialogZenity(t *testing.T) {
	f := newFakeDialog(t, "zenity")
	d := &DialogApprover{Program: "zenity"}
	req := askRequest(true)
	req.Args = []byte(`{"lines":"<b>10</b> & more"}`)
	always := "Always (system_logs on db3)"
	// GTK takes "_" in a button's label for a mnemonic: the label doubles
	// it, and zenity prints the label as it was given.
	button := "Always (system__logs on db3)"
	for _, tc := range []struct {
		status, print string
		want          broker.Decision
	}{
		{"0", "", broker.Once},
		{"1", button + "\n", broker.Always},
		{"1", always + "\n", broker.Always},
		{"1", "", broker.Deny},                              // Deny, or the window closed
		{"5", "", broker.Deny},                              // timed out
		{"1", "Always (x on y)\n", broker.Deny},             // not this request's button
		{"0", always + "\n", broker.Once},                   // OK wins: exit 0 is the OK button
		{"255", "", broker.Deny},                            // zenity failed
		{"1", "Always (system_logs on db3)", broker.Always}, // no newline
	} {
		f.setAnswer(tc.status, tc.print)
		ans, err := d.Approve(context.Background(), req)
		if err != nil {
			t.Fatalf("status %s: %v", tc.status, err)
		}
		if ans.Decision != tc.want {
			t.Errorf("status %s printing %q: %q, want %q", tc.status, tc.print, ans.Decision, tc.want)
		}
	}
	argv := f.argv()
	if !hasArg(argv, "--question") || !hasArg(argv, "--no-markup") {
		t.Errorf("zenity %q: want --question --no-markup", argv)
	}
	if text, _ := after(argv, "--text"); text != req.Prompt() {
		t.Errorf("--text %q, want the prompt %q", text, req.Prompt())
	}
	for flag, want := range map[string]string{"--ok-label": "Approve once", "--cancel-label": "Deny", "--extra-button": button} {
		if got, _ := after(argv, flag); got != want {
			t.Errorf("%s %q, want %q", flag, got, want)
		}
	}

	f.setAnswer("0", "pass_word with spaces \n")
	req.Host = "db_3"
	pw, err := d.Password(context.Background(), req, 2, "wrong password")
	if err != nil || string(pw) != "pass_word with spaces " {
		t.Fatalf("password: %q, %v", pw, err)
	}
	argv = f.argv()
	if !hasArg(argv, "--entry") || !hasArg(argv, "--hide-text") {
		t.Errorf("zenity %q: want --entry --hide-text", argv)
	}
	if text, _ := after(argv, "--text"); text != strings.ReplaceAll(req.PasswordPrompt(2, "wrong password"), "_", "__") {
		t.Errorf("--text %q: want the prompt with its underscores doubled", text)
	}
	if got := zenityEntryText(`a\nb_c`); got != `a\\nb__c` {
		t.Errorf("zenityEntryText: %q", got)
	}
	f.setAnswer("1", "")
	if pw, err := d.Password(context.Background(), req, 1, ""); !errors.Is(err, broker.ErrDenied) || pw != nil {
		t.Errorf("cancelled password dialog: %q, %v; want ErrDenied", pw, err)
	}
}

func TestDialogKdialog(t *testing.T) {
	f := newFakeDialog(t, "kdialog")
	d := &DialogApprover{Program: f.path}
	req := askRequest(false)
	req.Cwd = "/srv/<img src=x>"
	for _, tc := range []struct {
		status string
		want   broker.Decision
	}{{"0", broker.Once}, {"1", broker.Always}, {"2", broker.Deny}} {
		f.setAnswer(tc.status, "")
		ans, err := d.Approve(context.Background(), req)
		if err != nil || ans.Decision != tc.want {
			t.Errorf("status %s: %+v, %v; want %q", tc.status, ans, err, tc.want)
		}
	}
	f.setAnswer("254", "")
	if _, err := d.Approve(context.Background(), req); err == nil {
		t.Error("kdialog's usage error (254) was taken for an answer")
	}
	argv := f.argv()
	text, ok := after(argv, "--warningyesnocancel")
	if !ok || strings.Contains(text, "<img") || !strings.Contains(text, "&lt;img src=x&gt;") {
		t.Errorf("--warningyesnocancel %q: want the prompt escaped as rich text", text)
	}
	for flag, want := range map[string]string{"--yes-label": "Approve once", "--no-label": "Always (system_logs on db3)", "--cancel-label": "Deny"} {
		if got, _ := after(argv, flag); got != want {
			t.Errorf("%s %q, want %q", flag, got, want)
		}
	}
	// Qt takes "&" in a button's label for an accelerator.
	req.Host = "r&d"
	f.setAnswer("0", "")
	d.Approve(context.Background(), req)
	if got, _ := after(f.argv(), "--no-label"); got != "Always (system_logs on r&&d)" {
		t.Errorf("--no-label %q, want the & doubled", got)
	}
	req.Host = "db3"

	f.setAnswer("0", "s3cret\n")
	pw, err := d.Password(context.Background(), req, 1, "")
	if err != nil || string(pw) != "s3cret" {
		t.Fatalf("password: %q, %v", pw, err)
	}
	if !hasArg(f.argv(), "--password") {
		t.Errorf("kdialog %q: want --password", f.argv())
	}
	f.setAnswer("1", "")
	if _, err := d.Password(context.Background(), req, 1, ""); !errors.Is(err, broker.ErrDenied) {
		t.Errorf("cancelled: %v, want ErrDenied", err)
	}

	if _, err := (&DialogApprover{Program: "xmessage"}).Approve(context.Background(), req); err == nil {
		t.Error("a dialog program that is neither zenity nor kdialog was run")
	}
}

func TestFindDialog(t *testing.T) {
	dir := t.TempDir()
	scriptFile(t, dir, "zenity", "exit 0")
	kd := scriptFile(t, dir, "kdialog", "exit 0")
	t.Setenv("PATH", dir)
	t.Setenv("WAYLAND_DISPLAY", "")
	t.Setenv("DISPLAY", "")
	if p := FindDialog(); p != "" {
		t.Errorf("no display: %q, want none", p)
	}
	t.Setenv("DISPLAY", ":0")
	t.Setenv("XDG_CURRENT_DESKTOP", "GNOME")
	if p := FindDialog(); p != filepath.Join(dir, "zenity") {
		t.Errorf("GNOME: %q, want zenity", p)
	}
	t.Setenv("XDG_CURRENT_DESKTOP", "KDE")
	if p := FindDialog(); p != kd {
		t.Errorf("KDE: %q, want kdialog", p)
	}
	os.Remove(kd)
	if p := FindDialog(); p != filepath.Join(dir, "zenity") {
		t.Errorf("KDE without kdialog: %q, want zenity", p)
	}
	t.Setenv("PATH", t.TempDir())
	if p := FindDialog(); p != "" {
		t.Errorf("neither installed: %q", p)
	}
}

// sessionBus starts a private dbus-daemon and a notification server on
// it that records what it is sent.
type notifyServer struct {
	mu     sync.Mutex
	notes  [][2]string // summary, body
	closed []uint32
	next   uint32
}

func (s *notifyServer) Notify(app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, timeout int32) (uint32, *dbus.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, [2]string{summary, body})
	s.next++
	return s.next, nil
}

func (s *notifyServer) CloseNotification(id uint32) *dbus.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = append(s.closed, id)
	return nil
}

func startSessionBus(t *testing.T) string {
	t.Helper()
	exe, err := exec.LookPath("dbus-daemon")
	tier.Need(t, err == nil, fmt.Sprintf("the notification test needs dbus-daemon (Debian package dbus-daemon, or dbus before Debian 12): %v", err))
	dir := t.TempDir()
	addr := "unix:path=" + filepath.Join(dir, "bus")
	cmd := exec.Command(exe, "--session", "--nofork", "--nopidfile", "--address="+addr, "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon did not start: %v", err)
	}
	return strings.TrimSpace(line)
}

func TestDialogNotifies(t *testing.T) {
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
	f.setAnswer("0", "")
	req := askRequest(true)
	req.Cwd = "/srv/<b>&"
	d := &DialogApprover{Program: f.path, Notifier: &Notifier{Address: addr}}
	if ans, err := d.Approve(context.Background(), req); err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v, %v", ans, err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.notes) != 1 {
		t.Fatalf("%d notifications, want 1", len(srv.notes))
	}
	if got, want := srv.notes[0][0], "ollie: db3 asks to run system_logs as root"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if body := srv.notes[0][1]; !strings.Contains(body, "in:       \"/srv/&lt;b&gt;&amp;\"\n") || !strings.Contains(body, "request:  req-1") {
		t.Errorf("body %q: want the prompt, escaped", body)
	}
	if len(srv.closed) != 1 || srv.closed[0] != 1 {
		t.Errorf("closed %v, want the notification taken away once answered", srv.closed)
	}
}

// TestDialogWithoutBus checks that the dialog opens without a session bus,
// with an address that refuses, and with a bus that never answers.
func TestDialogWithoutBus(t *testing.T) {
	f := newFakeDialog(t, "zenity")
	f.setAnswer("0", "")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	if _, err := (&Notifier{}).Notify(context.Background(), "s", "b"); !errors.Is(err, ErrNoSessionBus) {
		t.Errorf("no bus: %v, want ErrNoSessionBus", err)
	}

	// A socket that accepts and then says nothing.
	silent := filepath.Join(t.TempDir(), "silent")
	l, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	for _, n := range []*Notifier{
		{},
		{Address: "unix:path=" + filepath.Join(t.TempDir(), "nobody")},
		{Address: "unix:path=" + silent, Timeout: 200 * time.Millisecond},
	} {
		d := &DialogApprover{Program: f.path, Notifier: n}
		start := time.Now()
		ans, err := d.Approve(context.Background(), askRequest(true))
		if err != nil || ans.Decision != broker.Once {
			t.Errorf("bus %q: %+v, %v; want the dialog's answer", n.Address, ans, err)
		}
		// Not a timing assertion: a hang would be minutes.
		if time.Since(start) > 30*time.Second {
			t.Errorf("bus %q held the dialog up for %v", n.Address, time.Since(start))
		}
	}
}
