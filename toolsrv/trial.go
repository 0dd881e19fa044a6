package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
)

// A Trial runs one tool from a command line as an agent would
// (validation, sandbox, timeout, approval): "olliesrv tools run".
type Trial struct {
	// Cwd is the call's working directory; "" is the current one.
	Cwd string
	// StateDir is ollie's state directory, under which cut output is kept
	// when $XDG_RUNTIME_DIR will not do (SpillRoot).
	StateDir func() (string, error)
	// Gate is the daemon's approval gate socket, which then answers as it
	// does for agents; "" when no daemon runs.
	Gate string
}

// TrialInput is a call's JSON arguments: arg's one element when there is
// one, else all of stdin, or {} when stdin is a terminal.
func TrialInput(arg []string, stdin io.Reader) ([]byte, error) {
	switch {
	case len(arg) > 0:
		return []byte(arg[0]), nil
	case isTerminal(stdin):
		return []byte("{}"), nil
	}
	return io.ReadAll(stdin)
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Run calls the tool name with input, prints its output on stdout and
// how it ran on stderr, and returns the exit status: 0 the tool
// succeeded, 1 it failed, 2 input is not JSON.
func (t Trial) Run(ctx context.Context, name string, input []byte, stdout, stderr io.Writer) int {
	if !json.Valid(input) {
		fmt.Fprintf(stderr, "olliesrv tools run: the arguments are not valid JSON: %s\n", strings.TrimSpace(string(input)))
		return 2
	}
	cwd := t.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	// Resolved once, as a session's directory is (Runner.CwdID).
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	path := ToolsPath()
	session := NewSession(Load(path, meta.LocalHost{}))
	if err := session.Load(name); err != nil {
		fmt.Fprintf(stderr, "olliesrv tools run: %v (see olliesrv tools)\n", err)
		return 1
	}
	r := &Runner{Tools: session, Cwd: cwd, Profiles: sandbox.DefaultProfiles(), ToolsPath: path}
	// Cut output is kept after exit, as the note tells, in a private
	// directory made only if some is cut.
	spill, err := t.StateDir()
	if err == nil {
		spill, err = SpillRoot(spill)
	}
	if err == nil {
		r.SpillBase = spill
	} else {
		fmt.Fprintf(stderr, "olliesrv tools run: %v; cut output goes under %s\n", err, os.TempDir())
	}
	if t.Gate != "" {
		r.Approver = GateApprover{Socket: t.Gate}
		r.ElevateSocket = t.Gate
	}
	res := r.Run(ctx, name, input)
	if len(res.Content) > 0 {
		fmt.Fprintf(stdout, "%s\n", res.Content)
	} else {
		io.WriteString(stdout, res.Output)
		if res.Output != "" && !strings.HasSuffix(res.Output, "\n") {
			io.WriteString(stdout, "\n")
		}
	}
	fmt.Fprintf(stderr, "[%s: sandbox %s, exit %d, %s]\n", name, res.Sandbox, res.ExitCode, res.Elapsed.Round(1e6))
	if res.Failed {
		return 1
	}
	return 0
}
