package toolsrv

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
	"strings"
	"syscall"
	"time"

	"ollie/toolsrv/sandbox"
)

// DefaultOutputCap is how many bytes of a tool's output reach the model
// when Runner.OutputCap is zero. The rest is kept in a file the note names.
const DefaultOutputCap = 64 << 10

// An Approver decides whether a call may leave its sandbox (a tool declared
// elevated, or a call with bypass) or run as root (sudo). Approve returns a
// Grant to approve; its error is shown to the model.
type Approver interface {
	Approve(ctx context.Context, req *ApprovalRequest) (Grant, error)
}

// A Grant is an approval in progress: for sudo it supplies the password
// (the credential gate), and Close says how the call ended.
type Grant interface {
	// Password asks for the sudo password, the attempt-th time; problem
	// says why it is asked again. The caller zeroes it once sudo has it.
	Password(ctx context.Context, attempt int, problem string) ([]byte, error)
	Close(result string)
}

// An ApprovalRequest says who asks to run what, outside the sandbox.
type ApprovalRequest struct {
	Session    string
	Agent      string
	Tool       string
	Variant    int
	Executable string
	Args       json.RawMessage
	Cwd        string
	Bypass     bool // the call asked for it; otherwise the .meta declares elevated
	Sudo       bool
}

// ErrNotApproved is wrapped by the error of a call that was not approved.
var ErrNotApproved = errors.New("not approved")

// noApprover denies everything: without a broker nobody can approve.
type noApprover struct{}

func (noApprover) Approve(ctx context.Context, req *ApprovalRequest) (Grant, error) {
	what := "to run outside its sandbox"
	if req.Sudo {
		what = "to run as root (sudo)"
	}
	return nil, fmt.Errorf("%w: %s needs approval %s, and no approval broker is connected to this host, so it was denied; run it from a desktop connected with ollie-remote, or call it without bypass", ErrNotApproved, req.Tool, what)
}

// A Runner runs tool calls for one session: validation, sandbox, timeout,
// approval and output capture, the same path for an agent and for
// `olliesrv tools run`.
type Runner struct {
	Tools    *Session
	Cwd      string           // the session's working directory
	Profiles sandbox.Profiles // where sandbox profiles are found
	Approver Approver         // nil denies every elevation

	OutputCap int    // bytes of output shown (DefaultOutputCap)
	SpillDir  string // where cut output is kept whole ("" means a private dir under os.TempDir)

	ToolsPath     []string // OLLIE_TOOLS_PATH for tools
	ElevateSocket string   // OLLIE_ELEVATE_SOCKET for tools
	SessionID     string
	AgentID       string
}

// A Result is the outcome of one call, in the words the model reads.
type Result struct {
	Tool     string
	Output   string          // stdout on success; the reason and both streams on failure
	Content  json.RawMessage `json:",omitempty"` // the tool's {"content": [...]} blocks, passed through
	Failed   bool
	ExitCode int // -1 when the tool did not run to an exit
	Cut      int64
	Spill    string // the file holding the whole output when some was cut
	Elapsed  time.Duration
	Sandbox  string // the profile the call ran under, or "none"
}

func failed(tool, msg string) *Result {
	return &Result{Tool: tool, Output: msg, Failed: true, ExitCode: -1}
}

// Run validates and runs one call. It never returns nil: every failure is
// a Result the model can read.
func (r *Runner) Run(ctx context.Context, name string, args json.RawMessage) *Result {
	t, err := r.Tools.Tool(name)
	if err != nil {
		return failed(name, err.Error())
	}
	flags, own, err := t.Prepare(args)
	if err != nil {
		var ae *ArgError
		if errors.As(err, &ae) {
			return failed(name, ae.Message())
		}
		return failed(name, err.Error())
	}
	if flags.Background {
		return failed(name, "background calls are started through proc/new.bg, not Run")
	}
	return r.run(ctx, t, flags, own)
}

