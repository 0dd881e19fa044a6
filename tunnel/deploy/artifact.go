package deploy

// The compressed forms on the desktop, made once per build and sent while
// they are made. The first host that needs a form starts its encoder
// writing to a temporary file in the cache; every host's upload reads
// that file as it grows, waiting where it has caught up with the encoder,
// so that N hosts cost one compression and the first bytes go out while
// the last are still being compressed. The file is renamed into the
// cache once whole, and a later deploy of the same build finds it there.

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// artifacts makes compressed forms once per desktop (and once per process
// for hosts deployed at once).
type artifacts struct {
	dir  string // "": cacheDir
	mu   sync.Mutex
	once map[string]*artifact
}

// An artifact is one compressed form: whole in the cache, or being made.
type artifact struct {
	mu      sync.Mutex
	changed *sync.Cond // more bytes, or done
	tmp     string     // the file being made, until done
	made    int64      // its bytes written so far
	done    bool
	f       LocalFile // once done without error
	err     error
}

var cache = &artifacts{once: map[string]*artifact{}}

func (a *artifacts) root() string {
	if a.dir != "" {
		return a.dir
	}
	return cacheDir()
}

// start returns the artifact name under the cache, starting make to write
// it when it is neither there nor being made. An error is one of starting
// (no cache directory, no temporary file): make's own comes from the
// artifact's readers and wait.
func (a *artifacts) start(name string, make func(w io.Writer) error) (*artifact, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if art := a.once[name]; art != nil {
		return art, art.startErr()
	}
	art := &artifact{}
	art.changed = sync.NewCond(&art.mu)
	a.once[name] = art
	dir := a.root()
	p := filepath.Join(dir, name)
	if f, err := hashFile(p); err == nil {
		art.f, art.done = f, true
		return art, nil
	}
	tmp, err := a.create(dir, name)
	if err != nil {
		art.err, art.done = err, true
		return art, err
	}
	art.tmp = tmp.Name()
	go art.make(tmp, p, make)
	return art, nil
}

func (a *artifacts) create(dir, name string) (*os.File, error) {
	if dir == "" {
		return nil, errors.New("no cache directory for the compressed forms")
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return nil, err
	}
	return os.CreateTemp(dir, "."+name+".tmp-*")
}

// get returns the artifact name, whole: made now when it is not there.
func (a *artifacts) get(name string, make func(w io.Writer) error) (LocalFile, error) {
	art, err := a.start(name, make)
	if err != nil {
		return LocalFile{}, err
	}
	return art.wait()
}

// startErr is the artifact's error when it failed before making anything.
func (art *artifact) startErr() error {
	art.mu.Lock()
	defer art.mu.Unlock()
	if art.done && art.tmp == "" {
		return art.err
	}
	return nil
}

// make runs mk into tmp and renames it to p once whole.
func (art *artifact) make(tmp *os.File, p string, mk func(w io.Writer) error) {
	err := mk(&artifactWriter{art: art, f: tmp})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	var f LocalFile
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err == nil {
		f, err = hashFile(p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	art.mu.Lock()
	art.f, art.err, art.done = f, err, true
	art.changed.Broadcast()
	art.mu.Unlock()
}

// wait returns the artifact once whole.
func (art *artifact) wait() (LocalFile, error) {
	art.mu.Lock()
	defer art.mu.Unlock()
	for !art.done {
		art.changed.Wait()
	}
	return art.f, art.err
}

// whole reports the artifact whole in the cache, and its file.
func (art *artifact) whole() (LocalFile, bool) {
	art.mu.Lock()
	defer art.mu.Unlock()
	return art.f, art.done && art.err == nil
}

type artifactWriter struct {
	art *artifact
	f   *os.File
}

func (w *artifactWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.art.mu.Lock()
	w.art.made += int64(n)
	w.art.changed.Broadcast()
	w.art.mu.Unlock()
	return n, err
}

// open reads the artifact from its start, following it while it is made:
// a Read past what is made so far waits for more, and ends with the
// encoder's error if it fails.
func (art *artifact) open() (io.ReadCloser, error) {
	art.mu.Lock()
	defer art.mu.Unlock()
	if art.done {
		if art.err != nil {
			return nil, art.err
		}
		return os.Open(art.f.Src)
	}
	// Open before the rename, which takes the lock: the descriptor then
	// reads the same file under its new name.
	f, err := os.Open(art.tmp)
	if err != nil {
		return nil, err
	}
	return &following{art: art, f: f}, nil
}

type following struct {
	art *artifact
	f   *os.File
	off int64
}

func (r *following) Read(p []byte) (int, error) {
	art := r.art
	art.mu.Lock()
	for r.off >= art.made && !art.done {
		art.changed.Wait()
	}
	made, done, err := art.made, art.done, art.err
	art.mu.Unlock()
	if done && err != nil {
		return 0, err
	}
	if r.off >= made {
		return 0, io.EOF
	}
	n, err := r.f.ReadAt(p[:min(int64(len(p)), made-r.off)], r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Size tells pkg/sftp the length is not known yet, which has it keep
// many writes in flight all the same.
func (r *following) Size() int64 { return -1 }

func (r *following) Close() error { return r.f.Close() }
