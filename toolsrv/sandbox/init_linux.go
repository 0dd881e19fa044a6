package sandbox

// A call's own pid namespace and /proc. Landlock pins a path to the inode
// it names when the rule is made, so /proc/self in a profile could only
// ever be the confining stage's own entry: a program the tool started
// found none of its own (df: "cannot read table of mounted file systems",
// ps, and runtimes that size themselves from /proc/self). All of /proc
// would show every process of the host. In a pid namespace of its own,
// with a /proc mounted for it, a call's /proc holds the call's processes
// and nothing else, so the profile's /proc/self gives it the whole of its
// own /proc (ruleFor).
//
// The confining stage is then the namespace's init, pid 1: the kernel
// drops a signal to it that it has no handler for, so it does not exec
// the tool but starts it as its one child and stays, forwarding signals
// and reaping, until the tool exits; the kernel then kills whatever of
// the call is left.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maskedProc are the files of a fresh /proc that root's capabilities
// would let a tool read although no profile means it to: kernel memory,
// the kernel's log and symbols, other users' keys and the scheduler's
// view of every process. A stage that is not root drops every
// capability, which closes them anyway; root's tool keeps its own.
var maskedProc = []string{
	"/proc/kcore", "/proc/kmsg", "/proc/kallsyms", "/proc/keys", "/proc/key-users",
	"/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup",
	"/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
}

// A stage confines the thread it runs on, and the tool's signals to its
// parent (kill $PPID, the init) are checked against the thread group's
// leader: the stages run on the main thread, so that the leader is the
// confined one and the tool sees its parent the same way on every call
// (whichever thread the scheduler had put the stage on, it saw EPERM or
// success at random).
func init() {
	if len(os.Args) > 1 && os.Args[1] == helperArg {
		runtime.LockOSThread()
	}
}

// procMounted says a pre-started stage mounted its /proc while it waited.
var procMounted bool

// initSignals are the signals an init forwards to its tool.
var initSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// earlySignals, when a pre-started stage set it up while it waited,
// already receives initSignals: the Go runtime starts a thread of its own
// for signals the first time one is asked for, a millisecond or more of
// a call's path on a small virtual machine.
var earlySignals chan os.Signal

// listenEarly is called by a waiting stage, off the call's path. Until
// the returned stop is called, a signal ends the stage as its default
// action would have; after, it waits in earlySignals for the tool.
func listenEarly() (stop func()) {
	earlySignals = make(chan os.Signal, 8)
	signal.Notify(earlySignals, initSignals...)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-earlySignals:
			os.Exit(128 + int(s.(syscall.Signal)))
		case <-quit:
		}
	}()
	return func() { close(quit); <-done }
}

// pendingSignal is a signal that came to a pre-started stage between its
// call and its tool's start: it ends the stage, as before the call.
func pendingSignal() (syscall.Signal, bool) {
	select {
	case s := <-earlySignals:
		return s.(syscall.Signal), true
	default:
		return 0, false
	}
}

// mountProc mounts a /proc of the stage's pid namespace on /proc, in its
// own mount namespace (made private first, so nothing reaches the host).
func mountProc() error {
	if err := privateMounts(); err != nil {
		return err
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("sandbox: mounting the call's /proc: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	for _, f := range maskedProc {
		err := unix.Mount("/dev/null", f, "", unix.MS_BIND, "")
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("sandbox: masking %s in the call's /proc: %w", f, err)
		}
	}
	return nil
}

// ruleFor is the path a profile's rule names in a call with its own /proc,
// and whether the inode recorded when the policy was resolved still
// stands: that was the host's /proc, not the call's, and nothing in a
// fresh /proc can be swapped for a link. /proc/self (and beneath it)
// becomes the call's whole /proc, so that every process of the call reads
// its own entry.
func ruleFor(path string, ownProc bool) (string, bool) {
	if !ownProc || path != "/proc" && !strings.HasPrefix(path, "/proc/") {
		return path, true
	}
	for _, self := range []string{"/proc/self", "/proc/thread-self"} {
		if path == self || strings.HasPrefix(path, self+"/") {
			return "/proc", false
		}
	}
	return path, false
}

