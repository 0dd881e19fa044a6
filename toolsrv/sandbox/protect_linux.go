package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The confining stage runs in a mount namespace of its own where the host
// allows one (root: always; a user: where unprivileged user namespaces
// exist), so that the protected paths beneath a directory the tool may
// write can be made read-only for this call alone, by the kernel: Landlock
// cannot carve a path out of a directory it allows, and a read-only mount
// holds whatever the tool does (Landlock forbids it to mount or unmount,
// and it keeps no capability). See [ProtectedPaths] and plan.

// nsArg is the confining stage's argument that says whether it was started
// in a mount namespace of its own ("ns") or not ("-", and why not after
// it: "-:REASON").
const nsArg = "ns"

// maxNoEntries bounds the entries of a directory that must take no new
// entry (a session in a home directory): each stays writable by a mount of
// its own.
const maxNoEntries = 2000

// stageProc starts the confining stage with argv(ns) and attr, in a mount
// namespace of its own if the host allows one, and says which it got.
//
// With ownProcEnv set (the host was probed for it), it asks for a pid
// namespace as well, in which the stage mounts the call's own /proc
// (init_linux.go).
func stageProc(argv func(ns string) []string, attr *os.ProcAttr) (*os.Process, error) {
	if os.Getenv(noNSEnv) != "" {
		return os.StartProcess("/proc/self/exe", argv("-:$"+noNSEnv+" is set"), attr)
	}
	var err error
	for _, pid := range []bool{os.Getenv(ownProcEnv) != "", false} {
		sys := *attr.Sys
		withNS := *attr
		withNS.Sys = &sys
		nsAttr(&sys, pid)
		ns := nsArg
		if pid {
			ns = nsPidArg
		}
		var p *os.Process
		if p, err = os.StartProcess("/proc/self/exe", argv(ns), &withNS); err == nil {
			return p, nil
		}
		if !nsRefused(err) {
			return nil, err
		}
		if !pid {
			break
		}
	}
	return os.StartProcess("/proc/self/exe", argv("-:"+nsReason(err)), attr)
}

// hasNS reports whether the stage's ns argument says it has a mount
// namespace of its own.
func hasNS(ns string) bool { return ns == nsArg || ns == nsPidArg }

// nsAttr asks for a mount namespace, and a pid namespace too if pid; a
// user who is not root gets a user namespace as well, mapping the user to
// itself, and keeps CAP_SYS_ADMIN in it across the exec (ambient) only
// until the stage has made its mounts.
func nsAttr(sys *syscall.SysProcAttr, pid bool) {
	sys.Cloneflags = syscall.CLONE_NEWNS
	if pid {
		sys.Cloneflags |= syscall.CLONE_NEWPID
	}
	if os.Geteuid() == 0 {
		return
	}
	sys.Cloneflags |= syscall.CLONE_NEWUSER
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
	sys.GidMappingsEnableSetgroups = false
	sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
}

// nsRefused reports whether starting a process in new namespaces failed
// because the host does not allow it (rather than for a reason that would
// fail any start).
func nsRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) || errors.Is(err, syscall.EACCES)
}

func nsReason(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		err = se.Err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return "no user namespace: " + err.Error()
}

// Protection says how this host keeps the protected paths from tools: in
// a mount namespace per call ("read-only mounts"), or by refusing a call
// whose writable directory holds one ("refuse"), with the reason.
type Protection struct {
	Mounts bool
	Reason string // why not, when !Mounts
	// OwnProc: each call has a pid namespace and a /proc of its own too,
	// showing its own processes only (init_linux.go).
	OwnProc bool
}

func (p Protection) String() string {
	if p.Mounts && p.OwnProc {
		return "protected paths read-only in a mount namespace per call; its own processes alone in its /proc"
	}
	if p.Mounts {
		return "protected paths read-only in a mount namespace per call"
	}
	return "protected paths kept by refusing a writable directory that holds one (" + p.Reason + ")"
}

// HostProtection probes, once, how this host protects the protected
// paths: it starts a process as the confining stage would be started and
// has it make a mount.
func HostProtection() Protection { return hostProtection() }

