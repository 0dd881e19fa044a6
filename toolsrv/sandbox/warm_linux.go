package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// A pre-started helper (see [Pool]) is the same two stages as a helper
// [Command] starts, started before there is a call: the outer stage
// (warmMain) is the subreaper and has already started its confining stage
// (warmConfineMain), which waits for the call. When the call comes on fd
// 3, a socket, with the call's stdin, stdout and stderr, the outer stage
// sets the call's pids.max and hands the call on; the confining stage
// takes the descriptors as its own 0, 1 and 2, changes to the call's
// directory, applies the limits and Landlock and execs the tool. From
// there on it is a helper like any other: it forwards signals, reaps
// everything the call started and exits with the tool's status.
//
// Both stages start from a clean state: no environment, directory /,
// /dev/null as stdin and stdout, the toolsrv's log as stderr, nothing else.
// The call brings its environment, directory and descriptors; its profile
// decides what of them the tool keeps, as on the cold path.

// warmMain is the outer stage of a pre-started helper. It never returns.
func warmMain() {
	closeInherited()
	// Listen first, as helper does: a Kill that comes as soon as the call
	// is handed over must not be lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, killSignal)
	// The confining stage dies with this thread (Pdeathsig).
	runtime.LockOSThread()
	code := warm(sigs)
	if callStderr != nil {
		// The call's output ends with the status: a caller that copies
		// stderr from a pipe need not wait for this process's exit.
		callStderr.Close()
	}
	if statusFD >= 0 {
		// The call's status, sent before this process exits: the pool's
		// Wait returns once the call is over, without waiting for a Go
		// process to tear itself down (about a millisecond here).
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(code))
		unix.Write(statusFD, b[:])
	}
	os.Exit(code)
}

// callStderr is the call's stderr, where this stage's own messages about
// the call go.
var callStderr *os.File

// statusFD is the socket a received call's status goes back on, -1
// before a call came.
var statusFD = -1

func warm(sigs chan os.Signal) int {
	fail := func(w io.Writer, err error) int {
		fmt.Fprintln(w, err)
		return 126
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(os.Stderr, fmt.Errorf("sandbox: prctl(PR_SET_CHILD_SUBREAPER): %w", err))
	}
	// For root, the call's cgroup is made now, off the call's path; its
	// pids.max comes with the call.
	var cg *callCgroup
	var cgErr error
	if nprocExempt() {
		if parent, err := pidsCgroupParent(); err == nil {
			cg, cgErr = makeCallCgroup(parent)
		}
	}
	removeCg := func(stderr io.Writer) {
		if cg != nil {
			if err := cg.remove(); err != nil {
				fmt.Fprintln(stderr, err)
			}
		}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		removeCg(os.Stderr)
		return fail(os.Stderr, fmt.Errorf("sandbox: socketpair: %w", err))
	}
	stageEnd := os.NewFile(uintptr(pair[1]), "call")
	stage, err := os.StartProcess("/proc/self/exe", []string{os.Args[0], helperArg, warmConfineArg}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{"GOMAXPROCS=1"},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, stageEnd},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	stageEnd.Close()
	if err != nil {
		removeCg(os.Stderr)
		return fail(os.Stderr, fmt.Errorf("sandbox: starting the confining stage: %w", err))
	}
	abandon := func(stderr io.Writer) {
		unix.Close(pair[0])
		stage.Kill()
		reap(stage.Pid)
		removeCg(stderr)
	}
	// The stage waits for its call, so it is in the cgroup before it can
	// start anything.
	if cg != nil {
		if err := cg.add(stage.Pid); err != nil {
			abandon(os.Stderr)
			return fail(os.Stderr, err)
		}
	}

	warmUp(false)
	data, fds, err := recvFramed(callFD, maxCall)
	if err != nil {
		unix.Close(callFD)
		closeFDs(fds)
		abandon(os.Stderr)
		if errors.Is(err, io.EOF) {
			return 0 // the pool closed, or its toolsrv ended, before a call
		}
		return fail(os.Stderr, fmt.Errorf("sandbox: receiving the call: %w", err))
	}
	// From here on the pool waits for the call's status on the socket.
	statusFD = callFD
	if len(fds) != 3 {
		closeFDs(fds)
		abandon(os.Stderr)
		return fail(os.Stderr, fmt.Errorf("sandbox: the call came with %d descriptors, not stdin, stdout and stderr", len(fds)))
	}
	stderr := os.NewFile(uintptr(fds[2]), "stderr")
	callStderr = stderr
	_, p, err := decodeCall(data)
	if err == nil {
		err = p.Check()
	}
	if err != nil {
		closeFDs(fds[:2])
		abandon(stderr)
		return fail(stderr, err)
	}
	if lim := p.Limits.effective(); lim.Processes != Unlimited {
		switch {
		case cg != nil:
			if err := cg.setMax(lim.Processes); err != nil {
				fmt.Fprintf(stderr, "%v: running the tool without limits.processes\n", err)
			}
		case cgErr != nil:
			fmt.Fprintf(stderr, "%v: running the tool without limits.processes\n", cgErr)
		}
	}
	err = sendFramed(pair[0], data, fds)
	unix.Close(pair[0])
	closeFDs(fds[:2]) // the tool has them; stderr stays for this stage's messages
	if err != nil {
		stage.Kill()
		reap(stage.Pid)
		removeCg(stderr)
		return fail(stderr, fmt.Errorf("sandbox: handing the call to the confining stage: %w", err))
	}

	go func() {
		for s := range sigs {
			if s == killSignal {
				s = syscall.SIGKILL
			}
			// By pidfd: once the tool is reaped this fails rather than
			// reaching a process that got its pid.
			stage.Signal(s)
		}
	}()
	ws := reap(stage.Pid)
	removeCg(stderr)
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return fail(stderr, fmt.Errorf("sandbox: tool ended with wait status %#x", int(ws)))
}