// initCall starts tool as the only child of this process, the init of the
// call's pid namespace, from the thread apply confined (so the child has
// its Landlock domain, limits and capabilities), and exits with the
// tool's status once it has exited (128+N for signal N, as the outer
// stage reports it). SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
// are forwarded to the tool; orphans are reaped meanwhile.
//
// Forking from the confined thread needs care that exec does not: the
// tool could ptrace that thread, which shares its memory with threads
// Landlock does not confine and that keep the stage's capabilities. So
// this process is made not dumpable, which refuses ptrace (and
// /proc/PID/mem, process_vm_writev) to a caller without CAP_SYS_PTRACE,
// and a root stage drops that capability for good on this thread, which
// the tool inherits; a stage that is not root has dropped them all.
func initCall(tool string, argv, env []string) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: prctl(PR_SET_DUMPABLE): %w", err)
	}
	if os.Geteuid() == 0 {
		if err := dropPtrace(); err != nil {
			return err
		}
	}
	sigs := earlySignals
	if sigs == nil {
		sigs = make(chan os.Signal, 8)
		signal.Notify(sigs, initSignals...)
	} else if s, ok := pendingSignal(); ok {
		os.Exit(128 + int(s))
	}
	pid, err := syscall.ForkExec(tool, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		return execError(tool, err)
	}
	letGoOfIO()
	go func() {
		for s := range sigs {
			unix.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("sandbox: waiting for the tool: %w", err)
		case got != pid:
			continue // an orphan of the call, reparented here
		}
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		reportEarly(code)
		os.Exit(code)
	}
}

// quietFD, in a pre-started stage, is /dev/null, -1 elsewhere.
var quietFD = -1

// letGoOfIO points this process's stdin, stdout and stderr, the call's,
// at /dev/null once the tool has its own copies: the caller reads the
// call's output to its end, which comes when the last process holding
// the pipes lets go of them, and this one would only at its exit, after
// the status it sends early (reportEarly).
func letGoOfIO() {
	if quietFD < 0 {
		return
	}
	for fd := range 3 {
		unix.Dup3(quietFD, fd, 0)
	}
}

// statusFD, in a pre-started stage, is its socket to the pool, -1
// elsewhere.
var statusFD = -1

// reportEarly sends the call's status to the pool as soon as nothing of
// the call is left: it kills what the tool left in the namespace (as the
// kernel would once this init exits) and reaps it, then writes the
// status. This process's own exit, the namespace's teardown and the
// helper's run after it, off the call's path (about a millisecond). If
// anything fails, nothing is sent, and the pool waits for the helper's
// status, sent once the helper has reaped this process.
func reportEarly(code int) {
	if statusFD < 0 {
		return
	}
	// As pid 1 of the namespace: every process of the call but this one.
	if err := unix.Kill(-1, unix.SIGKILL); err != nil && err != unix.ESRCH {
		return
	}
	for {
		_, err := unix.Wait4(-1, nil, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ECHILD {
			break
		}
		if err != nil {
			return
		}
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(code))
	unix.Write(statusFD, b[:])
}

// execError says why tool could not be run.
func execError(tool string, err error) error {
	if errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("sandbox: exec %s: %w (the profile's exec paths must hold the tool's interpreter and loader, and its directory if it runs other programs from there)", tool, err)
	}
	return fmt.Errorf("sandbox: exec %s: %w", tool, err)
}

// dropPtrace takes CAP_SYS_PTRACE from the calling thread: from its
// bounding set, so nothing it execs regains it, and from the sets it holds.
func dropPtrace() error {
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_PTRACE, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: dropping CAP_SYS_PTRACE from the bounding set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: reading capabilities: %w", err)
	}
	bit := uint32(1) << (unix.CAP_SYS_PTRACE % 32)
	i := unix.CAP_SYS_PTRACE / 32
	data[i].Effective &^= bit
	data[i].Permitted &^= bit
	data[i].Inheritable &^= bit
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: dropping CAP_SYS_PTRACE: %w", err)
	}
	return nil
}
