package shell

import (
	"context"
	"errors"
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

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"ollie/ns"
	"ollie/ns/nsdir"
)

// What a compromised host's olliesrv serves (issue 11): names, owners,
// error text and content that carry escape sequences (a redrawn screen,
// the title, the clipboard), an 8-bit CSI, a bidi override and newlines
// that forge lines of their own.
var (
	hostileNames = []string{
		"ok\x1b[2J\x1b[H",
		"h5: up (all good)\nfake",
		"\u009b31mred",
		"txt.\u202eexe",
		"bell\a\b\x7f",
	}
	hostileContent = "line one\n\x1b]52;c;Y3VybCBldmlsfHNo\x07\tkept tab\n\x1b]0;title\x1b\\\u009b2J\xff\xfeend\n"
	hostileError   = "no good\x1b[2K\r\x1b]0;pwned\a\nollie: all fine"
)

// newHostileNS serves those on a Unix socket in a fresh $NAMESPACE.
func newHostileNS(t *testing.T) {
	t.Helper()
	var entries []ns.Entry
	for i, name := range hostileNames {
		entries = append(entries, ns.Entry{Name: name, Key: fmt.Sprint(i)})
	}
	each := &ns.Each{
		List: func(ctx context.Context, c *ns.Call) ([]ns.Entry, error) { return entries, nil },
		Lookup: func(ctx context.Context, c *ns.Call, name string) (ns.Entry, bool) {
			for _, e := range entries {
				if e.Name == name || e.Key == name {
					return e, true
				}
			}
			return ns.Entry{}, false
		},
	}
	root := ns.Dir("", 0555, "",
		ns.Dir("evil", 0555, "Hostile names.",
			ns.Dynamic("n", 0555, "A hostile name.", each),
		),
		ns.ReadFile("content", 0444, "Hostile content.", func(context.Context, *ns.Call) ([]byte, error) {
			return []byte(hostileContent), nil
		}),
		ns.ReadFile("fail", 0444, "A hostile error.", func(context.Context, *ns.Call) ([]byte, error) {
			return nil, errors.New(hostileError)
		}),
		ns.RdWrFile("reply", 0666, "Hostile replies.", func(context.Context, *ns.Call, []byte) ([]byte, error) {
			return []byte(hostileContent), nil
		}),
	)
	tree, err := ns.NewTree(root, "own\x1b[8mer", "grp\u009b1A")
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	dir, err := os.MkdirTemp("", "ollie")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("NAMESPACE", dir)
	t.Setenv("OLLIE_UNAME", "")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, nsdir.Service), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeUnix(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
}

// controlIn says what in s a terminal would act on rather than show, or
// "". keep lists the controls allowed ("\n" between lines, "\t" in
// content).
func controlIn(s, keep string) string {
	if !utf8.ValidString(s) {
		return fmt.Sprintf("bytes that are not UTF-8 in %q", s)
	}
	for i, r := range s {
		switch {
		case strings.ContainsRune(keep, r):
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return fmt.Sprintf("control %U at byte %d of %q", r, i, s)
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return fmt.Sprintf("bidi control %U at byte %d of %q", r, i, s)
		}
	}
	return ""
}

