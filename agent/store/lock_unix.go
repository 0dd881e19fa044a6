//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package store

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f, held until f is closed,
// so that two stores (in one process or two) never append to one file. The
// kernel drops it when a killed process's files close.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
