package paths

import (
	"fmt"
	"os"
	"syscall"
)

// PreparePrivateDir makes a private directory for sockets (0700), and checks an
// existing one is ours: it may be in /tmp.
func PreparePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || (ok && int(st.Uid) != os.Getuid()) {
		return fmt.Errorf("%s is not a directory of yours: remove it or set OLLIE_REMOTE_DIR", dir)
	}
	if fi.Mode().Perm() != 0700 {
		return os.Chmod(dir, 0700)
	}
	return nil
}