// TestOllieHostileNames: ls, ls -l and stat show a server's names, owners
// and groups one line each, with no control character, piped or not; an
// error's text is one line too.
func TestOllieHostileNames(t *testing.T) {
	newHostileNS(t)
	out, errs, status := ollieRun("", "ls", "/evil")
	if status != 0 {
		t.Fatalf("ls: %d %s", status, errs)
	}
	if p := controlIn(out, "\n"); p != "" {
		t.Errorf("ls: %s", p)
	}
	if n := strings.Count(out, "\n"); n != len(hostileNames) {
		t.Errorf("ls printed %d lines for %d names:\n%s", n, len(hostileNames), out)
	}
	if !strings.Contains(out, `ok\x1b[2J\x1b[H/`) || !strings.Contains(out, `h5: up (all good)\nfake/`) || !strings.Contains(out, `\u009b31mred/`) {
		t.Errorf("ls does not show the names escaped:\n%s", out)
	}

	out, errs, status = ollieRun("", "ls", "-l", "/evil")
	if status != 0 {
		t.Fatalf("ls -l: %d %s", status, errs)
	}
	if p := controlIn(out, "\n"); p != "" {
		t.Errorf("ls -l: %s", p)
	}
	if n := strings.Count(out, "\n"); n != len(hostileNames) || !strings.Contains(out, `own\x1b[8mer grp\u009b1A`) {
		t.Errorf("ls -l:\n%s", out)
	}

	out, errs, status = ollieRun("", "stat", "/evil/"+hostileNames[1])
	if status != 0 {
		t.Fatalf("stat: %d %s", status, errs)
	}
	if p := controlIn(out, "\n"); p != "" {
		t.Errorf("stat: %s", p)
	}
	if n := strings.Count(out, "\n"); n != 9 {
		t.Errorf("stat printed %d lines, want 9:\n%s", n, out)
	}

	for _, args := range [][]string{{"read", "/fail"}, {"ls", "/evil/" + hostileNames[0] + "/none"}} {
		_, errs, status = ollieRun("", args...)
		if status != ollieExitFailed {
			t.Errorf("%v: status %d", args, status)
		}
		if p := controlIn(errs, "\n"); p != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: the error is not one safe line (%s):\n%s", args, p, errs)
		}
	}

	// The shell shows them the same way, and its errors.
	out, errs, _ = ollieRun("ls /evil\nstat /evil/" + hostileNames[0] + "\ncat /fail\n")
	if p := controlIn(out+errs, "\n"); p != "" {
		t.Errorf("shell: %s\n%s%s", p, out, errs)
	}
	if !strings.Contains(errs, `no good\x1b[2K\r\x1b]0;pwned\a\nollie: all fine`) {
		t.Errorf("shell: the error is not shown escaped:\n%s", errs)
	}
}

// TestOllieHostileContentPiped: piped, content is passed on byte for byte,
// so that scripts get what the file holds.
func TestOllieHostileContentPiped(t *testing.T) {
	newHostileNS(t)
	for _, args := range [][]string{{"read", "/content"}, {"rdwr", "/reply"}} {
		out, errs, status := ollieRun("x", args...)
		if status != 0 || out != hostileContent {
			t.Errorf("%v: %d %q %s, want the bytes as they are", args, status, out, errs)
		}
	}
}

// TestOllieHostileContentTerminal: on a terminal, read, rdwr and the
// shell's cat show content with its controls made visible, newlines and
// tabs kept.
func TestOllieHostileContentTerminal(t *testing.T) {
	newHostileNS(t)
	want := `line one` + "\n" + `\x1b]52;c;Y3VybCBldmlsfHNo\a` + "\t" + `kept tab` + "\n" + `\x1b]0;title\x1b\\u009b2J\xff\xfeend` + "\n"
	for _, tc := range []struct {
		args  []string
		stdin string
	}{
		{[]string{"read", "/content"}, ""},
		{[]string{"rdwr", "/reply"}, "x"},
		{nil, "cat /content\nrdwr /reply x\n"}, // the shell's script mode
	} {
		master, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		// The line discipline's own "\r\n" aside, the screen is what ollie wrote.
		if err := rawOutput(tty); err != nil {
			t.Fatal(err)
		}
		screen := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(master)
			screen <- string(b)
		}()
		var errb strings.Builder
		status := Run(tc.args, strings.NewReader(tc.stdin), tty, &errb)
		tty.Close()
		s := <-screen
		master.Close()
		if status != 0 {
			t.Errorf("%v: status %d: %s", tc.args, status, errb.String())
		}
		if p := controlIn(s, "\n\t"); p != "" {
			t.Errorf("%v on a terminal: %s", tc.args, p)
		}
		if !strings.Contains(s, want) {
			t.Errorf("%v on a terminal shows %q, want %q", tc.args, s, want)
		}
	}
}

// rawOutput turns off the terminal's output processing, so that what is
// read from the pty is byte for byte what was written.
func rawOutput(tty *os.File) error {
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		return err
	}
	tio.Oflag &^= unix.OPOST
	return unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio)
}
