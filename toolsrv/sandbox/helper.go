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
	"path/filepath"
	"syscall"
)

const (
	// helperArg, as the first argument, makes the binary the sandbox helper.
	helperArg = "__ollie_sandbox"
	// policyFD is where the helper finds the policy: ExtraFiles[0].
	policyFD = 3
	// maxPolicy bounds the policy the helper reads: 1 MiB is thousands of
	// paths, and the most a pipe can be grown to without privilege.
	maxPolicy = 1 << 20
)

// Command returns a command that runs the tool at path with args under
// policy p: it runs the current executable as the sandbox helper, which
// reads p from an inherited pipe, enables Landlock, keeps only the
// environment variables p allows, and execs the tool in its own place (same
// process, same pid). The tool's own executable may always be read and
// executed; everything else is as p says.
//
// Command refuses, with an error wrapping [ErrNoLandlock] or [ErrABITooOld],
// when the kernel cannot enforce p and p is not best effort. The helper
// checks again and exits 126 with a message on stderr on any failure, so a
// tool never runs with less than p asks.
//
// The command runs in its own process group (kill -pgid reaches the tool
// and its children) and gets SIGKILL if the OS thread that started it
// exits (Pdeathsig: the Go runtime keeps its threads, except one whose
// goroutine exits while locked to it, so do not Start from such a
// goroutine).
// Stdin, Stdout, Stderr, Dir, Cancel and WaitDelay are the caller's to set:
// typically Dir to the CWD the policy was resolved with, Cancel to kill the
// process group, and a WaitDelay. cmd.Env starts as the parent's
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
	cmd.Env = filterEnv(os.Environ(), p.Env)
	cmd.SysProcAttr = sysProcAttr()
	return cmd, nil
}

// Unsandboxed returns a command that runs the tool at path with args
// without Landlock, for a bypass or elevation that has been approved. It
// escapes Landlock only: cmd.Env is still the parent's environment filtered
// by p's allowlist (what the caller appends is passed as is), and the
// process-group and parent-death settings are those of [Command]. The
// caller sets Stdin, Stdout, Stderr, Dir, Cancel and WaitDelay.
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
func IsHelper() bool { return len(os.Args) > 1 && os.Args[1] == helperArg }

// HelperMain is the sandbox helper: it reads the policy from its inherited
// pipe, enables Landlock, closes the pipe, filters the environment and
// execs the tool. It never returns: on any failure it writes the reason to
// stderr and exits 126, the shell's status for "found but could not run".
func HelperMain() {
	err := helper(os.Args[2:])
	fmt.Fprintf(os.Stderr, "%v\n", err)
	os.Exit(126)
}

// helper returns only on failure.
func helper(args []string) error {
	if len(args) < 2 || args[0] != "--" {
		return errors.New("sandbox: usage: " + helperArg + " -- TOOL [ARGS...] with the policy on fd 3 (run tools through sandbox.Command)")
	}
	tool, argv := args[1], args[1:]
	// Only a pipe is taken for the policy: run by hand, fd 3 may be
	// something the Go runtime opened for itself.
	var st syscall.Stat_t
	if err := syscall.Fstat(policyFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return fmt.Errorf("sandbox: no policy on fd %d (run tools through sandbox.Command)", policyFD)
	}
	p, err := readPolicy(os.NewFile(policyFD, "policy"))
	if err != nil {
		return err
	}
	if err := apply(p, tool); err != nil {
		return err
	}
	err = syscall.Exec(tool, argv, filterEnv(os.Environ(), p.Env))
	if errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("sandbox: exec %s: %w (the profile's exec paths must hold the tool's interpreter and loader, and its directory if it runs other programs from there)", tool, err)
	}
	return fmt.Errorf("sandbox: exec %s: %w", tool, err)
}

// readPolicy reads and closes the policy pipe. It is closed before Landlock
// is enabled so that it cannot reach the tool: inherited descriptors are not
// close-on-exec.
func readPolicy(f *os.File) (*Policy, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxPolicy+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("sandbox: no policy on fd %d (run tools through sandbox.Command): %w", policyFD, err)
	}
	if len(data) > maxPolicy {
		return nil, fmt.Errorf("sandbox: policy exceeds %d bytes", maxPolicy)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("sandbox: reading policy from fd %d: %w", policyFD, err)
	}
	return &p, nil
}
