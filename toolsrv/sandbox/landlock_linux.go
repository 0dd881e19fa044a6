package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Kernel describes the running kernel's Landlock support.
type Kernel struct {
	ABI    int    // the Landlock ABI version; 0 when there is no Landlock
	Reason string // why there is none, when ABI is 0
}

func (k Kernel) String() string {
	if k.ABI == 0 {
		return "no Landlock: " + k.Reason
	}
	return fmt.Sprintf("Landlock ABI %d", k.ABI)
}

// Status reports the kernel's Landlock ABI. It is probed once.
func Status() Kernel { return status() }

var status = sync.OnceValue(func() Kernel {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, syscall.ENOSYS):
		return Kernel{Reason: "the kernel was built without Landlock"}
	case errors.Is(err, syscall.EOPNOTSUPP):
		return Kernel{Reason: "Landlock is not enabled: add landlock to the kernel's lsm= boot parameter"}
	case err != nil:
		return Kernel{Reason: err.Error()}
	case v <= 0:
		return Kernel{Reason: fmt.Sprintf("the kernel reports Landlock ABI %d", v)}
	}
	// Like go-landlock: ABI 6 with the signal-scoping bug unfixed counts as
	// 5, so that this package and the library agree on what can be asked.
	if v >= 6 {
		if errata, err := ll.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return Kernel{ABI: min(v, len(abiConfigs)-1)}
})

// abiConfigs holds go-landlock's full configuration for each ABI; this
// package takes the filesystem rights from it.
var abiConfigs = []landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4,
	landlock.V5, landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}

const (
	readRights  = ll.AccessFSReadFile | ll.AccessFSReadDir
	execRights  = readRights | ll.AccessFSExecute
	writeRights = readRights | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo |
		ll.AccessFSMakeSym | ll.AccessFSRefer | ll.AccessFSResolveUnix
	// Rights the kernel accepts on a rule for a file rather than a directory.
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile |
		ll.AccessFSTruncate | ll.AccessFSIoctlDev | ll.AccessFSResolveUnix
)

// rights maps a policy's Access on a file of the given mode to Landlock
// rights. Write never includes making device nodes: a device node made in a
// writable directory would reopen a disk or terminal behind Landlock's back
// (only root can make one, and root is exactly who must not). Write on a
// device file adds ioctl, so that a listed /dev/tty works as a terminal
// (and can inject keystrokes with TIOCSTI, which is why the default profile
// lists no terminal).
func rights(a Access, mode os.FileMode) landlock.AccessFSSet {
	var r landlock.AccessFSSet
	if a&Read != 0 {
		r |= readRights
	}
	if a&Exec != 0 {
		r |= execRights
	}
	if a&Write != 0 {
		r |= writeRights
		if mode&os.ModeDevice != 0 {
			r |= ll.AccessFSIoctlDev
		}
	}
	if !mode.IsDir() {
		r &= fileRights
	}
	return r
}

// apply restricts the calling thread, and whatever it execs, to p; tool,
// the executable about to be run, may be read and executed whatever p says.
// One Landlock domain holds the filesystem, network and scope rules.
//
// Only the calling thread is restricted, and it stays locked to the calling
// goroutine: the caller must exec from it or exit. That is sound because
// execve runs the new program with the calling thread's credentials (its
// Landlock domain and no_new_privs) and ends every other thread, and it
// spares the signalling of every runtime thread that restricting the whole
// process takes. Forking the tool from the thread instead is sound only
// with ptrace of this process refused to the tool: the tool could ptrace
// that thread, which shares memory with free ones (see supervise, and
// initCall, which forks so in a call's own pid namespace). ownProc says
// the call has a /proc of its own (ruleFor).
func apply(p *Policy, tool string, ownProc bool) error {
	rs, err := newRuleset(p)
	if err != nil || rs == nil {
		return err
	}
	defer rs.close()
	if err := rs.addPaths(p.Paths, ownProc); err != nil {
		return err
	}
	return rs.restrict(tool)
}

// A ruleset is a Landlock ruleset being built for p: its network rules
// are in, its path rules are added by addPaths, and restrict enforces it.
// A pre-started stage builds one for the policy it expects before its call
// comes (prepare_linux.go), and adds the call's own rules to it then.
type ruleset struct {
	fd    int
	flags uint32
	cfg   landlock.Config
}

