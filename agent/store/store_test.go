package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// newFile creates a session file in a fresh directory and returns its path
// and the open store.
func newFile(t *testing.T, opts *Options) (string, *Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s1.jsonl")
	s, err := Create(path, Header{ID: "s1", Meta: json.RawMessage(`{"cwd":"/srv"}`)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return path, s
}

func rec(kind, data string) Record {
	return Record{Kind: kind, Data: json.RawMessage(data)}
}

func mustAppend(t *testing.T, s *Store, recs ...Record) []Record {
	t.Helper()
	out, err := s.Append(recs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustClose(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustOpen(t *testing.T, path string, opts *Options) (*Store, []Record) {
	t.Helper()
	s, recs, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, recs
}

func sameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d:\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("record %d:\ngot  %+v (%s)\nwant %+v (%s)", i, got[i], got[i].Data, want[i], want[i].Data)
		}
	}
}

// lines returns the file's lines, each checked to be valid JSON.
func lines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end in a newline: %q", path, data)
	}
	ls := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, l := range ls {
		if !json.Valid([]byte(l)) {
			t.Fatalf("%s line %d is not JSON: %q", path, i+1, l)
		}
	}
	return ls
}

func appendRaw(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	path, s := newFile(t, nil)
	var want []Record
	want = append(want, mustAppend(t, s, rec("prompt", `{"text":"hello"}`))...)
	want = append(want, mustAppend(t, s,
		rec("assistant", `{"text":"I'll look","calls":[{"id":"c1","tool":"file_read"}]}`),
		rec("fifo.pop", `{"n":1}`),
		rec("plan", `{"steps":["a","b"]}`),
	)...)
	want = append(want, mustAppend(t, s, Record{Kind: "rename"})...)
	for i, r := range want {
		if r.Seq != uint64(i+1) {
			t.Errorf("record %d has seq %d", i, r.Seq)
		}
		if r.Time.IsZero() || r.Time.Location() != time.UTC {
			t.Errorf("record %d has time %v", i, r.Time)
		}
	}
	h := s.Header()
	mustClose(t, s)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	ls := lines(t, path)
	if len(ls) != 4 {
		t.Fatalf("%d lines, want header and 3 commits:\n%s", len(ls), strings.Join(ls, "\n"))
	}
	if !strings.HasPrefix(ls[0], `{"kind":"header","storageVersion":1,"id":"s1","createdAt":"`) ||
		!strings.HasSuffix(ls[0], `,"meta":{"cwd":"/srv"}}`) {
		t.Errorf("header line %s", ls[0])
	}
	if !strings.HasPrefix(ls[1], `{"kind":"prompt","seq":1,"time":"`) || !strings.HasSuffix(ls[1], `","text":"hello"}`) {
		t.Errorf("single commit line %s", ls[1])
	}
	if !strings.HasPrefix(ls[2], `[{"kind":"assistant","seq":2,`) {
		t.Errorf("transaction line %s", ls[2])
	}

	s2, got := mustOpen(t, path, nil)
	sameRecords(t, got, want)
	if !reflect.DeepEqual(s2.Header(), h) {
		t.Errorf("header %+v, want %+v", s2.Header(), h)
	}
	if w := s2.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
	if s2.Seq() != 5 {
		t.Errorf("Seq() = %d, want 5", s2.Seq())
	}
	more := mustAppend(t, s2, rec("prompt", `{"text":"again"}`))
	if more[0].Seq != 6 {
		t.Errorf("seq after reopen %d, want 6", more[0].Seq)
	}
	mustClose(t, s2)
	_, got = mustOpen(t, path, nil)
	sameRecords(t, got, append(want, more...))
}

