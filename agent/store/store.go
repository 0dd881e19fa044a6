// Package store keeps a session durable: one append-only JSONL file per
// session, written so that a crash of the process (or of the host, with the
// default fsync policy) loses at most the commit in flight and never leaves
// a file that cannot be opened.
//
// The first line of a file is its Header; every later line is one commit: a
// Record as a JSON object, or a transaction of several records as a JSON
// array, which replays whole or not at all. Opening a file replays it in
// order, drops a torn last line (a crash mid-write), refuses a file from a
// newer ollie and migrates an older one forward.
//
// On top of the log, the effect sandwich (effect.go) records a tool call's
// intent before it runs and its settlement after, so that Recover can settle
// a call a crash interrupted exactly once.
//
// The store trusts its callers for what records mean and the file for
// nothing: every line is checked as it is replayed. See README.md for the
// format and the guarantees.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"ollie/internal/paths"
)

// Version is the storage version this package writes when Options.Version
// is zero.
const Version = 1

// Errors a caller can test with errors.Is.
var (
	ErrNewerVersion = errors.New("store: the session file is from a newer ollie")
	ErrCorrupt      = errors.New("store: the session file is corrupt")
	ErrLocked       = errors.New("store: the session file is open in another store")
	ErrClosed       = errors.New("store: closed")
	ErrBroken       = errors.New("store: a write failed and the session file could not be put back")
	ErrNoMigration  = errors.New("store: missing migration")
)

// NewerVersionError is returned by Open for a file whose storage version is
// newer than the one this code writes. It matches ErrNewerVersion.
type NewerVersionError struct {
	Path  string
	File  int // the file's storage version
	Known int // the newest version this code knows
}

func (e *NewerVersionError) Error() string {
	return fmt.Sprintf("store: %s has storage version %d, newer than %d, the newest this ollie knows; upgrade ollie to open it",
		e.Path, e.File, e.Known)
}

func (e *NewerVersionError) Is(target error) bool { return target == ErrNewerVersion }

// CorruptError names the line of a session file that cannot be replayed. It
// matches ErrCorrupt.
type CorruptError struct {
	Path string
	Line int // 1-based; the header is line 1
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: %s line %d: %v; the session was not opened (move the file aside, or repair or remove that line)",
		e.Path, e.Line, e.Err)
}

func (e *CorruptError) Unwrap() error        { return e.Err }
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Header is the first line of a session file.
type Header struct {
	StorageVersion int             // set by Create
	ID             string          // the session's immutable ID; required
	CreatedAt      time.Time       // set by Create when zero
	Meta           json.RawMessage // the caller's, e.g. {"cwd":"/srv"}; a JSON object or nil
}

type headerLine struct {
	Kind           string          `json:"kind"`
	StorageVersion int             `json:"storageVersion"`
	ID             string          `json:"id"`
	CreatedAt      time.Time       `json:"createdAt"`
	Meta           json.RawMessage `json:"meta,omitempty"`
}

func (h Header) line() ([]byte, error) {
	b, err := json.Marshal(headerLine{kindHeader, h.StorageVersion, h.ID, h.CreatedAt, h.Meta})
	if err != nil {
		return nil, fmt.Errorf("store: header: %w", err)
	}
	return append(b, '\n'), nil
}

// Migration upgrades the records of a file at one storage version to the
// next. It may change, add or drop records and edit h.Meta; the store sets
// h.StorageVersion. Seqs must stay strictly increasing; records a migration
// adds may take any unused seq, or 0 to be given one after the last.
type Migration func(h *Header, recs []Record) ([]Record, error)

