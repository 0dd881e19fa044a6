package ansible

// The deploy role's data/: one tar sent by the ollie_deploy action (one
// transfer, only when its hash differs), then made data/ here file by
// file, each written by rename, as "olliesrv install commit" commits
// uploads.

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"ollie/internal/paths"
)

// maxDataFile bounds one file of data/.
const maxDataFile = 256 << 20

// SyncData makes root/data hold the directories and regular files of the
// tar at tarPath, and nothing else: a file whose content or permission
// bits differ is replaced by rename, one the tar lacks is removed. It
// returns what it changed, empty when data/ already matched.
func SyncData(root, tarPath string) ([]string, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, fmt.Errorf("ansible: data tar: %w", err)
	}
	defer f.Close()
	data := filepath.Join(root, "data")
	if err := os.MkdirAll(data, 0755); err != nil {
		return nil, err
	}
	var changed []string
	want := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return changed, fmt.Errorf("ansible: data tar %s: %w", tarPath, err)
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return changed, fmt.Errorf("ansible: data tar %s: %q leaves data/", tarPath, h.Name)
		}
		want[name] = true
		dst := filepath.Join(data, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
				continue
			}
			if err := os.MkdirAll(dst, 0755); err != nil {
				return changed, err
			}
			changed = append(changed, "data/"+name+"/")
		case tar.TypeReg:
			if h.Size > maxDataFile {
				return changed, fmt.Errorf("ansible: data tar %s: %s is over %d MiB", tarPath, name, maxDataFile>>20)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return changed, err
			}
			mode := fs.FileMode(h.Mode).Perm()
			if same(dst, b, mode) {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0755); err != nil {
				return changed, err
			}
			if err := paths.WriteFileAtomic(dst, b, mode); err != nil {
				return changed, err
			}
			os.Chmod(dst, mode) // past the umask
			changed = append(changed, "data/"+name)
		default:
			return changed, fmt.Errorf("ansible: data tar %s: %s is neither a file nor a directory", tarPath, name)
		}
	}
	var gone []string
	filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == data {
			return nil
		}
		rel, _ := filepath.Rel(data, p)
		if !want[rel] {
			gone = append(gone, rel)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	sort.Sort(sort.Reverse(sort.StringSlice(gone)))
	for _, rel := range gone {
		if err := os.RemoveAll(filepath.Join(data, rel)); err != nil {
			return changed, err
		}
		changed = append(changed, "removed data/"+rel)
	}
	return changed, nil
}

// same reports whether the regular file at p holds b with mode.
func same(p string, b []byte, mode fs.FileMode) bool {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode || fi.Size() != int64(len(b)) {
		return false
	}
	have, err := os.ReadFile(p)
	return err == nil && bytes.Equal(have, b)
}