func TestPayload(t *testing.T) {
	path, s := newFile(t, nil)
	r := mustAppend(t, s, rec("x", "{ \"b\" : 1, \"a\":{\"z\": [1, 2], \"<&>\":\"<tag>\"} }"))[0]
	if want := `{"b":1,"a":{"z":[1,2],"<&>":"<tag>"}}`; string(r.Data) != want {
		t.Errorf("stored payload %s, want %s", r.Data, want)
	}
	r2, err := NewRecord("typed", struct {
		Text string `json:"text"`
		N    int    `json:"n"`
	}{"hi", 3})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, r2)
	mustClose(t, s)
	_, got := mustOpen(t, path, nil)
	if string(got[0].Data) != string(r.Data) {
		t.Errorf("read back %s, want %s", got[0].Data, r.Data)
	}
	var v struct {
		Text string
		N    int
	}
	if err := got[1].Decode(&v); err != nil || v.Text != "hi" || v.N != 3 {
		t.Errorf("Decode: %+v, %v", v, err)
	}
}

func TestCreate(t *testing.T) {
	path, s := newFile(t, nil)
	mustClose(t, s)
	if _, err := Create(path, Header{ID: "again"}, nil); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create over an existing file: %v, want ErrExist", err)
	}
	if _, err := Create(filepath.Join(t.TempDir(), "x"), Header{}, nil); err == nil {
		t.Error("Create without an ID succeeded")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "x"), Header{ID: "x", Meta: json.RawMessage(`[1]`)}, nil); err == nil {
		t.Error("Create with a non-object meta succeeded")
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("Create left %d files, want 1", len(ents))
	}
}

// goodFile makes a file with two commits and returns its path, the records
// and the file's length.
func goodFile(t *testing.T) (string, []Record, int64) {
	path, s := newFile(t, nil)
	recs := mustAppend(t, s, rec("prompt", `{"text":"one"}`))
	recs = append(recs, mustAppend(t, s, rec("a", `{"n":2}`), rec("b", `{"n":3}`))...)
	mustClose(t, s)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, recs, fi.Size()
}

