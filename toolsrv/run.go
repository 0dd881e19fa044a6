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
	"strings"
	"sync"
	"syscall"
	"time"

	"ollie/broker"
	"ollie/ns/client"
	"ollie/toolsrv/sandbox"
	"ollie/toolsrv/tool"
)

// DefaultOutputCap is how many bytes of a tool's output reach the model
// when Runner.OutputCap is zero. The rest is kept in a file the note names.
const DefaultOutputCap = 64 << 10

// ErrNotApproved is wrapped by the error of a call that was not approved:
// the broker's, which every Approver's error wraps.
var ErrNotApproved = broker.ErrNotApproved

// noApprover denies everything: without a broker nobody can approve.
type noApprover struct{}

func (noApprover) Approve(ctx context.Context, req *broker.Request) (broker.Grant, error) {
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
	Tools *Session
	Cwd   string // the session's working directory
	// CwdID is the directory Cwd named when the session was made: a call
	// finds it there still, reached without a symbolic link, or is
	// refused. nil takes it at the first call.
	CwdID    *sandbox.FileID
	Profiles sandbox.Profiles // where sandbox profiles are found

	// Approver is asked whether a call may leave its sandbox (a tool
	// declared elevated, or a call with bypass) or run as root (sudo);
	// GateApprover asks the host's gate. The Runner fills the request in
	// from the call's Caller, the agent that asked included; a refusal's
	// error is shown to the model. nil denies every elevation.
	Approver broker.Approver

	OutputCap int    // bytes of output shown (DefaultOutputCap)
	SpillDir  string // where cut output is kept: the session's private directory ("" means one made under SpillBase on first need)
	SpillBase string // where that directory is made when SpillDir is "" ("" means os.TempDir)

	CallOutputLimit   int64 // bytes of output one call may write before it is killed (DefaultCallOutputLimit)
	SessionSpillLimit int64 // bytes of cut output kept on disk across the Runner's calls (DefaultSessionSpillLimit)

	// Helpers holds sandbox helpers started ahead of their calls: a
	// sandboxed call through it pays no Go process start. The session's
	// toolsrv owns one; nil starts a helper per call (sandbox.Command).
	Helpers *sandbox.Pool

	ToolsPath     []string // OLLIE_TOOLS_PATH for tools
	ElevateSocket string   // OLLIE_ELEVATE_SOCKET for tools
	Namespace     string   // OLLIE_NAMESPACE for tools: the directory of the namespace socket
	SessionID     string

	// Yolo runs every call outside the sandbox and without asking the
	// Approver, as a yolo session's are: the sandbox profile a call names
	// gives only its environment allowlist. A sudo tool is the exception:
	// it still passes both gates, the approval and the password, since
	// the password is never on the host.
	Yolo bool

	spillMu   sync.Mutex
	spilled   int64  // bytes kept in spill files, against SessionSpillLimit
	spillMade string // the directory spillDir made when SpillDir is ""

	cwdMu sync.Mutex // guards CwdID, taken at the first call when nil

	resMu     sync.Mutex // guards resolved
	resolved  map[resolutionKey]*resolution
	refreshes sync.WaitGroup // resolutions made again after a call

	scratchMu   sync.Mutex // guards nextScratch and closed
	nextScratch string     // made ahead for the next call
	closed      bool
	scratchWork sync.WaitGroup // removals of the last calls' scratch directories
}

func failed(name, msg string) *tool.Result {
	return &tool.Result{Tool: name, Output: msg, Failed: true, ExitCode: -1}
}

// Run validates and runs one call for the session. It never returns nil:
// every failure is a Result the model can read.
func (r *Runner) Run(ctx context.Context, name string, args json.RawMessage) *tool.Result {
	return r.RunFor(ctx, Caller{}, name, args)
}

// RunFor is Run for an agent: the call runs in the caller's directory, and
// its tools reach the namespace as that agent.
func (r *Runner) RunFor(ctx context.Context, c Caller, name string, args json.RawMessage) *tool.Result {
	c, err := r.caller(c)
	if err != nil {
		return failed(name, err.Error())
	}
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
	return r.run(ctx, c, t, flags, own)
}

// authorize asks the approver when a call would leave its sandbox; its
// error is for the model. A nil Grant with a nil error is a call that
// stays in its sandbox.
func (r *Runner) authorize(ctx context.Context, c Caller, t *Tool, flags Flags, own json.RawMessage) (broker.Grant, error) {
	if !t.Elevated && !t.Sudo && !flags.Bypass || r.Yolo && !t.Sudo {
		return nil, nil
	}
	approver := r.Approver
	if approver == nil {
		approver = noApprover{}
	}
	// Who asks is the call's Caller, here and nowhere else: the session by
	// its ID (and its name, for people), the agent likewise, or none for
	// a call that names no agent.
	req := &broker.Request{Session: r.SessionID, SessionName: c.SessionName, Agent: c.Agent, AgentName: c.AgentName,
		Tool: t.Name, Variant: t.Variant, Executable: t.Path, Args: own, Cwd: c.Cwd, Bypass: flags.Bypass, Sudo: t.Sudo}
	return approver.Approve(ctx, req)
}