// authorize asks the approver when a call would leave its sandbox; its
// error is for the model. A nil Grant with a nil error is a call that
// stays in its sandbox.
func (r *Runner) authorize(ctx context.Context, t *Tool, flags Flags, own json.RawMessage) (Grant, error) {
	if !t.Elevated && !t.Sudo && !flags.Bypass {
		return nil, nil
	}
	approver := r.Approver
	if approver == nil {
		approver = noApprover{}
	}
	req := &ApprovalRequest{Session: r.SessionID, Agent: r.AgentID, Tool: t.Name, Variant: t.Variant,
		Executable: t.Path, Args: own, Cwd: r.Cwd, Bypass: flags.Bypass, Sudo: t.Sudo}
	return approver.Approve(ctx, req)
}

// command builds the process for an authorized call: under the sandbox
// profile the call names (default "default"), or outside it when approved,
// with the contract's stdin and environment, in its own process group
// that ctx's end kills whole. It returns the name of the profile applied,
// or "none".
func (r *Runner) command(ctx context.Context, t *Tool, flags Flags, own json.RawMessage, scratch string, grant Grant) (*exec.Cmd, string, error) {
	profile := flags.Sandbox
	if profile == "" {
		profile = "default"
	}
	prof, err := r.Profiles.Load(profile)
	if err != nil {
		return nil, "", err
	}
	policy, err := prof.Resolve(sandbox.Vars{CWD: r.Cwd, TmpDir: scratch, ToolsPath: r.ToolsPath})
	if err != nil {
		return nil, "", err
	}
	var cmd *exec.Cmd
	if t.Sudo {
		// sudo resets the environment and reads the password, if one is
		// needed, from the same stdin as the tool's arguments.
		cmd, err = r.sudoCommand(ctx, t, own, grant)
		if err != nil {
			return nil, "", err
		}
		cmd.Dir = r.Cwd
		return cmd, "none (sudo)", nil
	}
	if t.Elevated || flags.Bypass {
		profile = "none"
		cmd, err = sandbox.Unsandboxed(ctx, policy, t.Path, nil)
	} else {
		cmd, err = sandbox.Command(ctx, policy, t.Path, nil)
	}
	if err != nil {
		return nil, "", err
	}
	cmd.Dir = r.Cwd
	cmd.Stdin = bytes.NewReader(own)
	cmd.Env = append(cmd.Env,
		"PWD="+r.Cwd,
		"TMPDIR="+scratch,
		"OLLIE_TOOLS_PATH="+strings.Join(r.ToolsPath, ":"),
		"OLLIE_ELEVATE_SOCKET="+r.ElevateSocket,
	)
	// The end of ctx kills the whole process group, grandchildren too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd, profile, nil
}

// start starts cmd and closes the pipes the child now holds: the sandbox
// helper's policy pipe, and sudo's stdin.
func start(cmd *exec.Cmd) error {
	err := cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if f, ok := cmd.Stdin.(*os.File); ok && f != os.Stdin {
		f.Close()
	}
	return err
}

