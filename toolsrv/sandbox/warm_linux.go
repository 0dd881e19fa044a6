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
// (warmConfineMain), which waits for the call. The pool holds a socket to
// each: the call, with its stdin, stdout and stderr, goes straight to the
// confining stage, which takes the descriptors as its own 0, 1 and 2,
// changes to the call's directory, sets the call's pids.max (root: the
// outer stage made the cgroup and put the stage in it before the call),
// applies the limits and Landlock and execs the tool; what it could do
// before the call it has done while it waited (prepare_linux.go). The
// outer stage, which is not on that path, waits for the tool from the
// start, forwards signals, reaps everything the call started, and sends
// the exit status back on its own socket before it exits; a stage that is
// its call's init sends it first, on its own (reportEarly).
//
// Both stages start from a clean state: no environment, directory /,
// /dev/null as stdin and stdout, the toolsrv's log as stderr, nothing else.
// The call brings its environment, directory and descriptors; its profile
// decides what of them the tool keeps, as on the cold path.

// stageFD is where the outer stage finds the confining stage's socket,
// which it passes on as the stage's callFD.
const stageFD = 4

// gateFD is where the confining stage finds the read end of a pipe whose
// end (EOF) says the stage is in the call's cgroup: a call handed to a
// helper started for it can come before the outer stage has moved the
// stage there, and what the stage started then would escape the call's
// limits.
const gateFD = 4

// warmMain is the outer stage of a pre-started helper. It never returns.
func warmMain() {
	closeInherited(stageFD)
	// Listen first, as helper does: a Kill that comes as soon as the call
	// is handed over must not be lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, killSignal)
	// The confining stage dies with this thread (Pdeathsig).
	runtime.LockOSThread()
	code := warm(sigs)
	// The call's status, sent before this process exits: the pool's Wait
	// returns once the call is over, without waiting for a Go process to
	// tear itself down (about a millisecond here). Before a call (the
	// pool closed) nobody reads it.
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(code))
	unix.Write(callFD, b[:])
	os.Exit(code)
}