// newRuleset checks that the kernel enforces p, or that p is best effort,
// and returns a ruleset holding p's network rules; nil where there is no
// Landlock to enforce anything (a best-effort policy: Enforcement says so
// loudly).
func newRuleset(p *Policy) (*ruleset, error) {
	abi := Status().ABI
	if err := check(abi, p); err != nil {
		return nil, err
	}
	if abi == 0 {
		return nil, nil
	}
	cfg := landlock.Config{HandledAccessFS: abiConfigs[abi].HandledAccessFS}
	if abi >= 4 {
		// TCP only, whatever the ABI: the profile has no UDP rules, and
		// handling UDP on ABI 10 would make the same profile deny DNS there
		// and allow it elsewhere.
		if !p.Bind.Any {
			cfg.HandledAccessNet |= ll.AccessNetBindTCP
		}
		if !p.Connect.Any {
			cfg.HandledAccessNet |= ll.AccessNetConnectTCP
		}
	}
	if abi >= 6 {
		cfg.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	var rules []landlock.Rule
	if cfg.HandledAccessNet&ll.AccessNetBindTCP != 0 {
		for _, port := range p.Bind.Ports {
			rules = append(rules, landlock.BindTCP(port))
		}
	}
	if cfg.HandledAccessNet&ll.AccessNetConnectTCP != 0 {
		for _, port := range p.Connect.Ports {
			rules = append(rules, landlock.ConnectTCP(port))
		}
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return nil, fmt.Errorf("sandbox: landlock: %w", err)
	}
	if fd < 0 {
		return nil, errors.New("sandbox: landlock: empty ruleset") // cfg always handles filesystem rights
	}
	return &ruleset{fd: fd, flags: flags, cfg: cfg}, nil
}

func (rs *ruleset) close() { unix.Close(rs.fd) }

// addPaths adds a rule for each of rules. Each path is opened here,
// without following a link, and the rule is made on what was opened: a
// path swapped for a link since the policy was resolved is refused, not
// followed. The rule holds the file itself from then on, whatever is
// later renamed or linked where its path was.
func (rs *ruleset) addPaths(rules []PathRule, ownProc bool) error {
	for _, r := range rules {
		path, keepID := ruleFor(r.Path, ownProc)
		id := r.ID
		if !keepID {
			id = nil
		}
		if err := rs.add(path, r.Access, id, false); err != nil {
			return err
		}
	}
	return nil
}

// add adds the rule for one path: opened without following a link, or,
// with follow, as execve would find it.
func (rs *ruleset) add(path string, a Access, id *FileID, follow bool) error {
	var fd int
	var err error
	if follow {
		if fd, err = unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0); err != nil {
			err = &os.PathError{Op: "open", Path: path, Err: err}
		}
	} else {
		fd, err = openNoFollow(path, unix.O_PATH)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil // gone since Resolve; nothing beneath it to allow
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, mode, err := fdID(fd)
	if err == nil {
		err = checkID(fd, path, id)
	}
	if err != nil {
		return err
	}
	r := rights(a, fileMode(mode)) & rs.cfg.HandledAccessFS
	if r == 0 {
		return nil
	}
	attr := ll.PathBeneathAttr{ParentFd: fd, AllowedAccess: uint64(r)}
	if err := ll.LandlockAddPathBeneathRule(rs.fd, &attr, 0); err != nil {
		return fmt.Errorf("sandbox: landlock: adding a rule for %s: %w", path, err)
	}
	return nil
}

// restrict adds the rule for tool, the executable about to be run, as
// the caller named it, which may be a link (/bin/sh: the caller chose it,
// and execve follows it anyway), and restricts the calling thread to the
// ruleset (see apply).
func (rs *ruleset) restrict(tool string) error {
	if err := rs.add(tool, Exec, nil, true); err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: see apply
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(rs.fd, rs.flags); err != nil {
		return fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
	}
	if rs.cfg.HandledAccessNet != 0 {
		return denyMPTCP() // see mptcp_linux.go
	}
	return nil
}

// fileMode is the os.FileMode of a stat mode, as far as rights needs it.
func fileMode(m uint32) os.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return os.ModeDir
	case unix.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		return os.ModeDevice
	case unix.S_IFSOCK:
		return os.ModeSocket
	case unix.S_IFIFO:
		return os.ModeNamedPipe
	}
	return 0
}

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// growPipe makes the pipe behind w hold at least n bytes, so the policy
// can be written whole before the helper starts.
func growPipe(w *os.File, n int) error {
	if n <= 64<<10 {
		return nil // the default pipe size on Linux
	}
	got, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, n)
	if err == nil && got < n {
		err = fmt.Errorf("pipe holds %d bytes", got)
	}
	return err
}
