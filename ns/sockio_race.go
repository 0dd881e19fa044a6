//go:build linux && race

package ns

import "syscall"

// The race detector sees socket I/O as synchronisation only through
// syscall's Read and Write, which mark one shared variable (a write
// releases it, a successful read acquires it); the raw system calls of
// sockio_linux.go skip that, so a handler's writes looked unordered with
// a client in the same process that read its reply. Under the detector
// the raw path makes the same marks with calls that move no data.

// raceAcquireIO marks a read from fd: a read of nothing succeeds at once.
func raceAcquireIO(fd uintptr) { syscall.Read(int(fd), nil) }

// raceReleaseIO marks a write: syscall.Write marks before it fails on -1.
func raceReleaseIO() { syscall.Write(-1, nil) }
