package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
)

// ErrNoMatch is the error of a glob that matched no file.
var ErrNoMatch = errors.New("no file matches")

// globListers bounds the directories one Glob lists at once: a fleet's
// host/* is many hosts, each a round trip away.
const globListers = 16

// HasGlob reports whether the namespace path p is a pattern: whether an
// element has one of path.Match's metacharacters, *, ? or [.
func HasGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

// Glob returns the files whose paths match pattern, absolute and cleaned,
// in lexical order. Each element of pattern is matched against the names
// of a directory listing with path.Match (*, ?, [...] and [^...], \ to
// quote), so a * never crosses a /. A path without metacharacters is
// returned as it is, unchecked.
//
// A directory that cannot be listed (gone, not permitted, or a host of a
// fleet that is down) matches nothing, as in a shell: Glob fails only
// when the pattern is malformed, nothing matches (*fs.PathError with
// ErrNoMatch), ctx ends, or the connection is lost. Names a server lists
// that could not be walked to (empty, ".", "..", or with a "/") match
// nothing either.
func (c *Conn) Glob(ctx context.Context, pattern string) ([]string, error) {
	pattern = Clean(pattern)
	if !HasGlob(pattern) {
		return []string{pattern}, nil
	}
	elems := strings.Split(pattern[1:], "/")
	last := -1 // the last element with a glob: those after it are checked by stat
	for i, e := range elems {
		if _, err := path.Match(e, ""); err != nil {
			return nil, &fs.PathError{Op: "glob", Path: pattern, Err: fmt.Errorf("bad pattern %q", e)}
		}
		if HasGlob(e) {
			last = i
		}
	}
	cands := []string{"/"}
	for _, e := range elems[:last+1] {
		if !HasGlob(e) {
			for i := range cands {
				cands[i] = path.Join(cands[i], e)
			}
			continue
		}
		var err error
		if cands, err = c.globDirs(ctx, cands, e); err != nil {
			return nil, &fs.PathError{Op: "glob", Path: pattern, Err: err}
		}
	}
	if rest := elems[last+1:]; len(rest) > 0 {
		for i := range cands {
			cands[i] = path.Join(append([]string{cands[i]}, rest...)...)
		}
		var err error
		if cands, err = c.globExisting(ctx, cands); err != nil {
			return nil, &fs.PathError{Op: "glob", Path: pattern, Err: err}
		}
	}
	if len(cands) == 0 {
		return nil, &fs.PathError{Op: "glob", Path: pattern, Err: ErrNoMatch}
	}
	slices.Sort(cands)
	return slices.Compact(cands), nil
}

// globDirs lists each of dirs and returns the paths of the entries whose
// names match elem.
func (c *Conn) globDirs(ctx context.Context, dirs []string, elem string) ([]string, error) {
	out := make([][]string, len(dirs))
	err := c.globEach(ctx, dirs, func(i int, dir string) error {
		ents, err := c.Ls(ctx, dir)
		if err != nil {
			return err
		}
		for _, d := range ents {
			if d.Name == "" || d.Name == "." || d.Name == ".." || strings.Contains(d.Name, "/") {
				continue // Ls of a file names the file; a hostile name could lead elsewhere
			}
			if ok, _ := path.Match(elem, d.Name); ok {
				out[i] = append(out[i], path.Join(dir, d.Name))
			}
		}
		return nil
	})
	return slices.Concat(out...), err
}

// globExisting returns those of paths that exist.
func (c *Conn) globExisting(ctx context.Context, paths []string) ([]string, error) {
	ok := make([]bool, len(paths))
	err := c.globEach(ctx, paths, func(i int, p string) error {
		_, err := c.Stat(ctx, p)
		ok[i] = err == nil
		return err
	})
	var out []string
	for i, p := range paths {
		if ok[i] {
			out = append(out, p)
		}
	}
	return out, err
}

// globEach runs fn for each of paths, globListers at a time. An error
// the server answered means no match there; only ctx's end or a lost
// connection is returned.
func (c *Conn) globEach(ctx context.Context, paths []string, fn func(i int, p string) error) error {
	sem := make(chan struct{}, globListers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i, p := range paths {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := fn(i, p)
			if err == nil || ctx.Err() == nil && !errors.Is(err, ErrConnLost) {
				return
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return first
}
