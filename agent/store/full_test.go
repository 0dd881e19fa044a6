package store

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// disk stands in for the file system under every file a store writes: it
// lets room bytes through, then fails as a full disk does, with a short
// write and ENOSPC naming the file by the name it was opened with. With
// lateErr set it takes every byte and then fails anyway, as a write whose
// error comes after the data reached the page cache.
type disk struct {
	room    int
	lateErr error
}

func (d *disk) options() *Options {
	return &Options{writer: func(f *os.File) io.Writer { return &diskFile{d, f} }}
}

type diskFile struct {
	d *disk
	f *os.File
}

func (w *diskFile) Write(p []byte) (int, error) {
	if w.d.lateErr != nil {
		n, _ := w.f.Write(p)
		return n, &os.PathError{Op: "write", Path: w.f.Name(), Err: w.d.lateErr}
	}
	n := min(len(p), w.d.room)
	n, err := w.f.Write(p[:n])
	w.d.room -= n
	if err == nil && n < len(p) {
		err = &os.PathError{Op: "write", Path: w.f.Name(), Err: syscall.ENOSPC}
	}
	return n, err
}

// checkNamesFile checks that a write error is about the session file: it
// names path, never the temporary name the file was created under, and
// keeps its cause.
func checkNamesFile(t *testing.T, err error, path string, cause error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error from a full disk")
	}
	if !strings.Contains(err.Error(), path+":") || strings.Contains(err.Error(), "."+filepath.Base(path)+".") {
		t.Errorf("error %q does not name the session file %s alone", err, path)
	}
	if !errors.Is(err, cause) {
		t.Errorf("error %q does not match %v", err, cause)
	}
}

func TestCreateOnFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	d := &disk{room: 20}
	_, err := Create(path, Header{ID: "s"}, d.options())
	checkNamesFile(t, err, path, syscall.ENOSPC)
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Errorf("a failed Create left %v", ents)
	}
}

// TestDiskFull fills the disk under a store's commits: a commit that does
// not fit fails naming the session file, the store refuses nothing once
// there is room again, and the file holds exactly the commits that
// returned without error.
func TestDiskFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	d := &disk{room: 1 << 20}
	s, err := Create(path, Header{ID: "s"}, d.options())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, rec("a", `{"n":1}`))
	before := fileSize(t, path)

	d.room = 10 // the next line tears
	err = s.Commit(rec("b", `{"n":2}`))
	checkNamesFile(t, err, path, syscall.ENOSPC)
	if s.Broken() == nil {
		t.Error("Broken is nil after a failed write")
	}
	if got := fileSize(t, path); got != before+10 {
		t.Fatalf("the torn write left %d bytes, want %d", got, before+10)
	}

	d.room = 0 // still full: the file is put back, and the write fails again
	checkNamesFile(t, s.Commit(rec("c", `{"n":3}`)), path, syscall.ENOSPC)
	if got := fileSize(t, path); got != before {
		t.Errorf("after the second failure the file has %d bytes, want %d: the first failure's torn line is still there", got, before)
	}

	d.room = 1 << 20 // space is back: no reopen needed
	mustAppend(t, s, rec("d", `{"n":4}`))
	if err := s.Broken(); err != nil {
		t.Errorf("Broken after a good commit: %v", err)
	}
	// A whole line whose write reported an error is cut too: its caller
	// was told it did not commit.
	d.lateErr = syscall.EIO
	checkNamesFile(t, s.Commit(rec("e", `{"n":5}`)), path, syscall.EIO)
	d.lateErr = nil
	mustAppend(t, s, rec("f", `{"n":6}`))
	mustClose(t, s)

	s, recs := mustOpen(t, path, nil)
	defer s.Close()
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	if got := strings.Join(kinds, " "); got != "a d f" {
		t.Errorf("the file holds %q, want the commits that succeeded: a d f", got)
	}
}

// TestBrokenFileNotPutBack: when the file changed under a broken store, the
// store cannot know what it holds, and keeps refusing commits.
func TestBrokenFileNotPutBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	d := &disk{room: 1 << 20}
	s, err := Create(path, Header{ID: "s"}, d.options())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustAppend(t, s, rec("a", `{"n":1}`))
	d.room = 5
	if err := s.Commit(rec("b", `{}`)); err == nil {
		t.Fatal("no error from a full disk")
	}
	if err := os.Truncate(path, 40); err != nil { // a hand edit, or a disk that lost data
		t.Fatal(err)
	}
	d.room = 1 << 20
	for range 2 {
		if err := s.Commit(rec("c", `{}`)); !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), path) {
			t.Errorf("commit to a file that lost a commit: %v, want ErrBroken naming %s", err, path)
		}
	}
}