func TestTornLastLine(t *testing.T) {
	tx, _, err := encodeLine([]Record{
		{Kind: "intent", Seq: 4, Time: time.Now().UTC(), Data: json.RawMessage(`{"id":"c1"}`)},
		{Kind: "fifo.pop", Seq: 5, Time: time.Now().UTC()},
		{Kind: "plan", Seq: 6, Time: time.Now().UTC(), Data: json.RawMessage(`{"text":"` + strings.Repeat("p", 100) + `"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	one, _, err := encodeLine([]Record{{Kind: "prompt", Seq: 4, Time: time.Now().UTC(), Data: json.RawMessage(`{"text":"lost"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tail string
	}{
		{"half an object", string(one[:len(one)/2])},
		{"object without its newline", string(one[:len(one)-1])},
		{"one byte", "{"},
		{"invalid JSON with a newline", `{"kind":"prompt","seq":4,` + "\n"},
		{"a blank line", "\n"},
		{"zeros from a power cut", "\x00\x00\x00\x00"},
		{"half a transaction", string(tx[:len(tx)/2])},
		{"transaction without its closing bracket", string(tx[:len(tx)-2]) + "\n"},
		{"transaction without its newline", string(tx[:len(tx)-1])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, want, size := goodFile(t)
			appendRaw(t, path, tc.tail)

			s, got, err := Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			sameRecords(t, got, want)
			if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "line 4: dropped a torn last line") {
				t.Errorf("warnings %q", w)
			}
			if fi, _ := os.Stat(path); fi.Size() != size {
				t.Errorf("file is %d bytes after Open, want it cut back to %d", fi.Size(), size)
			}
			next := mustAppend(t, s, rec("prompt", `{"text":"after"}`))
			if next[0].Seq != 4 {
				t.Errorf("next seq %d, want 4", next[0].Seq)
			}
			mustClose(t, s)
			if n := len(lines(t, path)); n != 4 {
				t.Errorf("%d lines, want 4", n)
			}
			s2, got := mustOpen(t, path, nil)
			sameRecords(t, got, append(want, next...))
			if w := s2.Warnings(); len(w) != 0 {
				t.Errorf("warnings on the second open %q", w)
			}
		})
	}
}

func TestCorrupt(t *testing.T) {
	valid := `{"kind":"x","seq":9,"time":"2026-01-01T00:00:00Z"}`
	for _, tc := range []struct {
		name  string
		edit  func(ls []string) []string // ls[0] is the header
		line  int
		cause string
	}{
		{"garbage in the middle", func(ls []string) []string { ls[1] = "garbage"; return ls }, 2, "invalid character"},
		{"half a line in the middle", func(ls []string) []string { ls[1] = ls[1][:10]; return ls }, 2, ""},
		{"blank line in the middle", func(ls []string) []string { return append(ls[:2], append([]string{""}, ls[2:]...)...) }, 3, "empty line"},
		{"seq going back", func(ls []string) []string {
			return append(ls, strings.Replace(valid, `"seq":9`, `"seq":2`, 1))
		}, 4, "seq 2 does not follow 3"},
		{"no seq", func(ls []string) []string { return append(ls, `{"kind":"x","time":"2026-01-01T00:00:00Z"}`) }, 4, "no seq"},
		{"no kind", func(ls []string) []string { return append(ls, `{"seq":9,"time":"2026-01-01T00:00:00Z"}`) }, 4, "no kind"},
		{"a second header", func(ls []string) []string {
			return append(ls, `{"kind":"header","seq":9,"time":"2026-01-01T00:00:00Z"}`)
		}, 4, "header"},
		{"empty transaction", func(ls []string) []string { return append(ls, `[]`, valid) }, 4, "empty transaction"},
		{"duplicate key", func(ls []string) []string {
			return append(ls, `{"kind":"x","seq":9,"seq":10,"time":"2026-01-01T00:00:00Z"}`)
		}, 4, "given twice"},
		{"bad header", func(ls []string) []string { ls[0] = `{"kind":"nope"}`; return ls }, 1, "header"},
		{"header torn", func(ls []string) []string { return []string{ls[0][:20]} }, 1, ""},
		{"no header", func(ls []string) []string { return append([]string{valid}, ls[1:]...) }, 1, "header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _, _ := goodFile(t)
			data, _ := os.ReadFile(path)
			ls := tc.edit(strings.Split(strings.TrimSuffix(string(data), "\n"), "\n"))
			content := strings.Join(ls, "\n") + "\n"
			if tc.name == "header torn" {
				content = ls[0]
			}
			if err := os.WriteFile(path, []byte(content), 0600); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(path, nil)
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("Open: %v, want a CorruptError", err)
			}
			if ce.Line != tc.line || ce.Path != path || !strings.Contains(err.Error(), fmt.Sprintf("%s line %d: ", path, tc.line)) {
				t.Errorf("error %q names line %d, want %d", err, ce.Line, tc.line)
			}
			if !strings.Contains(err.Error(), tc.cause) {
				t.Errorf("error %q does not say %q", err, tc.cause)
			}
			if after, _ := os.ReadFile(path); string(after) != content {
				t.Error("Open changed a corrupt file")
			}
		})
	}
}

func TestNewerVersion(t *testing.T) {
	path, s := newFile(t, &Options{Version: 3})
	mustAppend(t, s, rec("x", `{"shape":"new"}`))
	mustClose(t, s)
	appendRaw(t, path, `{"torn`) // must not be cut: this ollie does not know the format
	before, _ := os.ReadFile(path)

	_, _, err := Open(path, nil)
	var nv *NewerVersionError
	if !errors.Is(err, ErrNewerVersion) || !errors.As(err, &nv) {
		t.Fatalf("Open: %v, want ErrNewerVersion", err)
	}
	if nv.File != 3 || nv.Known != Version || nv.Path != path {
		t.Errorf("error %+v", nv)
	}
	for _, want := range []string{path, "storage version 3", "newer than 1", "upgrade ollie"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Error("Open changed a newer file")
	}
	// Even a header this version could not parse is refused as newer.
	os.WriteFile(path, []byte(`{"kind":"header","storageVersion":7,"id":{"new":"shape"}}`+"\n"), 0600)
	if _, _, err := Open(path, nil); !errors.Is(err, ErrNewerVersion) {
		t.Errorf("Open of a reshaped newer header: %v", err)
	}
}