// command builds the process for an authorized call: under the sandbox
// profile the call names (default "default"), or outside it when approved,
// with the contract's stdin and environment, in its own process group
// that ctx's end kills whole. It returns the name of the profile applied,
// or "none".
func (r *Runner) command(ctx context.Context, c Caller, t *Tool, flags Flags, own json.RawMessage, scratch string, grant broker.Grant) (*callProc, string, error) {
	profile := flags.Sandbox
	if profile == "" {
		profile = "default"
	}
	prof, err := r.Profiles.Load(profile)
	if err != nil {
		return nil, "", err
	}
	cwdID, err := r.checkCwd(c.Cwd)
	if err != nil {
		return nil, "", err
	}
	policy, done, err := r.resolve(prof, c.Cwd, scratch)
	if err != nil {
		return nil, "", err
	}
	for i := range policy.Paths {
		if policy.Paths[i].Path == c.Cwd {
			policy.Paths[i].ID = &cwdID
		}
	}
	r.allowSpill(policy)
	if t.Sudo {
		// sudo resets the environment and reads the password, if one is
		// needed, from the same stdin as the tool's arguments.
		cmd, err := r.sudoCommand(ctx, t, own, grant)
		if err != nil {
			return nil, "", err
		}
		cmd.Dir = c.Cwd
		return &callProc{cmd: cmd, done: done}, "none (sudo)", nil
	}
	env := []string{
		"PWD=" + c.Cwd,
		"TMPDIR=" + scratch,
		"OLLIE_TOOLS_PATH=" + strings.Join(r.ToolsPath, ":"),
		"OLLIE_ELEVATE_SOCKET=" + r.ElevateSocket,
	}
	if r.Namespace != "" {
		env = append(env, "OLLIE_NAMESPACE="+r.Namespace)
	}
	if exe := os.Getenv(ClientEnv); exe != "" {
		env = append(env, ClientEnv+"="+exe)
	}
	if c.Token != "" {
		env = append(env, client.TokenEnv+"="+c.Token)
	}
	const waitDelay = 2 * time.Second
	unsandboxed := t.Elevated || flags.Bypass || r.Yolo
	if !unsandboxed && r.Helpers != nil {
		call, err := r.Helpers.Command(ctx, policy, t.Path, nil)
		if err != nil {
			return nil, "", err
		}
		call.Dir = c.Cwd
		call.Stdin = bytes.NewReader(own)
		call.Env = append(call.Env, env...)
		call.WaitDelay = waitDelay
		return &callProc{call: call, done: done}, profile, nil
	}
	var cmd *exec.Cmd
	if unsandboxed {
		profile = "none"
		cmd, err = sandbox.Unsandboxed(ctx, policy, t.Path, nil)
	} else {
		cmd, err = sandbox.Command(ctx, policy, t.Path, nil)
	}
	if err != nil {
		return nil, "", err
	}
	cmd.Dir = c.Cwd
	cmd.Stdin = bytes.NewReader(own)
	cmd.Env = append(cmd.Env, env...)
	if profile == "none" {
		// No helper reaps what an unsandboxed tool starts: the end of ctx
		// kills its process group. A sandboxed call keeps Command's
		// Cancel, which has the helper kill every descendant, setsid or
		// not; SIGKILL to the group would kill the helper first.
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	}
	cmd.WaitDelay = waitDelay
	return &callProc{cmd: cmd, done: done}, profile, nil
}

// A callProc is a call's process: an *exec.Cmd (unsandboxed, sudo, or a
// helper started for the call) or a *sandbox.Call (a helper of the
// Runner's pool). Either way the process is the leader of the call's
// process group.
type callProc struct {
	cmd  *exec.Cmd
	call *sandbox.Call
	done func() // once the call is over
}

func (p *callProc) setOutput(stdout, stderr io.Writer) {
	if p.call != nil {
		p.call.Stdout, p.call.Stderr = stdout, stderr
		return
	}
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
}

// start starts the call and closes the pipes the child now holds: the
// sandbox helper's policy pipe, and sudo's stdin.
func (p *callProc) start() error {
	if p.call != nil {
		return p.call.Start()
	}
	cmd := p.cmd
	err := cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if f, ok := cmd.Stdin.(*os.File); ok && f != os.Stdin {
		f.Close()
	}
	return err
}

func (p *callProc) wait() error {
	if p.call != nil {
		return p.call.Wait()
	}
	return p.cmd.Wait()
}

