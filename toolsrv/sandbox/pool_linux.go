package sandbox

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const poolSupported = true

// startWarm starts a pre-started helper from a clean state: directory /,
// no environment but GOMAXPROCS=1 (for its own runtime: fewer threads to
// end at exec), /dev/null for stdin and stdout, this process's stderr for
// the helper's own messages, its socket on fd 3 and its confining stage's
// on fd 4. It is in a process group of its own, which the call's
// processes share, and dies with the thread that started it (Pdeathsig,
// as for [Command]).
func startWarm() (*warmHelper, error) {
	var ours, theirs [2]int
	for i := range 2 {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			for j := range i {
				unix.Close(ours[j])
				unix.Close(theirs[j])
			}
			return nil, fmt.Errorf("sandbox: helper socket: %w", err)
		}
		ours[i], theirs[i] = pair[0], pair[1]
	}
	ctl, call := os.NewFile(uintptr(theirs[0]), "helper"), os.NewFile(uintptr(theirs[1]), "call")
	defer ctl.Close()
	defer call.Close()
	fail := func(err error) (*warmHelper, error) {
		unix.Close(ours[0])
		unix.Close(ours[1])
		return nil, fmt.Errorf("sandbox: starting a helper: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return fail(err)
	}
	defer null.Close()
	// /proc/self/exe: this very binary, even if a deploy has replaced the
	// file since, so both ends speak the same protocol.
	proc, err := os.StartProcess("/proc/self/exe", []string{os.Args[0], helperArg, warmArg}, &os.ProcAttr{
		Dir:   "/",
		Env:   helperEnv(),
		Files: []*os.File{null, null, os.Stderr, ctl, call},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fail(err)
	}
	return &warmHelper{proc: proc, sock: ours[0], call: ours[1]}, nil
}

// alive reports whether the helper still waits: before a call it never
// writes, so its socket shows input or a hang-up only once it has died
// (its confining stage then dies too, Pdeathsig).
func (h *warmHelper) alive() bool {
	fds := []unix.PollFd{{Fd: int32(h.sock), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}
