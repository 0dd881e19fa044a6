package chat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/term"

	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

// A History is what a term.Terminal's ReadLine records lines in.
var _ term.History = (*History)(nil)

// DefaultHistoryMax is how many entries a History keeps when OpenHistory
// is given no bound.
const DefaultHistoryMax = 1000

// maxHistoryEntry is the longest entry a History keeps, in bytes: the file
// is read whole at every start, so one large paste must not make it large.
const maxHistoryEntry = 64 << 10

// HistoryPath is where the history of agent id is kept:
// $XDG_STATE_HOME/ollie/chat/ID.history, XDG_STATE_HOME defaulting to
// ~/.local/state as the shell's own history does. The id comes from the
// namespace, which may be a remote host's, so an id that is not one plain
// file name (empty, ".", "..", a slash, a control character) is refused
// rather than allowed to name a file elsewhere.
func HistoryPath(agentID string) (string, error) {
	if !plainName(agentID) {
		return "", fmt.Errorf("chat: agent id %q is not a plain file name", agentID)
	}
	dir, err := paths.StateDir()
	if err != nil {
		return "", fmt.Errorf("chat: the history: %w", err)
	}
	return filepath.Join(dir, "chat", agentID+".history"), nil
}

// plainName reports whether id names one file of the directory it is
// joined to, and nothing else, also with ".history" appended: a request's
// ID, an agent's, which the host makes, kept from walking elsewhere
// ("../policy") or from reading as two words in the host's texts.
func plainName(id string) bool {
	return id != "" && id != "." && id != ".." &&
		!strings.ContainsAny(id, "/\\ \t\r\n()") &&
		termsafe.Safe(id, false) &&
		len(id)+len(".history") <= 255 // NAME_MAX
}

// A History is the line history of a chat with one agent, kept in a file
// so that it outlives the chat. It is the golang.org/x/term History that a
// Terminal's ReadLine adds each line to and recalls with the arrow keys.
//
// It never holds a sudo password, and must not: the chat reads passwords
// with echo off (Terminal.ReadPassword, which adds nothing to the history)
// and never passes one to Add. The file is created 0600 all the same, as
// a prompt can hold secrets too.
//
// The file holds one entry a line, oldest first, with a newline in an
// entry written as \n and a backslash as \\, so that a multi-line entry
// comes back as it was typed. Add appends at once, so a chat that ends
// without warning loses nothing; when the file has grown past twice the
// bound it is rewritten to the last entries within it. Two chats with one
// agent append to the same file and each recalls its own entries and those
// present when it started.
//
// The zero History keeps entries in memory only, up to
// DefaultHistoryMax: what a chat falls back to when OpenHistory fails.
// A History is safe for concurrent use.
type History struct {
	mu      sync.Mutex
	path    string   // "" for memory only
	max     int      // 0 for DefaultHistoryMax
	entries []string // oldest first, at most max
	lines   int      // entries in the file, as far as this History knows
	needNL  bool     // the file ends in a line cut short: the next append ends it first
	err     error    // the first failure to write the file
}

// OpenHistory loads the history at path, keeping the last max entries
// (max 0 or less: DefaultHistoryMax). A missing file is an empty history;
// the file and its directory are created by the first Add. A file that
// cannot be read or holds what Add does not write is an error naming the
// path, and nil.
func OpenHistory(path string, max int) (*History, error) {
	if max <= 0 {
		max = DefaultHistoryMax
	}
	h := &History{path: path, max: max}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chat: reading the history: %w", err)
	}
	entries, err := decodeHistory(path, string(data))
	if err != nil {
		return nil, err
	}
	h.lines = len(entries)
	h.needNL = len(data) > 0 && data[len(data)-1] != '\n'
	h.entries = lastN(entries, max)
	return h, nil
}

// Add adds entry as the most recent one and appends it to the file. It
// skips a blank entry, one equal to the most recent, and one longer than
// 64 KiB. A failure to write the file leaves the entry in memory and is
// reported by Err.
func (h *History) Add(entry string) {
	if strings.TrimSpace(entry) == "" || len(entry) > maxHistoryEntry {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.entries); n > 0 && h.entries[n-1] == entry {
		return
	}
	h.entries = lastN(append(h.entries, entry), h.bound())
	if h.path == "" {
		return
	}
	err := h.appendFile(entry)
	if err == nil && h.lines > 2*h.bound() {
		err = h.rewrite()
	}
	if err != nil && h.err == nil {
		h.err = err
	}
}

