package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// killSignal, sent to the helper, ends its call at once: see [Kill].
const killSignal = syscall.SIGUSR1

// supervise is the helper's outer stage. It stays the parent of the call:
// a child subreaper, so that whatever the tool starts is reparented to it
// rather than to init when its parent exits, setsid or not. It starts the
// confining stage (the same binary with confineArg), which applies the
// limits and Landlock to itself and execs the tool in its own place;
// forwards SIGTERM and SIGINT to the tool; and when the tool has exited,
// kills and reaps every process that is left. It returns the tool's exit
// status, or 128+N if a signal N ended it.
//
// The confining is a process of its own, not a thread of this one: a
// Landlock domain on one thread of a process whose other threads are free
// would let the tool, being in that thread's domain, ptrace it and write
// into the memory the free threads run; and /proc/self in a profile must be
// the tool's own entry, which only the tool's process can open.
func supervise(data []byte, p *Policy, args []string) (int, error) {
	// The confining stage dies with this thread (Pdeathsig): it must live
	// as long as the process, so it is never unlocked.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("sandbox: prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	// A cgroup per call holds the call's memory, and for root (whom the
	// kernel exempts from RLIMIT_NPROC) its processes. Where there is none,
	// Enforcement says so.
	cg, err := newCallCgroup(p.Limits.effective())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v: running the tool without the call's cgroup limits\n", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("sandbox: policy pipe: %w", err)
	}
	defer w.Close()
	if err := growPipe(w, len(data)); err != nil {
		r.Close()
		return 0, fmt.Errorf("sandbox: policy pipe for %d bytes: %w", len(data), err)
	}
	sigs := helperSignals
	if sigs == nil {
		sigs = make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, killSignal)
	}

	// /proc/self/exe: this very binary, even if a deploy has replaced the
	// file since.
	tool, err := stageProc(func(ns string) []string {
		return append([]string{os.Args[0], helperArg, confineArg, ns}, args...)
	}, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, r},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	r.Close()
	if err != nil {
		if cg != nil {
			cg.remove()
		}
		return 0, fmt.Errorf("sandbox: starting the confined stage: %w", err)
	}
	// The confining stage waits for its policy, so it is in the cgroup
	// before it can start anything.
	if cg != nil {
		if err := cg.add(tool.Pid); err != nil {
			tool.Kill()
			reap(tool.Pid)
			cg.remove()
			return 0, err
		}
	}
	if _, err := w.Write(data); err != nil {
		tool.Kill() // it would fail on a partial policy anyway
	}
	w.Close()

	go func() {
		for s := range sigs {
			if s == killSignal {
				s = syscall.SIGKILL
			}
			// By pidfd: once the tool is reaped this fails rather than
			// reaching a process that got its pid.
			tool.Signal(s)
		}
	}()
	ws := reap(tool.Pid)
	if cg != nil {
		if err := cg.remove(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus(), nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), nil
	}
	return 0, fmt.Errorf("sandbox: tool ended with wait status %#x", int(ws))
}

// reap waits for the tool, reaping any orphan that exits meanwhile, then
// kills and reaps every process left, until this process has no child.
// Orphans of the call are reparented here (a subreaper), so killing the
// children repeatedly reaches every descendant.
func reap(tool int) unix.WaitStatus {
	var toolStatus unix.WaitStatus
	toolDone := false
	for {
		// __WALL: children made by clone with another exit signal than
		// SIGCHLD count too, or they would outlive the call unseen.
		flags := unix.WALL
		if toolDone {
			flags |= unix.WNOHANG
		}
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, flags, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil: // ECHILD: nothing is left
			return toolStatus
		case pid == tool:
			toolStatus, toolDone = ws, true
		case pid == 0:
			// Children remain, none has exited: kill them all and wait for
			// one. A child not yet reaped keeps its pid, so none of these
			// kills can reach another process.
			if killChildren() == 0 {
				time.Sleep(time.Millisecond) // one /proc could not show: poll
				continue
			}
			for {
				if _, err := unix.Wait4(-1, &ws, unix.WALL, nil); err != unix.EINTR {
					break
				}
			}
		}
	}
}

// killChildren sends SIGKILL to every child of this process and returns how
// many it found.
func killChildren() int {
	self := os.Getpid()
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	n := 0
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, _ := strconv.Atoi(name)
		if ppid(pid) == self {
			unix.Kill(pid, unix.SIGKILL)
			n++
		}
	}
	return n
}

// ppid reads the parent of pid from /proc/PID/stat, or returns -1.
func ppid(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 2 {
		return -1
	}
	n, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return -1
	}
	return n
}
