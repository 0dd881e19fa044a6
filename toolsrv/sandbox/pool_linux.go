package sandbox

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const poolSupported = true

// startWarm starts a pre-started helper from a clean state: directory /,
// no environment, /dev/null for stdin and stdout, this process's stderr
// for the helper's own messages, and its socket on fd 3. It is in a
// process group of its own, which the call's processes share, and dies
// with the thread that started it (Pdeathsig, as for [Command]).
func startWarm() (*warmHelper, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: helper socket: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "call")
	defer theirs.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	defer null.Close()
	// /proc/self/exe: this very binary, even if a deploy has replaced the
	// file since, so both ends speak the same protocol.
	proc, err := os.StartProcess("/proc/self/exe", []string{os.Args[0], helperArg, warmArg}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{"GOMAXPROCS=1"},
		Files: []*os.File{null, null, os.Stderr, theirs},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("sandbox: starting a helper: %w", err)
	}
	return &warmHelper{proc: proc, sock: pair[0]}, nil
}