func TestMigration(t *testing.T) {
	path, s := newFile(t, nil)
	var old []Record
	old = append(old, mustAppend(t, s, rec("prompt", `{"text":"one"}`))...)
	old = append(old, mustAppend(t, s, rec("old", `{"n":1}`), rec("old", `{"n":2}`))...)
	mustClose(t, s)
	appendRaw(t, path, `[{"kind":"old","seq":4,`) // a torn tail the rewrite drops
	before, _ := os.Stat(path)

	var ran []int
	migrations := map[int]Migration{
		1: func(h *Header, recs []Record) ([]Record, error) {
			ran = append(ran, 1)
			for i := range recs {
				if recs[i].Kind == "old" {
					recs[i].Kind = "new"
				}
			}
			return recs, nil
		},
		2: func(h *Header, recs []Record) ([]Record, error) {
			ran = append(ran, 2)
			h.Meta = json.RawMessage(`{"cwd":"/srv","migrated":true}`)
			return append(recs, rec("note", `{"text":"added by migration"}`)), nil
		},
	}
	opts := &Options{Version: 3, Migrations: migrations}
	s, got := mustOpen(t, path, opts)
	if !reflect.DeepEqual(ran, []int{1, 2}) {
		t.Errorf("migrations ran %v", ran)
	}
	if h := s.Header(); h.StorageVersion != 3 || h.ID != "s1" || string(h.Meta) != `{"cwd":"/srv","migrated":true}` {
		t.Errorf("header %+v", h)
	}
	if len(got) != 4 || got[1].Kind != "new" || got[2].Kind != "new" || got[3].Kind != "note" || got[3].Seq != 4 {
		t.Fatalf("migrated records %+v", got)
	}
	if !reflect.DeepEqual(got[0], old[0]) || got[1].Seq != 2 || string(got[2].Data) != `{"n":2}` {
		t.Errorf("migrated records lost data: %+v", got)
	}
	w := s.Warnings()
	if len(w) != 2 || !strings.Contains(w[0], "torn") || w[1] != "migrated from storage version 1 to 3" {
		t.Errorf("warnings %q", w)
	}
	after, _ := os.Stat(path)
	if os.SameFile(before, after) {
		t.Error("the migrated file was written in place, not replaced")
	}
	if after.Mode().Perm() != 0600 {
		t.Errorf("migrated file mode %v", after.Mode().Perm())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("migration left %d files", len(ents))
	}
	if n := mustAppend(t, s, rec("prompt", `{"text":"two"}`)); n[0].Seq != 5 {
		t.Errorf("seq after migration %d", n[0].Seq)
	}
	mustClose(t, s)
	if ls := lines(t, path); len(ls) != 6 || !strings.Contains(ls[0], `"storageVersion":3`) {
		t.Errorf("migrated file:\n%s", strings.Join(ls, "\n"))
	}

	ran = nil
	s, got = mustOpen(t, path, opts)
	if ran != nil || len(s.Warnings()) != 0 || len(got) != 5 {
		t.Errorf("second open: migrations %v, warnings %q, %d records", ran, s.Warnings(), len(got))
	}
}