func (r *Runner) run(ctx context.Context, t *Tool, flags Flags, own json.RawMessage) (res *Result) {
	begin := time.Now()
	res = &Result{Tool: t.Name, ExitCode: -1}
	grant, err := r.authorize(ctx, t, flags, own)
	if err != nil {
		return failed(t.Name, err.Error())
	}
	if grant != nil {
		defer func() {
			result := "ran"
			if res.Failed {
				result = "failed"
			}
			grant.Close(result)
		}()
	}
	scratch, err := os.MkdirTemp("", "ollie-call-")
	if err != nil {
		return failed(t.Name, "cannot make a scratch directory: "+err.Error())
	}
	defer os.RemoveAll(scratch)
	if timeout := flags.TimeoutFor(t); timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd, profile, err := r.command(ctx, t, flags, own, scratch, grant)
	if err != nil {
		return failed(t.Name, err.Error())
	}
	res.Sandbox = profile
	outCap := r.OutputCap
	if outCap <= 0 {
		outCap = DefaultOutputCap
	}
	spillDir, err := r.spillDir()
	if err != nil {
		return failed(t.Name, err.Error())
	}
	stdout := &capture{cap: outCap, dir: spillDir, name: t.Name + ".stdout"}
	stderr := &capture{cap: outCap / 4, dir: spillDir, name: t.Name + ".stderr"}
	defer stdout.close()
	defer stderr.close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := start(cmd); err != nil {
		return failed(t.Name, fmt.Sprintf("cannot start %s: %v", t.Path, err))
	}
	err = cmd.Wait()
	// Nothing a call started outlives it; background calls are for that.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	res.Elapsed = time.Since(begin)
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}

	switch {
	case ctx.Err() == context.DeadlineExceeded:
		res.Failed = true
		res.Output = fmt.Sprintf("timed out after %s; the tool and every process it started were killed", flags.TimeoutFor(t))
		res.Output += streams(stdout, stderr)
	case ctx.Err() != nil:
		res.Failed = true
		res.Output = "interrupted; the tool and every process it started were killed" + streams(stdout, stderr)
	case err != nil || res.ExitCode != 0:
		res.Failed = true
		if res.ExitCode == 126 && res.Sandbox != "none" && stdout.total == 0 {
			res.Output = "the sandbox refused to run the tool: " + strings.TrimSpace(stderr.String())
		} else {
			res.Output = fmt.Sprintf("exit status %d", res.ExitCode) + streams(stdout, stderr)
		}
	default:
		res.Output = stdout.String()
		if stdout.total <= int64(stdout.cap) {
			res.Content = structured(stdout.head.Bytes())
		}
	}
	res.Cut, res.Spill = stdout.cut(), stdout.spillPath
	if note := stdout.note(); note != "" {
		res.Output += note
	}
	return res
}

// streams renders captured output for a failure message.
func streams(stdout, stderr *capture) string {
	var b strings.Builder
	if s := stdout.String(); s != "" {
		b.WriteString("\nstdout:\n" + s)
	}
	if s := stderr.String(); s != "" {
		b.WriteString("\nstderr:\n" + s + stderr.note())
	}
	return b.String()
}

// structured returns the content blocks of output that is a JSON object
// with a "content" array, as the tool contract allows.
func structured(out []byte) json.RawMessage {
	var v struct {
		Content json.RawMessage `json:"content"`
	}
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &v) != nil {
		return nil
	}
	if len(v.Content) > 0 && v.Content[0] == '[' {
		return v.Content
	}
	return nil
}

func (r *Runner) spillDir() (string, error) {
	dir := r.SpillDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("ollie-output-%d", os.Getuid()))
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return "", fmt.Errorf("cannot keep tool output in %s: %w", dir, err)
	}
	return dir, nil
}

// capture keeps the first cap bytes of a stream in memory and, once the
// stream grows past cap, the whole stream in a file.
type capture struct {
	cap  int
	dir  string
	name string

	head      bytes.Buffer
	total     int64
	spill     *os.File
	spillPath string
	spillErr  error
}

func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.cap - c.head.Len(); room > 0 {
		c.head.Write(p[:min(room, len(p))])
	}
	if c.total > int64(c.cap) && c.spillErr == nil {
		if c.spill == nil {
			c.spill, c.spillErr = os.CreateTemp(c.dir, c.name+"-*")
			if c.spillErr != nil {
				return len(p), nil
			}
			c.spillPath = c.spill.Name()
			// The head is in memory; what came before p is all of it.
			already := c.total - int64(len(p))
			c.spill.Write(c.head.Bytes()[:already])
		}
		if _, err := c.spill.Write(p); err != nil {
			c.spillErr = err
		}
	}
	return len(p), nil
}

func (c *capture) String() string { return c.head.String() }

func (c *capture) cut() int64 { return max(0, c.total-int64(c.head.Len())) }

// note tells the model how much output it does not see and where it is.
func (c *capture) note() string {
	n := c.cut()
	if n == 0 {
		return ""
	}
	where := "it could not be kept"
	if c.spillErr == nil && c.spillPath != "" {
		where = "the whole output is in " + c.spillPath
	}
	return fmt.Sprintf("\n[output cut: %d of %d bytes not shown; %s]\n", n, c.total, where)
}

func (c *capture) close() {
	if c.spill != nil {
		c.spill.Close()
	}
}

var _ io.Writer = (*capture)(nil)