// Options tune a Store. The zero value (or nil) is the safe default.
type Options struct {
	// NoSync skips the fsync after each commit. By default every Commit
	// returns only once its line is on stable storage, so a power cut loses
	// nothing committed. With NoSync a killed process still loses nothing
	// (the kernel holds the write), but a power cut or kernel crash may lose
	// the last commits or leave garbage that makes the file fail to open.
	// Close syncs either way.
	NoSync bool

	// Version is the storage version this code writes: files at an older
	// version are migrated up to it and newer files are refused. Zero means
	// the package's Version.
	Version int

	// Migrations[v] upgrades a file from version v to v+1. Open runs the
	// chain from the file's version up to Version and rewrites the file
	// atomically; a missing link is ErrNoMigration.
	Migrations map[int]Migration

	// Now stamps records whose Time is zero; nil means time.Now.
	Now func() time.Time

	// writer, when set, stands between the store and its file for every
	// write, so that a test can fill the disk.
	writer func(f *os.File) io.Writer
}

func (o *Options) out(f *os.File) io.Writer {
	if o == nil || o.writer == nil {
		return f
	}
	return o.writer(f)
}

func (o *Options) version() int {
	if o == nil || o.Version == 0 {
		return Version
	}
	return o.Version
}

func (o *Options) now() time.Time {
	if o == nil || o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// A Store is an open session file. Its methods are safe for concurrent use;
// commits are written one at a time, in the order their seqs say.
type Store struct {
	path string
	opts Options

	mu       sync.Mutex
	f        *os.File  // nil once closed
	w        io.Writer // f, or what a test put in front of it
	size     int64     // the length of the file's header and whole commits
	header   Header
	warnings []string
	seq      uint64 // the last committed seq
	broken   error  // the write error that left the file in an unknown state
	fx       effects
	live     map[string]bool // calls committed or handed back by this Store and not yet settled
}

// Create makes a new session file at path, mode 0600, holding only its
// header, and opens it. It fails if path exists. The file appears whole or
// not at all: a crash during Create leaves at most a stray temporary file
// beside it, never a file without a complete header.
func Create(path string, h Header, opts *Options) (*Store, error) {
	if h.ID == "" {
		return nil, errors.New("store: header has no session ID")
	}
	if len(h.Meta) > 0 {
		if _, err := members(h.Meta); err != nil {
			return nil, fmt.Errorf("store: header meta: %w", err)
		}
	}
	h.StorageVersion = opts.version()
	if h.CreatedAt.IsZero() {
		h.CreatedAt = opts.now()
	}
	h.CreatedAt = h.CreatedAt.UTC().Round(0)
	line, err := h.line()
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("store: create %s: %w", path, os.ErrExist)
	}
	f, tmp, err := writeTemp(path, "create", line, opts)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	// Link, unlike rename, refuses to replace a file that appeared since.
	if err := os.Link(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: create %s: %w", path, err)
	}
	if err := syncDir(path); err != nil {
		f.Close()
		return nil, err
	}
	s := newStore(path, opts)
	s.f, s.w = f, s.opts.out(f)
	s.size = int64(len(line))
	s.header = h
	return s, nil
}

func newStore(path string, opts *Options) *Store {
	s := &Store{path: path}
	if opts != nil {
		s.opts = *opts
	}
	s.fx.init()
	s.live = make(map[string]bool)
	return s
}

// writeTemp writes data to a new locked temporary file beside path, syncs
// it, and returns it open for appending.
func writeTemp(path, why string, data []byte, opts *Options) (*os.File, string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+"."+why+"-*")
	if err != nil {
		return nil, "", fileError(why, path, err)
	}
	tmp := f.Name()
	fail := func(err error) (*os.File, string, error) {
		f.Close()
		os.Remove(tmp)
		return nil, "", fileError(why, path, err)
	}
	// CreateTemp opens without O_APPEND; reopen so every later write appends.
	f.Close()
	if f, err = os.OpenFile(tmp, os.O_RDWR|os.O_APPEND, 0); err != nil {
		return fail(err)
	}
	if err := lockFile(f); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0600); err != nil {
		return fail(err)
	}
	if _, err := opts.out(f).Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	return f, tmp, nil
}

