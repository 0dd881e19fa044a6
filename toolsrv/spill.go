package toolsrv

// Output spill: the part of a call's output the model is not shown is kept
// in a file it is pointed to. The files live in a private directory per
// session, made with os.MkdirTemp so that no other user can name it first,
// and they are bounded per call and per session, because a tool that
// writes without end would otherwise fill the disk.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"ollie/internal/paths"
	"ollie/toolsrv/sandbox"
)

const (
	// DefaultCallOutputLimit is how many bytes of output (stdout and
	// stderr together) one call may write when Runner.CallOutputLimit is
	// zero. Past it the tool is killed: no model reads 4 MiB of a tool's
	// output, and an endless writer must not run until its timeout.
	DefaultCallOutputLimit = 4 << 20

	// DefaultSessionSpillLimit is how many bytes of cut output a session
	// keeps on disk across its calls when Runner.SessionSpillLimit is
	// zero. Past it output is still shown up to OutputCap but no longer
	// kept, so many calls each under their own limit cannot fill the disk
	// either.
	DefaultSessionSpillLimit = 64 << 20
)

// ErrOutputLimit is the cause of a call's context when the call was
// stopped for writing more than its output limit.
var ErrOutputLimit = errors.New("toolsrv: the call wrote more than its output limit")

// spillRootName is the directory, under $XDG_RUNTIME_DIR or the state
// directory, that holds every spill directory of this user's daemons.
const spillRootName = "ollie-spill"

// spillAreaPrefix names a daemon's area under the spill root; a sweep
// touches nothing else, so `olliesrv tools run`'s directories stay.
const spillAreaPrefix = "daemon-"

// spillLockName is the file in an area that its daemon holds locked.
const spillLockName = "lock"

// spillGrace is how old an area without a lock file must be before a
// sweep removes it: a daemon makes its area, then the lock file.
const spillGrace = time.Minute

// SpillRoot returns the directory under which spill directories are
// made, <base>/ollie-spill, created 0700 or checked to be ours and
// private. base is $XDG_RUNTIME_DIR when it names a directory of ours
// that nobody else can enter (a tmpfs the system empties at logout), else
// fallback, ollie's state directory, which must be ours and writable by
// nobody else.
func SpillRoot(fallback string) (string, error) {
	base := fallback
	if xdg := paths.XDG("XDG_RUNTIME_DIR"); xdg != "" && ownDir(xdg, 0077) == nil {
		base = xdg
	} else {
		if !filepath.IsAbs(fallback) {
			return "", fmt.Errorf("toolsrv: no directory for cut tool output: the state directory %q is not an absolute path", fallback)
		}
		if err := os.MkdirAll(fallback, 0700); err != nil {
			return "", fmt.Errorf("toolsrv: no directory for cut tool output: %w", err)
		}
		if err := ownDir(fallback, 0022); err != nil {
			return "", fmt.Errorf("toolsrv: no directory for cut tool output: %w", err)
		}
	}
	root := filepath.Join(base, spillRootName)
	if err := os.Mkdir(root, 0700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("toolsrv: no directory for cut tool output: %w", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", fmt.Errorf("toolsrv: no directory for cut tool output: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("toolsrv: %s is not a directory (%s): refusing to keep tool output there; remove it", root, fi.Mode().Type())
	}
	if uid := owner(fi); uid != os.Getuid() {
		return "", fmt.Errorf("toolsrv: %s belongs to uid %d, not to you (uid %d): refusing to keep tool output there; remove it", root, uid, os.Getuid())
	}
	if fi.Mode().Perm()&0077 != 0 {
		if err := os.Chmod(root, 0700); err != nil {
			return "", fmt.Errorf("toolsrv: %s: make it private: %w", root, err)
		}
	}
	return root, nil
}

// ownDir checks that dir is a directory of ours without any of the
// permission bits in deny.
func ownDir(dir string, deny os.FileMode) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid := owner(fi); uid != os.Getuid() {
		return fmt.Errorf("%s belongs to uid %d, not to you (uid %d)", dir, uid, os.Getuid())
	}
	if p := fi.Mode().Perm(); p&deny != 0 {
		return fmt.Errorf("%s has mode %o: others may change what is in it; chmod go-w it", dir, p)
	}
	return nil
}