func warm(sigs chan os.Signal) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 126
	}
	stageSock := os.NewFile(stageFD, "call")
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		stageSock.Close()
		return fail(fmt.Errorf("sandbox: prctl(PR_SET_CHILD_SUBREAPER): %w", err))
	}
	// The call's cgroups are made now, off the call's path; the stage
	// sets their limits when the call comes.
	cg, err := makeCallCgroup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	cgDir := cg.String()
	removeCg := func() {
		if cg != nil {
			if err := cg.remove(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
	gate, opened, err := os.Pipe()
	if err != nil {
		stageSock.Close()
		removeCg()
		return fail(fmt.Errorf("sandbox: the confining stage's gate: %w", err))
	}
	stage, err := stageProc(func(ns string) []string {
		return []string{os.Args[0], helperArg, warmConfineArg, ns, cgDir}
	}, &os.ProcAttr{
		Dir:   "/",
		Env:   helperEnv(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, stageSock, gate},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	stageSock.Close()
	gate.Close()
	if err != nil {
		opened.Close()
		removeCg()
		return fail(fmt.Errorf("sandbox: starting the confining stage: %w", err))
	}
	// Held until this process exits, after the call's status is sent: the
	// last reference to the stage's mount namespace tears it down, and
	// with a mount in it (its /proc, protected paths) that waits for an
	// RCU grace period, milliseconds the call need not wait for.
	holdMountNS(stage.Pid)
	// The stage waits for its call, so it is in the cgroup before it can
	// start anything.
	if cg != nil {
		if err := cg.add(stage.Pid); err != nil {
			stage.Kill()
			reap(stage.Pid)
			opened.Close()
			removeCg()
			return fail(err)
		}
	}
	opened.Close()
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
	removeCg()
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return fail(fmt.Errorf("sandbox: tool ended with wait status %#x", int(ws)))
}

// warmConfineMain is the confining stage of a pre-started helper: it waits
// for the call, takes its descriptors and directory, sets its pids.max,
// and confines itself and execs the tool as the cold path's stage does.
// Its argument is its cgroup's directory, or "-" for none. It never
// returns.
func warmConfineMain() {
	closeInherited(gateFD)
	warmUp()
	stopListening := func() {}
	if os.Args[len(os.Args)-2] == nsPidArg {
		// Off the call's path; confine tries again if this failed, and
		// then says why on the call's stderr.
		procMounted = mountProc() == nil
		stopListening = listenEarly()
	}
	waitGate()
	var prep *prepared
	data, fds, err := recvFramed(callFD, maxCall)
	if err == nil && len(data) > 0 && data[0] == prepareTag {
		closeFDs(fds)
		prep = prepare(data[1:], os.Args[len(os.Args)-1], os.Args[len(os.Args)-2] == nsPidArg)
		data, fds, err = recvFramed(callFD, maxCall)
	}
	stopListening()
	// Kept for the status (reportEarly), and never for the tool: it came
	// from the helper without close-on-exec.
	unix.FcntlInt(callFD, unix.F_SETFD, unix.FD_CLOEXEC)
	statusFD = callFD
	if errors.Is(err, io.EOF) {
		closeFDs(fds)
		os.Exit(0) // the pool closed before a call
	}
	if err == nil && (len(data) == 0 || data[0] != callTag) {
		err = errors.New("the pool sent something other than a call")
	}
	if err == nil && len(fds) != 3 {
		err = fmt.Errorf("the call came with %d descriptors, not stdin, stdout and stderr", len(fds))
	}
	if err != nil {
		closeFDs(fds)
		fmt.Fprintf(os.Stderr, "sandbox: receiving the call: %v\n", err)
		os.Exit(126)
	}
	// Kept for initCall, which lets go of the call's descriptors once the
	// tool has them: fd 0 is /dev/null until the call's replaces it.
	quietFD, _ = unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
	// Received descriptors are numbered above 3 (0–3 were open), so none
	// is overwritten before it is duplicated.
	for i, fd := range fds {
		if err := unix.Dup3(fd, i, 0); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox: taking the call's descriptor %d: %v\n", i, err)
			os.Exit(126)
		}
	}
	closeFDs(fds)
	m, p, err := decodeCall(data[1:], prep)
	if err == nil {
		setCallLimits(p, os.Args[len(os.Args)-1], prep)
		extra := m.Extra
		if !m.Prepared {
			prep = nil
		}
		err = confine(p, os.Args[len(os.Args)-2], m.Dir, m.Path, m.Argv, m.Env, prep, extra)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(126)
}

// waitGate returns once the outer stage has closed the gate: the stage
// is in the call's cgroup (see gateFD).
func waitGate() {
	var b [1]byte
	for {
		n, err := unix.Read(gateFD, b[:])
		switch {
		case err == unix.EINTR || err == nil && n > 0:
			continue
		case err != nil:
			fmt.Fprintf(os.Stderr, "sandbox: waiting to be in the call's cgroup: %v\n", err)
			os.Exit(126)
		}
		unix.Close(gateFD)
		return
	}
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
// call and building (not applying) a Landlock ruleset. A process runs code it has not run before at the price of page
// faults, which are dear on a virtual machine; taken now, they are off the
// call's path. Nothing of it stays: the ruleset is closed, the policy is
// made up.
func warmUp() {
	p := &Policy{Paths: []PathRule{{Path: "/", Access: Read | Exec}}, Env: []string{"PATH"}}
	pol, _ := json.Marshal(p)
	data, _ := json.Marshal(callMsg{Path: "/bin/true", Argv: []string{"true"}, Env: []string{"PATH=/bin"}, Policy: pol})
	m, p, err := decodeCall(data, nil)
	if err != nil {
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

// closeInherited closes the descriptors above last (its sockets) that this
// process inherited by accident: those without close-on-exec, which whatever
// started olliesrv may have left open (the Go runtime opens its own with
// close-on-exec). A waiting helper holds nothing but what it was given.
func closeInherited(last int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= last {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// closeAllOnExec marks every descriptor above stderr close-on-exec, so
// that the tool gets its stdin, stdout and stderr and nothing else,
// whichever way the helper was started (a descriptor its starter left
// without close-on-exec would otherwise reach the tool).
func closeAllOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// holdMountNS keeps process pid's mount namespace alive as long as this
// process (the descriptor is never closed; it is not inherited).
func holdMountNS(pid int) {
	unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}