// fileError is an error about writing the session file at path. The os
// error names the file it was given, which may be the temporary name the
// file was written under (Create links it into place, so a store keeps
// writing through it): the person who must free space or fix permissions is
// told the session file's name instead, and errors.Is still finds the
// cause (syscall.ENOSPC).
func fileError(what, path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("store: %s %s: %s: %w", what, path, pe.Op, pe.Err)
	}
	return fmt.Errorf("store: %s %s: %w", what, path, err)
}

// syncDir makes a new or renamed directory entry for path durable.
func syncDir(path string) error {
	if err := paths.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("store: sync directory of %s: %w", path, err)
	}
	return nil
}

// Open opens the session file at path and replays it, returning the
// records of every complete commit in order. A torn last line is dropped
// (see Warnings) and cut off the file before anything is appended. A file
// at an older storage version is migrated and rewritten atomically; one at
// a newer version is refused with a *NewerVersionError. A damaged line that
// is not the last is a *CorruptError naming it. The file stays locked
// against other Opens, in this process or another, until Close; Open of a
// locked file fails with ErrLocked.
func Open(path string, opts *Options) (*Store, []Record, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	if err := lockFile(f); err != nil {
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	data, err := readAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("store: read %s: %w", path, err)
	}
	s := newStore(path, opts)
	rp, err := replay(path, data, s.opts.version())
	if err != nil {
		return nil, nil, err
	}
	s.header = rp.header
	s.warnings = rp.warnings
	recs := rp.records
	switch {
	case rp.header.StorageVersion < s.opts.version():
		nf, migrated, h, err := migrate(path, rp, &s.opts)
		if err != nil {
			return nil, nil, err
		}
		f.Close() // releases the old inode's lock; nf holds the new one's
		f, recs, s.header = nf, migrated, h
		s.warnings = append(s.warnings, fmt.Sprintf("migrated from storage version %d to %d",
			rp.header.StorageVersion, h.StorageVersion))
	case rp.good < int64(len(data)):
		// Cut the torn line now, so the next append starts a line of its own.
		if err := f.Truncate(rp.good); err != nil {
			return nil, nil, fmt.Errorf("store: cut the torn last line of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return nil, nil, fmt.Errorf("store: cut the torn last line of %s: %w", path, err)
		}
	}
	for _, r := range recs {
		// A file this package wrote never fails here; one edited by hand
		// may, and its tool calls are then kept as they were first written.
		c, err := s.fx.check(r, nil)
		if err != nil {
			s.warnings = append(s.warnings, fmt.Sprintf("record %d (%s) ignored for recovery: %v", r.Seq, r.Kind, err))
		} else {
			s.fx.apply([]change{c})
		}
		s.seq = r.Seq
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.f, s.w, s.size = f, s.opts.out(f), fi.Size()
	ok = true
	return s, recs, nil
}

func readAll(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	n, err := f.ReadAt(data, 0)
	if n == len(data) {
		err = nil
	}
	return data[:n], err
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// Header returns the file's header (after any migration).
func (s *Store) Header() Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.header
	h.Meta = append(json.RawMessage(nil), h.Meta...)
	return h
}

// Warnings returns what Open recovered from: a dropped torn line, a
// migration, a settlement that matched no intent. Each names what happened;
// none stopped the file from opening.
func (s *Store) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.warnings...)
}

// Seq returns the seq of the last commit, 0 for none.
func (s *Store) Seq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// Commit appends records as one commit: one record as a line of its own,
// several as a transaction that a later Open replays whole or not at all.
// It gives each record the next seq and, when zero, the current time, and
// returns once the line is written and (unless Options.NoSync) fsynced.
//
// A non-nil error from the write means the commit may or may not be in the
// file until the store writes again: the next Commit first cuts the file
// back to its last whole commit and reads it again to check it (see
// Broken), so a commit that failed is then not in the file, and a disk that
// was full takes commits again once it has room. Should a crash come first,
// the next Open settles the question.
func (s *Store) Commit(records ...Record) error {
	_, err := s.Append(records...)
	return err
}

