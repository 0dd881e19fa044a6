package desktop

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/creack/pty"

	"ollie/broker"
)

func TestAuto(t *testing.T) {
	dir := t.TempDir()
	zenity := scriptFile(t, dir, "zenity", "exit 0")
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	notTTY, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer notTTY.Close()

	for _, tc := range []struct {
		name                      string
		ollie, ssh, display, path string
		in                        *os.File
		want                      string
	}{
		{"OLLIE_ASKPASS first", "/opt/my-askpass", "/usr/bin/ssh-askpass", ":0", dir, tty, "askpass /opt/my-askpass"},
		{"OLLIE_ASKPASS without a display", "/opt/my-askpass", "", "", "", nil, "askpass /opt/my-askpass"},
		{"SSH_ASKPASS with a display", "", "/usr/bin/ssh-askpass", ":0", dir, tty, "askpass /usr/bin/ssh-askpass"},
		{"SSH_ASKPASS without a display", "", "/usr/bin/ssh-askpass", "", dir, tty, "terminal " + tty.Name()},
		{"a dialog", "", "", ":0", dir, tty, "dialog " + zenity + " with desktop notifications"},
		{"a display but no dialog", "", "", ":0", t.TempDir(), tty, "terminal " + tty.Name()},
		{"no display, no terminal", "", "", "", dir, notTTY, "nobody (every request denied: " + NoApproverReason + ")"},
		{"nothing at all", "", "", "", dir, nil, "nobody (every request denied: " + NoApproverReason + ")"},
	} {
		t.Setenv("OLLIE_ASKPASS", tc.ollie)
		t.Setenv("SSH_ASKPASS", tc.ssh)
		t.Setenv("DISPLAY", tc.display)
		t.Setenv("WAYLAND_DISPLAY", "")
		t.Setenv("PATH", tc.path)
		if got := Describe(Auto(tc.in, io.Discard)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	q := &Queue{Approver: Nobody{Reason: "r"}}
	if got := Describe(q); !strings.HasPrefix(got, "nobody") || !strings.Contains(got, "at most 16 waiting per host and 8 per session") {
		t.Errorf("Describe(queue) = %q", got)
	}
}

func TestNobody(t *testing.T) {
	t.Setenv("OLLIE_ASKPASS", "")
	t.Setenv("SSH_ASKPASS", "")
	t.Setenv("DISPLAY", "")
	t.Setenv("WAYLAND_DISPLAY", "")
	a := Auto(nil, io.Discard)
	ans, err := a.Approve(context.Background(), askRequest(true))
	if err != nil || ans.Decision != broker.Deny || ans.Reason != NoApproverReason {
		t.Errorf("Approve: %+v, %v; want a denial saying how to fix it", ans, err)
	}
	pw, err := a.Password(context.Background(), askRequest(true), 1, "")
	if !errors.Is(err, broker.ErrDenied) || pw != nil || !strings.Contains(err.Error(), "OLLIE_ASKPASS") {
		t.Errorf("Password: %q, %v; want ErrDenied saying how to fix it", pw, err)
	}
}

// TestAutoAskpassEndToEnd runs what Auto picks for OLLIE_ASKPASS behind a
// Queue: an askpass that says "always", then the password.
func TestAutoAskpassEndToEnd(t *testing.T) {
	dir := t.TempDir()
	prog := scriptFile(t, dir, "ollie-askpass", `
if [ "$SSH_ASKPASS_PROMPT" = confirm ]; then echo always; exit 0; fi
echo 'pw from askpass'
`)
	t.Setenv("OLLIE_ASKPASS", prog)
	q := &Queue{Approver: Auto(nil, io.Discard)}
	ans, err := q.Approve(context.Background(), askRequest(true))
	if err != nil || ans.Decision != broker.Always {
		t.Fatalf("%+v, %v; want always", ans, err)
	}
	pw, err := q.Password(context.Background(), askRequest(true), 1, "")
	if err != nil || string(pw) != "pw from askpass" {
		t.Fatalf("%q, %v", pw, err)
	}
}
