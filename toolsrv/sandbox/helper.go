package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// helperArg, as the first argument, makes the binary the sandbox helper.
	helperArg = "__ollie_sandbox"
	// confineArg, after helperArg, makes it the helper's confining stage.
	confineArg = "confine"
	// policyFD is where the helper finds the policy: ExtraFiles[0].
	policyFD = 3
	// maxPolicy bounds the policy the helper reads: 1 MiB is thousands of
	// paths, and the most a pipe can be grown to without privilege.
	maxPolicy = 1 << 20
)

// Command returns a command that runs the tool at path with args under
// policy p. It runs the current executable as the sandbox helper, which
// reads p from an inherited pipe and stays the parent of the call while a
// child of its own applies p's limits and Landlock to itself, keeps only the
// environment variables p allows, and execs the tool in its own place. The
// tool's own executable may always be read and executed; everything else is
// as p says. The tool gets the helper's stdin, stdout, stderr and working
// directory.
//
// Every process the tool starts ends with the call, setsid or not: the
// helper is their subreaper, and once the tool has exited it kills and
// reaps whatever is left before it exits itself. The helper exits with the
// tool's exit status, or 128+N if signal N ended the tool. It forwards
// SIGTERM and SIGINT to the tool (signal the helper alone: a signal to the
// process group reaches the tool twice), and [Kill] ends the call at once.
// p.Limits bound the call's memory, processes and files (see [Limits];
// [Policy.Enforcement] says how this host applies them).
//
// Command refuses, with an error wrapping [ErrNoLandlock] or [ErrABITooOld],
// when the kernel cannot enforce p and p is not best effort. The helper
// checks again and exits 126 with a message on stderr on any failure, so a
// tool never runs with less than p asks.
//
// The command runs in its own process group, which the tool shares, and
// gets SIGKILL if the OS thread that started it exits (Pdeathsig: the Go
// runtime keeps its threads, except one whose goroutine exits while locked
// to it, so do not Start from such a goroutine); the tool dies with the
// helper. A helper killed outright (SIGKILL to it or its group, or its
// parent's death) cannot clean up: processes that left the group, by
// setsid, outlive it, except for root with a pids cgroup, where the next
// call's helper kills them. So cancel with [Kill], which Cancel is preset
// to.
//
// Stdin, Stdout, Stderr, Dir and WaitDelay are the caller's to set:
// typically Dir to the CWD the policy was resolved with, and a WaitDelay
// after which Wait kills the helper itself. cmd.Env starts as the parent's
// environment filtered by p's allowlist; the caller may append variables
// (PWD, TMPDIR, OLLIE_TOOLS_PATH), and the helper drops any the allowlist
// does not name. cmd.ExtraFiles[0] is the parent's end of the policy pipe:
// append to ExtraFiles rather than replacing it, and close it after Start
// (otherwise it is closed when the Cmd is garbage collected).
//
// The binary's main must begin with
//
//	if sandbox.IsHelper() {
//		sandbox.HelperMain()
//	}
func Command(ctx context.Context, p *Policy, path string, args []string) (*exec.Cmd, error) {
	if err := checkCall(p, path); err != nil {
		return nil, err
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("sandbox: finding the helper binary: %w", err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if len(data) > maxPolicy {
		return nil, fmt.Errorf("sandbox: policy of %d bytes exceeds %d", len(data), maxPolicy)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: policy pipe: %w", err)
	}
	// Written whole now, so nothing waits on the helper: a command never
	// started leaves no goroutine behind.
	if err := growPipe(w, len(data)); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sandbox: policy pipe for %d bytes: %w", len(data), err)
	}
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: writing policy: %w", err)
	}

	cmd := exec.CommandContext(ctx, self, append([]string{helperArg, "--", path}, args...)...)
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = withNoNS(filterEnv(os.Environ(), p.Env))
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return Kill(cmd.Process) }
	return cmd, nil
}

// Kill ends a call started by [Command] at once: the helper p kills the
// tool and every process it started, reaps them, and exits with status 137
// (128+SIGKILL). Unlike SIGKILL to the helper or its process group, it
// leaves nothing behind.
//
// A helper that has only just started may not listen yet: from its
// runtime's start until it calls signal.Notify, Go catches the signal and
// drops it (before that, the signal ends the helper, which has started
// nothing). So Kill sends it again every killResend until p has been
// waited for, for killPersist at most: a Kill that came at the start was
// lost, and the tool ran until the caller's SIGKILL after WaitDelay,
// which orphaned it and whatever it had started.
func Kill(p *os.Process) error {
	if err := p.Signal(killSignal); err != nil {
		return err
	}
	go func() {
		tick := time.NewTicker(killResend)
		defer tick.Stop()
		for end := time.Now().Add(killPersist); time.Now().Before(end); {
			<-tick.C
			// After Wait this fails (os.ErrProcessDone); until then p is
			// the helper or its zombie, never another process.
			if p.Signal(killSignal) != nil {
				return
			}
		}
	}()
	return nil
}

// How often and how long Kill sends its signal again.
const (
	killResend  = 10 * time.Millisecond
	killPersist = 10 * time.Second
)

// Unsandboxed returns a command that runs the tool at path with args
// without Landlock, for a bypass or elevation that has been approved. It
// escapes Landlock only: cmd.Env is still the parent's environment filtered
// by p's allowlist (what the caller appends is passed as is), and the
// process-group and parent-death settings are those of [Command]. The
// caller sets Stdin, Stdout, Stderr, Dir, Cancel and WaitDelay. No helper
// runs: there are no limits, and nothing ends the tool's descendants but
// what the caller does to the process group.
func Unsandboxed(ctx context.Context, p *Policy, path string, args []string) (*exec.Cmd, error) {
	if err := checkCall(p, path); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = filterEnv(os.Environ(), p.Env)
	cmd.SysProcAttr = sysProcAttr()
	return cmd, nil
}