// Append is Commit that returns the records as written: with their seq,
// time and payload as a later Open returns them.
func (s *Store) Append(records ...Record) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commitLocked(records)
}

func (s *Store) commitLocked(records []Record) ([]Record, error) {
	if s.f == nil {
		return nil, ErrClosed
	}
	if len(records) == 0 {
		return nil, errors.New("store: commit of no records")
	}
	recs := make([]Record, len(records))
	now := s.opts.now()
	for i, r := range records {
		r.Seq = s.seq + uint64(i) + 1
		if r.Time.IsZero() {
			r.Time = now
		}
		r.Time = r.Time.UTC().Round(0)
		if y := r.Time.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("store: commit: record %d (%q): time %v out of range", i+1, r.Kind, r.Time)
		}
		recs[i] = r
	}
	line, recs, err := encodeLine(recs)
	if err != nil {
		return nil, fmt.Errorf("store: commit: %w", err)
	}
	changes, err := s.fx.checkAll(recs)
	if err != nil {
		return nil, err // already says store: and which call
	}
	if s.broken != nil {
		if err := s.repairLocked(); err != nil {
			return nil, err
		}
	}
	if err := s.write(line); err != nil {
		s.broken = fileError("commit to", s.path, err)
		return nil, s.broken
	}
	s.size += int64(len(line))
	s.fx.apply(changes)
	for _, c := range changes {
		if c.kind == KindSettle {
			delete(s.live, c.id)
		} else {
			s.live[c.id] = true
		}
	}
	s.seq = recs[len(recs)-1].Seq
	return recs, nil
}

// testHookWrite, when set, runs just before a commit's line is written, so
// that a crash test can kill the process mid-write.
var testHookWrite func(line []byte)

// write appends one line with a single write and syncs it.
func (s *Store) write(line []byte) error {
	if testHookWrite != nil {
		testHookWrite(line)
	}
	if _, err := s.w.Write(line); err != nil {
		return err
	}
	if s.opts.NoSync {
		return nil
	}
	return s.f.Sync()
}

// Broken returns the error of the last write when it failed and the file
// has not been put back since: the store is then unsure whether that
// commit is in the file. The next Commit puts it back first; nil means the
// file holds exactly what was committed.
func (s *Store) Broken() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// repairLocked puts the file back after a failed write: it cuts off
// whatever the failed commit left (a torn line, or a whole line whose
// fsync failed, which its caller was told did not commit), syncs, and reads
// the file again to check that it holds exactly the commits this store
// made. Until that succeeds every commit is refused, since appending after
// an unknown tail could bury a torn line in the middle of the file.
func (s *Store) repairLocked() error {
	fail := func(err error) error {
		return fmt.Errorf("%w: %v; putting the file back: %v", ErrBroken, s.broken, err)
	}
	if err := s.f.Truncate(s.size); err != nil {
		return fail(err)
	}
	if err := s.f.Sync(); err != nil {
		return fail(err)
	}
	data, err := readAll(s.f)
	if err != nil {
		return fail(err)
	}
	rp, err := replay(s.path, data, s.opts.version())
	if err != nil {
		return fail(err)
	}
	var last uint64
	if n := len(rp.records); n > 0 {
		last = rp.records[n-1].Seq
	}
	if rp.good != s.size || int64(len(data)) != s.size || last != s.seq {
		return fail(fmt.Errorf("the file holds %d bytes up to seq %d, not the %d bytes up to seq %d committed",
			len(data), last, s.size, s.seq))
	}
	s.broken = nil
	return nil
}

// Close syncs and closes the file, releasing its lock. Later calls return
// ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return ErrClosed
	}
	f := s.f
	s.f = nil
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}