var hostProtection = sync.OnceValue(func() Protection {
	if os.Getenv(noNSEnv) != "" {
		return Protection{Reason: "$" + noNSEnv + " is set"}
	}
	if !helperAware.Load() {
		return Protection{Reason: "not probed: this program cannot run the sandbox helper"}
	}
	probe := func(pid bool) ([]byte, error) {
		args := []string{helperArg, nsProbeArg}
		if pid {
			args = append(args, nsPidArg)
		}
		cmd := exec.Command("/proc/self/exe", args...)
		cmd.Env = runtimeEnv()
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		nsAttr(cmd.SysProcAttr, pid)
		return cmd.CombinedOutput()
	}
	if _, err := probe(true); err == nil {
		return Protection{Mounts: true, OwnProc: true}
	}
	out, err := probe(false)
	if err != nil {
		if nsRefused(err) {
			return Protection{Reason: nsReason(err)}
		}
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return Protection{Reason: "a mount namespace cannot be used: " + msg}
	}
	return Protection{Mounts: true}
})

// nsProbeArg, after helperArg, is HostProtection's probe.
const nsProbeArg = "nsprobe"

func nsProbeMain() {
	if err := privateMounts(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Args[len(os.Args)-1] == nsPidArg {
		if err := mountProc(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := bindSelf("/"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// privateMounts stops what this namespace mounts from reaching any other.
func privateMounts() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("sandbox: making the call's mounts private: %w", err)
	}
	return nil
}

// protectCall keeps p.Protect from the tool: in a namespace of its own
// (ns), by the mounts plan asks for; elsewhere, by refusing the call if
// the plan asks for any.
func protectCall(p *Policy, ns string) error {
	if len(p.Protect) == 0 {
		return nil
	}
	writable := p.writable()
	ops, err := plan(writable, p.Protect)
	if err != nil || len(ops) == 0 {
		return err
	}
	if !hasNS(ns) {
		reason := strings.TrimPrefix(ns, "-:")
		if reason == "-" || reason == "" {
			reason = "no mount namespace"
		}
		return &ProtectError{Dir: writableHolding(writable, ops[len(ops)-1].Path), Protected: firstProtected(p, ops), Reason: reason}
	}
	if err := privateMounts(); err != nil {
		return err
	}
	marked := make(map[string]bool, len(ops))
	for _, op := range ops {
		marked[op.Path] = true
	}
	for _, op := range ops {
		var err error
		switch op.Kind {
		case opPin:
			err = bindSelf(op.Path)
		case opReadOnly:
			if err = bindSelf(op.Path); err == nil {
				err = readOnly(op.Path, true)
			}
		case opNoEntries:
			err = noEntries(op.Path, marked)
		}
		if err != nil {
			return fmt.Errorf("sandbox: protecting %s: %w", op.Path, err)
		}
	}
	return nil
}

// writableHolding is the writable directory that holds path.
func writableHolding(writable []string, path string) string {
	for _, w := range writable {
		if within(path, w) {
			return w
		}
	}
	return path
}

// firstProtected is a protected path the plan's operations are for, to
// name in a refusal.
func firstProtected(p *Policy, ops []mountOp) string {
	for _, op := range ops {
		for _, pr := range p.Protect {
			if within(pr, op.Path) {
				return pr
			}
		}
	}
	return ops[0].Path
}

// noEntries makes dir take no new entry, and lets none of its entries be
// renamed or removed, while each entry that is a file or a directory
// stays as writable as it was: it gets a mount of its own, and then dir
// a read-only one on top of them. Entries in marked are mounts already.
func noEntries(dir string, marked map[string]bool) error {
	fd, err := openNoFollow(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), dir)
	ents, err := f.ReadDir(maxNoEntries + 1)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(ents) > maxNoEntries {
		return fmt.Errorf("it has more than %d entries, each of which would need a mount of its own to stay writable (give the session a directory of its own)", maxNoEntries)
	}
	for _, e := range ents {
		child := dir + "/" + e.Name()
		if dir == "/" {
			child = "/" + e.Name()
		}
		if marked[child] || !(e.IsDir() || e.Type().IsRegular()) {
			// Links, sockets, fifos and devices stay as they are: the
			// read-only directory keeps them from being replaced.
			continue
		}
		if err := bindSelf(child); err != nil {
			return err
		}
	}
	if err := bindSelf(dir); err != nil {
		return err
	}
	return readOnly(dir, false)
}

// bindSelf mounts path on itself, with everything mounted beneath it. It
// reaches path by a descriptor opened without following links, so the
// mount lands on the file that was checked.
func bindSelf(path string) error {
	fd, err := openNoFollow(path, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	at := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(at, at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount of %s: %w", path, err)
	}
	return nil
}

// readOnly makes the mount on top of path read-only, and with rec every
// mount beneath it too. Only the read-only flag changes: what else the
// mount had (nosuid, nodev, noexec) stays.
func readOnly(path string, rec bool) error {
	fd, err := openNoFollow(path, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags := uint(unix.AT_EMPTY_PATH)
	if rec {
		flags |= unix.AT_RECURSIVE
	}
	if err := unix.MountSetattr(fd, "", flags, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("making %s read-only: %w", path, err)
	}
	return nil
}

// openNoFollow opens path with flags (and O_CLOEXEC) without following a
// symbolic link anywhere in it; /proc/self and /proc/thread-self, which
// are links by nature, are followed there and nowhere below.
func openNoFollow(path string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS}
	dir, rel := unix.AT_FDCWD, path
	for _, self := range []string{"/proc/self", "/proc/thread-self"} {
		if path == self || strings.HasPrefix(path, self+"/") {
			d, err := unix.Open(self, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, fmt.Errorf("sandbox: %s: %w", self, err)
			}
			defer unix.Close(d)
			dir, rel = d, "."+strings.TrimPrefix(path, self)
			how.Resolve |= unix.RESOLVE_BENEATH
		}
	}
	for {
		fd, err := unix.Openat2(dir, rel, how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ELOOP:
			return -1, fmt.Errorf("sandbox: %s now leads through a symbolic link, which it did not when the call's policy was resolved: refusing rather than following it", path)
		case err != nil:
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// fdID is the file fd refers to, and its mode.
func fdID(fd int) (FileID, uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, 0, err
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, st.Mode, nil
}

// Identify returns the file path names now, reached without following a
// symbolic link: what a [PathRule]'s ID holds.
func Identify(path string) (FileID, error) {
	fd, err := openNoFollow(path, unix.O_PATH)
	if err != nil {
		return FileID{}, err
	}
	defer unix.Close(fd)
	id, _, err := fdID(fd)
	return id, err
}

// checkID fails unless fd is the file want names, when it names one.
func checkID(fd int, path string, want *FileID) error {
	if want == nil {
		return nil
	}
	got, _, err := fdID(fd)
	if err != nil {
		return fmt.Errorf("sandbox: %s: %w", path, err)
	}
	if got != *want {
		return fmt.Errorf("sandbox: refusing to run the tool: %s is not the directory it was when the session was made (it was moved or replaced since); make a new session for the directory there now", path)
	}
	return nil
}

// enterDir makes dir the working directory, reached without following a
// link and after the call's mounts, so that the tool works beneath them;
// a rule for dir with an ID must still name it.
func enterDir(p *Policy, dir string) error {
	fd, err := openNoFollow(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("sandbox: the call's directory: %w", err)
	}
	defer unix.Close(fd)
	for _, r := range p.Paths {
		if r.Path == dir {
			if err := checkID(fd, dir, r.ID); err != nil {
				return err
			}
		}
	}
	if err := unix.Fchdir(fd); err != nil {
		return fmt.Errorf("sandbox: chdir %s: %w", dir, err)
	}
	return nil
}

// dropCaps leaves the calling thread, which is about to exec the tool,
// with no capability: a stage that is not root got CAP_SYS_ADMIN in its
// user namespace only to make its mounts.
func dropCaps() error {
	if os.Geteuid() == 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: dropping capabilities: %w", err)
	}
	return nil
}