// Len returns the number of entries.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries)
}

// At returns an entry, 0 the most recent and Len()-1 the oldest. As
// x/term's History requires, it panics for an index out of that range.
func (h *History) At(i int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i < 0 || i >= len(h.entries) {
		panic(fmt.Sprintf("chat: history index %d out of range [0,%d)", i, len(h.entries)))
	}
	return h.entries[len(h.entries)-1-i]
}

// Err returns the first failure to write the history file, or nil. The
// history goes on in memory after one; the chat shows it once.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *History) bound() int {
	if h.max <= 0 {
		return DefaultHistoryMax
	}
	return h.max
}

// appendFile appends entry to the file, creating the file and its
// directory, private to the user, as needed.
func (h *History) appendFile(entry string) error {
	if err := os.MkdirAll(filepath.Dir(h.path), 0700); err != nil {
		return fmt.Errorf("chat: writing the history: %w", err)
	}
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0600)
	if err != nil {
		return fmt.Errorf("chat: writing the history: %w", err)
	}
	line := escapeHistory(entry) + "\n"
	if h.needNL {
		line = "\n" + line
	}
	// One write, so that two chats appending at once cannot interleave
	// within a line.
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("chat: writing the history %s: %w", h.path, err)
	}
	h.needNL = false
	h.lines++
	return nil
}

// rewrite replaces the file with its last max entries. It reads the file
// again rather than writing what is in memory, so that entries another
// chat appended are kept; if the file no longer reads, memory is what
// there is. The new file is written beside the old and renamed over it,
// so a crash leaves one or the other whole.
func (h *History) rewrite() error {
	entries := h.entries
	if data, err := os.ReadFile(h.path); err == nil {
		if all, err := decodeHistory(h.path, string(data)); err == nil {
			entries = lastN(all, h.bound())
		}
	}
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(escapeHistory(e))
		b.WriteByte('\n')
	}
	f, err := os.CreateTemp(filepath.Dir(h.path), filepath.Base(h.path)+".*")
	if err != nil {
		return fmt.Errorf("chat: rewriting the history: %w", err)
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), h.path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("chat: rewriting the history %s: %w", h.path, err)
	}
	h.lines = len(entries)
	return nil
}

func lastN(entries []string, n int) []string {
	if len(entries) <= n {
		return entries
	}
	// Copy, so that the dropped entries' backing array can be freed.
	return append([]string(nil), entries[len(entries)-n:]...)
}

// escapeHistory writes entry on one line: a newline as \n and a
// backslash as \\.
func escapeHistory(entry string) string {
	if !strings.ContainsAny(entry, "\n\\") {
		return entry
	}
	var b strings.Builder
	b.Grow(len(entry) + 8)
	for i := 0; i < len(entry); i++ {
		switch c := entry[i]; c {
		case '\n':
			b.WriteString(`\n`)
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// decodeHistory returns the entries of a history file's content. Any
// backslash not followed by n or another backslash is an error naming
// the file and line: the file is not one Add wrote.
func decodeHistory(path, data string) ([]string, error) {
	data = strings.TrimSuffix(data, "\n")
	if data == "" {
		return nil, nil
	}
	lines := strings.Split(data, "\n")
	entries := make([]string, 0, len(lines))
	for n, line := range lines {
		if line == "" {
			continue // Add writes none; a cut-short line ended later leaves one
		}
		entry, ok := unescapeHistory(line)
		if !ok {
			return nil, fmt.Errorf("chat: history %s line %d: not a history entry (a backslash must escape n or a backslash)", path, n+1)
		}
		entries = append(entries, entry)
	}
	return entries, nil
}

func unescapeHistory(line string) (string, bool) {
	if !strings.Contains(line, `\`) {
		return line, true
	}
	var b strings.Builder
	b.Grow(len(line))
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 == len(line) {
			return "", false
		}
		i++
		switch line[i] {
		case 'n':
			b.WriteByte('\n')
		case '\\':
			b.WriteByte('\\')
		default:
			return "", false
		}
	}
	return b.String(), true
}
