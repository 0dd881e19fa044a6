//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package store

import "os"

// lockFile does nothing where flock is missing: one store per file is then
// the caller's promise.
func lockFile(f *os.File) error { return nil }
