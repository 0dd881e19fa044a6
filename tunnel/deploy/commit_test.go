package deploy

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
)

// TestCommitChecksAtOnce: a commit checks (hashes, fsyncs) its files
// several at once, so that one slow file (here an upload that never
// opens) does not hold the others' fsyncs behind it; renames still follow
// the plan's order, after every check.
func TestCommitChecksAtOnce(t *testing.T) {
	root := installRoot(t)
	slow := installUpload(t, root, "data/slow", "", "")
	p := filepath.Join(root, slow.Tmp)
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0600); err != nil {
		t.Fatal(err)
	}
	other := installUpload(t, root, "data/other", "x", "x")
	other.Mode = 0640
	done := make(chan error, 1)
	go func() {
		_, err := Commit(Plan{Root: root, Version: "v1", Keep: 3, Files: []PlannedFile{slow, other}})
		done <- err
	}()
	// The fifo's open returns once a writer opens it too, whenever the
	// commit gets to it.
	unblock := sync.OnceFunc(func() {
		go func() {
			if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
		}()
	})
	t.Cleanup(unblock)
	await.Until(t, 5*time.Second, "the second file checked while the first waits", func() bool {
		fi, err := os.Stat(filepath.Join(root, other.Tmp))
		return err == nil && fi.Mode().Perm() == 0640
	})
	if _, err := os.Stat(filepath.Join(root, "data/other")); err == nil {
		t.Error("a file was renamed before every file was checked")
	}
	unblock()
	if err := <-done; err == nil {
		t.Error("a commit with a fifo for an upload succeeded")
	}
}
