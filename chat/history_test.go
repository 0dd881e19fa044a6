package chat

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/term"
)

func historyFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "state", "ollie", "chat", "a.history")
}

func entries(h *History) []string {
	var all []string
	for i := h.Len() - 1; i >= 0; i-- {
		all = append(all, h.At(i))
	}
	return all
}

func checkEntries(t *testing.T, h *History, want ...string) {
	t.Helper()
	if got := entries(h); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("entries, oldest first = %q, want %q", got, want)
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	path := historyFile(t)
	h, err := OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"one", "two\nlines", `back\slash \n not a newline\`, "\\\n\\\\n", " padded "}
	for _, e := range want {
		h.Add(e)
	}
	h.Add("")
	h.Add(" \n\t")
	checkEntries(t, h, want...)
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != len(want) {
		t.Errorf("file has %d lines, want one an entry:\n%s", n, data)
	}
	h, err = OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, h, want...)
	if h.At(0) != want[len(want)-1] {
		t.Errorf("At(0) = %q, want the most recent", h.At(0))
	}
}

func TestHistoryDedupe(t *testing.T) {
	path := historyFile(t)
	h, err := OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"a", "a", "b", "a", "a"} {
		h.Add(e)
	}
	checkEntries(t, h, "a", "b", "a")
	h, err = OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Add("a") // the most recent, read back from the file
	checkEntries(t, h, "a", "b", "a")
}

func TestHistoryBound(t *testing.T) {
	path := historyFile(t)
	h, err := OpenHistory(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		h.Add(strings.Repeat("x", i+1))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n > 2*3 {
			t.Fatalf("after %d entries the file has %d lines, over twice the bound", i+1, n)
		}
	}
	checkEntries(t, h, "xxxxxxxx", "xxxxxxxxx", "xxxxxxxxxx")
	h, err = OpenHistory(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, h, "xxxxxxxx", "xxxxxxxxx", "xxxxxxxxxx")
	h, err = OpenHistory(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, h, "xxxxxxxxx", "xxxxxxxxxx")
	// The rewrite leaves no temporary file behind.
	if des, _ := os.ReadDir(filepath.Dir(path)); len(des) != 1 {
		t.Errorf("history directory holds %d files, want 1", len(des))
	}
}

func TestHistoryModes(t *testing.T) {
	path := historyFile(t)
	h, err := OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("OpenHistory created the file: %v", err)
	}
	h.Add("secret-ish prompt")
	for p, want := range map[string]os.FileMode{path: 0600, filepath.Dir(path): 0700, filepath.Dir(filepath.Dir(path)): 0700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
}

func TestHistoryBadFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"bad escape":         "fine\nbad \\q escape\n",
		"trailing backslash": "fine\nends in \\\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".history")
		if err := os.WriteFile(path, []byte(content), 0600); err != nil {
			t.Fatal(err)
		}
		h, err := OpenHistory(path, 0)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: OpenHistory = %v, %v; want an error naming %s line 2", name, h, err, path)
		}
	}
	// A directory where the file should be cannot be read.
	path := filepath.Join(dir, "dir.history")
	if err := os.Mkdir(path, 0700); err != nil {
		t.Fatal(err)
	}
	if h, err := OpenHistory(path, 0); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("OpenHistory(directory) = %v, %v; want an error naming %s", h, err, path)
	}
}

// TestHistoryCutShort: a line a crash cut short (no newline) is kept, and
// the next entry starts a line of its own.
func TestHistoryCutShort(t *testing.T) {
	path := historyFile(t)
	os.MkdirAll(filepath.Dir(path), 0700)
	if err := os.WriteFile(path, []byte("one\ntw"), 0600); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Add("three")
	if data, _ := os.ReadFile(path); string(data) != "one\ntw\nthree\n" {
		t.Errorf("file = %q", data)
	}
	checkEntries(t, h, "one", "tw", "three")
}

// TestHistoryWriteFails: an entry the file cannot take stays in memory
// and the failure is reported once, naming the path.
func TestHistoryWriteFails(t *testing.T) {
	path := historyFile(t)
	h, err := OpenHistory(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Where the directory should be, a regular file.
	parent := filepath.Dir(filepath.Dir(path))
	os.MkdirAll(filepath.Dir(parent), 0700)
	if err := os.WriteFile(parent, nil, 0600); err != nil {
		t.Fatal(err)
	}
	h.Add("kept")
	h.Add("also kept")
	checkEntries(t, h, "kept", "also kept")
	if err := h.Err(); err == nil || !strings.Contains(err.Error(), parent) {
		t.Errorf("Err() = %v, want a failure naming %s", err, parent)
	}
}

func TestHistoryZero(t *testing.T) {
	var h History
	for i := range DefaultHistoryMax + 5 {
		h.Add(strings.Repeat("y", i%7+1) + string(rune('a'+i%26)))
	}
	if h.Len() != DefaultHistoryMax || h.Err() != nil {
		t.Errorf("zero History: Len %d, Err %v", h.Len(), h.Err())
	}
	defer func() {
		if recover() == nil {
			t.Error("At(Len()) did not panic")
		}
	}()
	h.At(h.Len())
}

func TestHistoryPath(t *testing.T) {
	const id = "0b7a3c1e-58a4-4d4c-9f0e-3f1c2a9d8b7e"
	t.Setenv("XDG_STATE_HOME", "/state")
	if p, err := HistoryPath(id); err != nil || p != "/state/ollie/chat/"+id+".history" {
		t.Errorf("HistoryPath with XDG_STATE_HOME = %q, %v", p, err)
	}
	t.Setenv("HOME", "/home/u")
	for _, xdg := range []string{"", "relative/state"} {
		t.Setenv("XDG_STATE_HOME", xdg)
		if p, err := HistoryPath(id); err != nil || p != "/home/u/.local/state/ollie/chat/"+id+".history" {
			t.Errorf("HistoryPath with XDG_STATE_HOME=%q = %q, %v", xdg, p, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../../.bashrc", `a\b`, "a\x00b", "x\n", strings.Repeat("x", 250)} {
		if p, err := HistoryPath(bad); err == nil {
			t.Errorf("HistoryPath(%q) = %q, want an error", bad, p)
		}
	}
}

// TestHistoryTerminal: a term.Terminal records the lines it reads in a
// History and recalls them with the up arrow.
func TestHistoryTerminal(t *testing.T) {
	h, err := OpenHistory(historyFile(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	in := strings.NewReader("first line\rsecond\r\x1b[A\x1b[A\r")
	tm := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{in, io.Discard}, "> ")
	tm.History = h
	var got []string
	for {
		line, err := tm.ReadLine()
		if err != nil {
			break
		}
		got = append(got, line)
	}
	if want := []string{"first line", "second", "first line"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines read = %q, want %q", got, want)
	}
	checkEntries(t, h, "first line", "second", "first line")
}

// FuzzHistoryEntry: any entry is written on one line and read back as it
// was; a line that decodes is one that encoding gives back.
func FuzzHistoryEntry(f *testing.F) {
	for _, s := range []string{"", "a", "two\nlines", `back\slash`, "\\n", "\\\n", "\r\n\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		line := escapeHistory(s)
		if strings.Contains(line, "\n") {
			t.Fatalf("escapeHistory(%q) = %q holds a newline", s, line)
		}
		if back, ok := unescapeHistory(line); !ok || back != s {
			t.Fatalf("unescapeHistory(escapeHistory(%q)) = %q, %v", s, back, ok)
		}
		if e, ok := unescapeHistory(s); ok && !strings.Contains(s, "\n") && escapeHistory(e) != s {
			t.Fatalf("escapeHistory(unescapeHistory(%q)) = %q", s, escapeHistory(e))
		}
	})
}
