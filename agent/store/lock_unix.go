//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package store

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// lockFile takes an exclusive advisory lock on f, held until f is closed,
// so that two stores (in one process or two) never append to one file. The
// kernel drops it when a killed process's files close.
//
// A lock belongs to the open file, which a child forked by this process
// (for any exec, anywhere in it) shares until it execs: a file just closed
// here can stay locked for that instant. So a held lock is tried again for
// a little while before it counts as another store's.
func lockFile(f *os.File) error {
	deadline := time.Now().Add(250 * time.Millisecond)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return ErrLocked
		}
		time.Sleep(5 * time.Millisecond)
	}
}