// endGroup kills what is left in the call's process group once it has
// been waited for: nothing a call started outlives it; background calls
// are for that. A pooled call's helper has ended every process of the
// call before its status came, and is finishing (its cgroup) by itself.
func (p *callProc) endGroup() {
	if p.call == nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// process is the call's process, once started.
func (p *callProc) process() *os.Process {
	if p.call != nil {
		return p.call.Process
	}
	return p.cmd.Process
}

// exitCode is the call's exit status after wait, -1 if there is none.
func (p *callProc) exitCode() int {
	if p.call != nil {
		return p.call.ExitCode()
	}
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

func (r *Runner) run(ctx context.Context, c Caller, t *Tool, flags Flags, own json.RawMessage) (res *tool.Result) {
	begin := time.Now()
	res = &tool.Result{Tool: t.Name, ExitCode: -1}
	grant, err := r.authorize(ctx, c, t, flags, own)
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
	scratch, err := r.takeScratch()
	if err != nil {
		return failed(t.Name, "cannot make a scratch directory: "+err.Error())
	}
	defer r.dropScratch(scratch)
	if timeout := flags.TimeoutFor(t); timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// Past its output limit the call is stopped through its context
	// (callOutput.admit), which kills its process group.
	ctx, stopCall := context.WithCancelCause(ctx)
	defer stopCall(nil)
	cmd, profile, err := r.command(ctx, c, t, flags, own, scratch, grant)
	if err != nil {
		return failed(t.Name, err.Error())
	}
	defer cmd.done()
	res.Sandbox = profile
	outCap := r.OutputCap
	if outCap <= 0 {
		outCap = DefaultOutputCap
	}
	out := r.newCallOutput(stopCall)
	stdout := &capture{cap: outCap, out: out, name: t.Name + ".stdout"}
	stderr := &capture{cap: outCap / 4, out: out, name: t.Name + ".stderr"}
	defer stdout.close()
	defer stderr.close()
	cmd.setOutput(stdout, stderr)
	if err := cmd.start(); err != nil {
		return failed(t.Name, fmt.Sprintf("cannot start %s: %v", t.Path, err))
	}
	err = cmd.wait()
	cmd.endGroup()
	res.Elapsed = time.Since(begin)
	res.ExitCode = cmd.exitCode()

	switch {
	case errors.Is(context.Cause(ctx), ErrOutputLimit):
		res.Failed = true
		res.Output = out.stopped() + streams(stdout, stderr)
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

// capture keeps the first cap bytes of a stream in memory and, once the
// stream grows past cap, the stream in a file, as far as the call's output
// limit and the session's budget for kept output allow.
type capture struct {
	cap  int
	out  *callOutput
	name string

	head      bytes.Buffer
	total     int64 // bytes within the call's limit
	truncated bool  // the call's limit cut what the tool wrote here
	spill     *os.File
	spillPath string
	kept      int64  // bytes in the spill file
	lost      string // why the spill file lacks the rest, or is not there
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	if p = c.out.admit(p); len(p) < n {
		c.truncated = true
	}
	c.total += int64(len(p))
	if room := c.cap - c.head.Len(); room > 0 {
		c.head.Write(p[:min(room, len(p))])
	}
	if c.total > int64(c.cap) {
		if before := c.total - int64(len(p)); before <= int64(c.cap) {
			// p crosses the cap: what came before it is all in the head.
			c.keep(c.head.Bytes()[:before])
		}
		c.keep(p)
	}
	return n, nil
}

// keep appends b to the spill file, making it on first need, as far as
// the session's budget allows.
func (c *capture) keep(b []byte) {
	if c.lost != "" || len(b) == 0 {
		return
	}
	k := c.out.r.reserveSpill(int64(len(b)))
	if k == 0 {
		c.lost = fmt.Sprintf("this session has kept %s of cut output on disk, its limit", size(c.out.r.sessionSpillLimit()))
		return
	}
	if c.spill == nil {
		dir, err := c.out.r.spillDir()
		if err == nil {
			c.spill, err = os.CreateTemp(dir, c.name+"-*")
		}
		if err != nil {
			c.lost = err.Error()
			return
		}
		c.spillPath = c.spill.Name()
	}
	w, err := c.spill.Write(b[:k])
	c.kept += int64(w)
	switch {
	case err != nil:
		c.lost = "writing it failed: " + err.Error()
	case k < int64(len(b)):
		c.lost = fmt.Sprintf("this session has kept %s of cut output on disk, its limit", size(c.out.r.sessionSpillLimit()))
	}
}

func (c *capture) String() string { return c.head.String() }

func (c *capture) cut() int64 { return max(0, c.total-int64(c.head.Len())) }

// note tells the model how much output it does not see and where it is.
func (c *capture) note() string {
	n := c.cut()
	if n == 0 {
		return ""
	}
	var where string
	switch {
	case c.spillPath == "":
		where = "it was not kept: " + c.lost
	case c.lost != "":
		where = fmt.Sprintf("its first %d bytes are in %s; the rest was not kept: %s", c.kept, c.spillPath, c.lost)
	case c.truncated:
		where = "what the tool wrote up to the call's limit is in " + c.spillPath
	default:
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
