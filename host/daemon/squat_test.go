package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"ollie/ns/nsdir"
)

// A lock that names a pid counts only in the user's own private namespace
// directory, and only if the user's own: another user who made the
// directory first, or left a lock in it, names no daemon of ours (issue
// #28 item 4), and nothing is started there.
func TestPIDIgnoresSquattedLock(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mode      os.FileMode
		lockOwner int // -1: ours
		want      bool
	}{
		{"own private directory", 0o700, -1, true},
		{"directory open to all", 0o777, -1, false},
		{"lock of another user", 0o700, 65534, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.lockOwner >= 0 && os.Geteuid() != 0 {
				t.Skip("making a file of another user needs root")
			}
			dir := filepath.Join(t.TempDir(), "ns")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			t.Setenv("NAMESPACE", dir)
			lock := nsdir.SocketPath() + ".lock"
			f, err := os.Create(lock)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteString(strconv.Itoa(os.Getpid()))
			if tt.lockOwner >= 0 {
				if err := os.Chown(lock, tt.lockOwner, tt.lockOwner); err != nil {
					t.Fatal(err)
				}
			}
			// Held by another open file description, as a daemon holds it.
			g, err := os.Open(lock)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if err := unix.Flock(int(g.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			if got := PID() == os.Getpid(); got != tt.want {
				t.Errorf("PID() = %d, want the lock's pid: %v", PID(), tt.want)
			}
			if !tt.want && tt.mode != 0o700 {
				if _, err := StartDetached("/bin/true", 0); err == nil {
					t.Error("StartDetached started a daemon in a directory open to all")
				}
			}
		})
	}
}