// warmConfineMain is the confining stage of a pre-started helper: it waits
// for the call, takes its descriptors and directory, and confines itself
// and execs the tool as the cold path's stage does. It never returns.
func warmConfineMain() {
	closeInherited()
	warmUp(true)
	data, fds, err := recvFramed(callFD, maxCall)
	unix.Close(callFD)
	if errors.Is(err, io.EOF) {
		closeFDs(fds)
		os.Exit(0) // the outer stage ended before a call
	}
	if err == nil && len(fds) != 3 {
		err = fmt.Errorf("the call came with %d descriptors", len(fds))
	}
	if err != nil {
		closeFDs(fds)
		fmt.Fprintf(os.Stderr, "sandbox: receiving the call: %v\n", err)
		os.Exit(126)
	}
	// Received descriptors are numbered above 3 (0–3 were open), so none
	// is overwritten before it is duplicated.
	for i, fd := range fds {
		if err := unix.Dup3(fd, i, 0); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox: taking the call's descriptor %d: %v\n", i, err)
			os.Exit(126)
		}
	}
	closeFDs(fds)
	m, p, err := decodeCall(data)
	if err == nil && m.Dir != "" {
		if err = os.Chdir(m.Dir); err != nil {
			err = fmt.Errorf("sandbox: %w", err)
		}
	}
	if err == nil {
		err = confine(p, m.Path, m.Argv, m.Env)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(126)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// recvFramed reads what sendFramed wrote: the data, of at most max bytes,
// and the descriptors, close-on-exec. A socket closed before anything came
// is io.EOF.
func recvFramed(fd, max int) ([]byte, []int, error) {
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	var fds []int
	got := 0
	for got < len(hdr) {
		n, oobn, _, _, err := unix.Recvmsg(fd, hdr[got:], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fds, err
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, fds, err
			}
			for i := range msgs {
				if rights, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, rights...)
				}
			}
		}
		if n == 0 {
			if got == 0 {
				return nil, fds, io.EOF
			}
			return nil, fds, io.ErrUnexpectedEOF
		}
		got += n
	}
	size := int(binary.BigEndian.Uint32(hdr[:]))
	if size > max {
		return nil, fds, fmt.Errorf("a call of %d bytes exceeds %d", size, max)
	}
	data := make([]byte, size)
	for got := 0; got < size; {
		n, err := unix.Read(fd, data[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fds, err
		}
		if n == 0 {
			return nil, fds, io.ErrUnexpectedEOF
		}
		got += n
	}
	return data, fds, nil
}

// warmUp runs, while the stage waits, the code a call will run: decoding a
// call and, for the confining stage, building (not applying) a Landlock
// ruleset. A process runs code it has not run before at the price of page
// faults, which are dear on a virtual machine; taken now, they are off the
// call's path. Nothing of it stays: the ruleset is closed, the policy is
// made up.
func warmUp(confining bool) {
	p := &Policy{Paths: []PathRule{{Path: "/", Access: Read | Exec}}, Env: []string{"PATH"}}
	pol, _ := json.Marshal(p)
	data, _ := json.Marshal(callMsg{Path: "/bin/true", Argv: []string{"true"}, Env: []string{"PATH=/bin"}, Policy: pol})
	m, p, err := decodeCall(data)
	if err != nil || !confining {
		return
	}
	filterEnv(m.Env, p.Env)
	p.Limits.effective()
	if abi := Status().ABI; abi > 0 {
		cfg := landlock.Config{HandledAccessFS: abiConfigs[abi].HandledAccessFS}
		if fd, _, err := cfg.NewRulesetFD(landlock.PathAccess(rights(Read, os.ModeDir)&cfg.HandledAccessFS, "/")); err == nil && fd >= 0 {
			unix.Close(fd)
		}
	}
}

// closeInherited closes the descriptors above the socket that this process
// inherited by accident: those without close-on-exec, which whatever
// started olliesrv may have left open (the Go runtime opens its own with
// close-on-exec). A waiting helper holds nothing but what it was given.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= callFD {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}