func TestMigrationFails(t *testing.T) {
	path, s := newFile(t, nil)
	mustAppend(t, s, rec("prompt", `{"text":"one"}`))
	mustClose(t, s)
	before, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name string
		m    map[int]Migration
		want error
	}{
		{"missing link", map[int]Migration{1: func(h *Header, r []Record) ([]Record, error) { return r, nil }}, ErrNoMigration},
		{"migration error", map[int]Migration{
			1: func(h *Header, r []Record) ([]Record, error) { return nil, errors.New("boom") },
			2: nil,
		}, nil},
		{"bad seq", map[int]Migration{
			1: func(h *Header, r []Record) ([]Record, error) { return append(r, Record{Kind: "x", Seq: 1}), nil },
			2: func(h *Header, r []Record) ([]Record, error) { return r, nil },
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Open(path, &Options{Version: 3, Migrations: tc.m})
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			t.Log(err)
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Error("a failed migration changed the file")
			}
		})
	}
}

func TestCommitRefuses(t *testing.T) {
	path, s := newFile(t, nil)
	defer s.Close()
	for _, recs := range [][]Record{
		nil,
		{{Kind: ""}},
		{{Kind: "header"}},
		{rec("x", `{"seq":3}`)},
		{rec("x", `{"kind":"y"}`)},
		{rec("x", `[1,2]`)},
		{rec("x", `"text"`)},
		{rec("x", `{"a":`)},
		{rec("x", `{"a":1}{}`)},
		{rec("ok", `{}`), rec("x", `{"time":1}`)},
		{{Kind: "x", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
	} {
		if err := s.Commit(recs...); err == nil {
			t.Errorf("Commit(%+v) succeeded", recs)
		}
	}
	// A refused commit writes nothing and leaves the store usable.
	if r := mustAppend(t, s, rec("ok", `{}`)); r[0].Seq != 1 || r[0].Data != nil {
		t.Errorf("after refusals: %+v", r)
	}
	if n := len(lines(t, path)); n != 2 {
		t.Errorf("%d lines", n)
	}
}

func TestBrokenAfterFailedWrite(t *testing.T) {
	_, s := newFile(t, nil)
	mustAppend(t, s, rec("x", `{}`))
	s.f.Close() // the next write fails as a full or vanished disk would
	if err := s.Commit(rec("x", `{}`)); err == nil || errors.Is(err, ErrBroken) {
		t.Fatalf("first failed write: %v", err)
	}
	err := s.Commit(rec("x", `{}`))
	if !errors.Is(err, ErrBroken) {
		t.Fatalf("write after a failed one: %v, want ErrBroken", err)
	}
	if s.Seq() != 1 {
		t.Errorf("a failed commit advanced seq to %d", s.Seq())
	}
}

func TestClosedAndLocked(t *testing.T) {
	path, s := newFile(t, nil)
	if _, _, err := Open(path, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("Open of a file a store holds: %v, want ErrLocked", err)
	}
	mustClose(t, s)
	if err := s.Commit(rec("x", `{}`)); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	s2, _ := mustOpen(t, path, nil)
	if _, _, err := Open(path, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("Open of a file a store holds: %v, want ErrLocked", err)
	}
	mustClose(t, s2)
}

func TestConcurrentCommits(t *testing.T) {
	path, s := newFile(t, &Options{NoSync: true})
	const writers, each = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				var err error
				if i%5 == 0 {
					err = s.Commit(rec("w", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)), rec("tx", fmt.Sprintf(`{"w":%d}`, w)))
				} else {
					err = s.Commit(rec("w", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mustClose(t, s)
	_, got := mustOpen(t, path, nil)
	next := make([]int, writers)
	n := 0
	for i, r := range got {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
		if r.Kind == "tx" {
			continue
		}
		n++
		var v struct{ W, I int }
		r.Decode(&v)
		if v.I != next[v.W] {
			t.Fatalf("writer %d: record %d after %d", v.W, v.I, next[v.W]-1)
		}
		next[v.W]++
	}
	if n != writers*each {
		t.Errorf("%d records, want %d", n, writers*each)
	}
}