func checkCall(p *Policy, path string) error {
	if p == nil {
		return errors.New("sandbox: no policy")
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("sandbox: tool path %q is not absolute", path)
	}
	return nil
}

// IsHelper reports whether this process was started by [Command] to be the
// sandbox helper. The binary's main calls it before anything else.
func IsHelper() bool {
	helperAware.Store(true)
	return len(os.Args) > 1 && os.Args[1] == helperArg
}

// helperAware records that this binary's main asked IsHelper, so that it
// may be re-executed as a helper: a binary that never asks would run its
// own main instead (a test binary, all its tests).
var helperAware atomic.Bool

// HelperMain is the sandbox helper. It never returns: it exits with the
// tool's exit status (see [Command]), or on any failure of its own writes
// the reason to stderr and exits 126, the shell's status for "found but
// could not run".
func HelperMain() {
	if len(os.Args) > 2 {
		switch os.Args[2] {
		case warmArg:
			warmMain()
		case warmConfineArg:
			warmConfineMain()
		case nsProbeArg:
			nsProbeMain()
		}
	}
	code, err := helper(os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(126)
	}
	os.Exit(code)
}

// helperSignals receives the outer stage's signals from its start.
var helperSignals chan os.Signal

// helper runs the outer stage (supervise) or, with confineArg, the
// confining stage, which returns only on failure.
func helper(args []string) (int, error) {
	confining := len(args) > 1 && args[0] == confineArg
	ns := ""
	if confining {
		ns, args = args[1], args[2:]
	} else {
		// The caller may end the call the moment it has started it: a
		// Kill before supervise listened would be ignored, and the
		// caller's last resort, SIGKILL, would leave the tool to outlive
		// the call. Listen first; supervise acts on what came.
		helperSignals = make(chan os.Signal, 8)
		signal.Notify(helperSignals, syscall.SIGTERM, syscall.SIGINT, killSignal)
	}
	if len(args) < 2 || args[0] != "--" {
		return 0, errors.New("sandbox: usage: " + helperArg + " -- TOOL [ARGS...] with the policy on fd 3 (run tools through sandbox.Command)")
	}
	// Only a pipe is taken for the policy: run by hand, fd 3 may be
	// something the Go runtime opened for itself.
	var st syscall.Stat_t
	if err := syscall.Fstat(policyFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return 0, fmt.Errorf("sandbox: no policy on fd %d (run tools through sandbox.Command)", policyFD)
	}
	p, data, err := readPolicy(os.NewFile(policyFD, "policy"))
	if err != nil {
		return 0, err
	}
	if confining {
		// The outer stage started this one in the call's directory, by
		// name; confine enters it again once the call's mounts are made.
		dir, err := os.Getwd()
		if err != nil {
			return 0, fmt.Errorf("sandbox: the call's directory: %w", err)
		}
		return 0, confine(p, ns, dir, args[1], args[1:], os.Environ(), nil, nil)
	}
	return supervise(data, p, args)
}

// confine applies p's limits, its protected paths (ns says whether this
// process has a mount namespace of its own), its directory dir ("" for
// none) and Landlock to this process and execs tool with argv and the
// variables of env that p allows in its place. It returns only on
// failure. prep, when not nil, is what a pre-started stage prepared for
// p without its per-call rules extra (applyPrepared).
func confine(p *Policy, ns, dir, tool string, argv, env []string, prep *prepared, extra []PathRule) error {
	if err := setLimits(p.Limits.effective()); err != nil {
		return err
	}
	// Before Landlock, which may hide /proc from this process.
	closeAllOnExec()
	ownProc := ns == nsPidArg
	if ownProc && !procMounted {
		if err := mountProc(); err != nil {
			return err
		}
	}
	if err := protectCall(p, ns); err != nil {
		return err
	}
	// After the mounts: a directory entered before them would be beneath
	// the mounts they cover, where the protected paths are not protected.
	if dir != "" {
		if err := enterDir(p, dir); err != nil {
			return err
		}
	}
	if err := applyPrepared(p, prep, extra, tool, ownProc); err != nil {
		return err
	}
	// On the thread apply locked, the one that execs.
	if err := dropCaps(); err != nil {
		return err
	}
	if ownProc {
		return initCall(tool, argv, filterEnv(env, p.Env))
	}
	return execError(tool, syscall.Exec(tool, argv, filterEnv(env, p.Env)))
}

// readPolicy reads and closes the policy pipe, and returns the policy and
// its JSON. It is closed before Landlock is enabled so that it cannot reach
// the tool: inherited descriptors are not close-on-exec.
func readPolicy(f *os.File) (*Policy, []byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxPolicy+1))
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: no policy on fd %d (run tools through sandbox.Command): %w", policyFD, err)
	}
	if len(data) > maxPolicy {
		return nil, nil, fmt.Errorf("sandbox: policy exceeds %d bytes", maxPolicy)
	}
	p, err := decodePolicy(data)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: reading policy from fd %d: %w", policyFD, err)
	}
	return p, data, nil
}

// decodePolicy decodes a policy strictly: a field this binary does not
// know is an error, not a rule left out.
func decodePolicy(data []byte) (*Policy, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	return &p, nil
}
