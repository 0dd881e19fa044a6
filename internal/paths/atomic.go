package paths

import (
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces name with data: written to a temporary file
// beside it, fsynced, renamed over it, and the directory fsynced, so that
// a reader (or a crash) sees the old file or the new one, never a part.
func WriteFileAtomic(name string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".ollie-tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename, nothing is there
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		return err
	}
	SyncDir(dir) // the file is in place; only a crash could still lose the rename
	return nil
}

// SyncDir makes the entries created, renamed or removed in dir durable:
// a file's own fsync does not cover its name.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