func owner(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// A SpillArea is one daemon's directory under the spill root, holding its
// sessions' spill directories (SpawnConfig.SpillBase). The daemon holds a
// lock in it for its life: that is how a later daemon's sweep tells an
// area whose daemon died from one in use.
type SpillArea struct {
	Dir  string
	lock *os.File
}

// OpenSpillArea removes the areas that dead daemons left under the spill
// root (see SpillRoot; stateDir is its fallback) and makes this daemon's.
// What cannot be swept is logged and left.
func OpenSpillArea(stateDir string, log *slog.Logger) (*SpillArea, error) {
	root, err := SpillRoot(stateDir)
	if err != nil {
		return nil, err
	}
	for _, err := range SweepSpill(root) {
		log.Warn("toolsrv: cannot remove a dead daemon's tool output", "err", err)
	}
	// A daemon starting at the same moment may sweep the area between
	// its lock file's creation and our lock; then we make another.
	for range 3 {
		a, err := newSpillArea(root)
		if err == nil || !errors.Is(err, errSwept) {
			return a, err
		}
	}
	return nil, fmt.Errorf("toolsrv: cannot make a directory for cut tool output under %s: swept by another daemon three times", root)
}

var errSwept = errors.New("swept by another daemon")

func newSpillArea(root string) (*SpillArea, error) {
	dir, err := os.MkdirTemp(root, spillAreaPrefix)
	if err != nil {
		return nil, fmt.Errorf("toolsrv: cannot make a directory for cut tool output: %w", err)
	}
	path := filepath.Join(dir, spillLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("toolsrv: cannot make a directory for cut tool output: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, errSwept // a sweeper holds it, and removes the area
	}
	// Locked after a sweeper removed the area: the lock is on a file no
	// longer there.
	held, err1 := f.Stat()
	there, err2 := os.Lstat(path)
	if err1 != nil || err2 != nil || !os.SameFile(held, there) {
		f.Close()
		return nil, errSwept
	}
	return &SpillArea{Dir: dir, lock: f}, nil
}

// Close removes the area with whatever the sessions left in it.
func (a *SpillArea) Close() error {
	if a == nil {
		return nil
	}
	err := os.RemoveAll(a.Dir)
	a.lock.Close()
	return err
}

// SweepSpill removes the areas under root whose daemon is gone: ours,
// named like an area, and either unlocked or, if they have no lock file,
// older than spillGrace. It returns what it could not remove.
func SweepSpill(root string) []error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), spillAreaPrefix) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || owner(fi) != os.Getuid() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, spillLockName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, os.ErrNotExist) {
			if time.Since(fi.ModTime()) > spillGrace {
				if err := os.RemoveAll(dir); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			// Removed while locked, so that a daemon making this very
			// area sees it gone (newSpillArea).
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
		f.Close()
	}
	return errs
}

// makeSessionSpill makes a session's spill directory under base, or under
// os.TempDir when base is "". MkdirTemp creates it 0700 under a name
// nobody can predict, and never takes one that exists.
func makeSessionSpill(base string) (string, error) {
	prefix := "session-"
	if base == "" {
		prefix = "ollie-spill-"
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return "", fmt.Errorf("toolsrv: spawn: cannot make the session's directory for cut tool output: %w", err)
	}
	return dir, nil
}

// spillDir returns the directory cut output goes to, making the Runner's
// own on first need when SpillDir is empty (`olliesrv tools run`: a call
// whose output fits leaves no directory behind).
func (r *Runner) spillDir() (string, error) {
	if r.SpillDir != "" {
		return r.SpillDir, nil
	}
	r.spillMu.Lock()
	defer r.spillMu.Unlock()
	if r.spillMade == "" {
		dir, err := os.MkdirTemp(r.SpillBase, "ollie-output-")
		if err != nil {
			return "", fmt.Errorf("cannot make a directory for cut output: %w", err)
		}
		r.spillMade = dir
	}
	return r.spillMade, nil
}

// allowSpill lets a call read its session's spill directory, read-only:
// the notes of earlier calls point the model at files there, and it reads
// them with tools.
func (r *Runner) allowSpill(p *sandbox.Policy) {
	dir := r.SpillDir
	if dir == "" {
		r.spillMu.Lock()
		dir = r.spillMade
		r.spillMu.Unlock()
	}
	if dir == "" {
		return
	}
	// Paths stay sorted with one rule per path, as Resolve leaves them.
	i, found := slices.BinarySearchFunc(p.Paths, dir, func(rule sandbox.PathRule, path string) int { return strings.Compare(rule.Path, path) })
	if found {
		p.Paths[i].Access |= sandbox.Read
		return
	}
	p.Paths = slices.Insert(p.Paths, i, sandbox.PathRule{Path: dir, Access: sandbox.Read})
}

// reserveSpill takes up to n bytes from the session's budget for kept
// output and returns how many it got.
func (r *Runner) reserveSpill(n int64) int64 {
	limit := r.sessionSpillLimit()
	r.spillMu.Lock()
	defer r.spillMu.Unlock()
	k := min(n, max(0, limit-r.spilled))
	r.spilled += k
	return k
}

func (r *Runner) sessionSpillLimit() int64 {
	if r.SessionSpillLimit > 0 {
		return r.SessionSpillLimit
	}
	return DefaultSessionSpillLimit
}

// callOutput is what the two captures of one call share: the call's
// output limit and the Runner whose budget and directory they use.
type callOutput struct {
	r     *Runner
	limit int64
	stop  context.CancelCauseFunc // kills the call

	mu      sync.Mutex // stdout and stderr are copied by two goroutines
	written int64
}

func (r *Runner) newCallOutput(stop context.CancelCauseFunc) *callOutput {
	limit := r.CallOutputLimit
	if limit <= 0 {
		limit = DefaultCallOutputLimit
	}
	return &callOutput{r: r, limit: limit, stop: stop}
}

// admit returns the part of p within the call's limit, and stops the call
// once the tool has written past it.
func (o *callOutput) admit(p []byte) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	room := max(0, o.limit-o.written)
	o.written += int64(len(p))
	if int64(len(p)) > room {
		o.stop(ErrOutputLimit)
		return p[:room]
	}
	return p
}

// stopped is the start of a stopped call's result.
func (o *callOutput) stopped() string {
	return fmt.Sprintf("[stopped: the tool wrote more than %s of output, the limit of one call; it and every process it started were killed]", size(o.limit))
}

// size writes n in the unit it was most likely configured in.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
