package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DefaultHookTimeout bounds each hook run when [Hooks.Timeout] is zero. It
// matters only for a hook that hangs: long enough for a linter in postTool,
// short enough that a stuck preTool hook does not stall the agent for long.
const DefaultHookTimeout = 30 * time.Second

// maxHookOutput bounds what a hook may write to stdout; more is a failure.
// It is large because a postTool hook may replace a whole tool result.
const maxHookOutput = 1 << 20

// Hooks runs a profile's hooks for one agent: each is a shell command run
// with /bin/sh -c in Dir, with a JSON payload on stdin (see data/agents/README.md
// for every payload) and olliesrv's environment, then Env, then OLLIE,
// OLLIE_CWD, PWD, OLLIE_SESSION, OLLIE_AGENT, OLLIE_PROFILE (as for prompt
// commands) and OLLIE_HOOK, the hook's name.
//
// A hook that runs longer than Timeout is killed with its whole process
// group; so is anything it leaves running when it exits (detach with setsid
// to keep a process). Exit codes mean what the seed says, per hook, and one
// rule covers failure: a hook that can refuse (agentSpawn, preTurn, preTool)
// refuses when it fails — times out, is killed, exits with a code it does
// not define, cannot start — and says why, since a guard that fails open
// guards nothing. A failing postTool hook withholds the result for the same
// reason (it may be a redaction). Other hooks report the failure and change
// nothing.
//
// A nil *Hooks, or one without a command for a hook, runs nothing and
// allows everything. The methods only read h, so one Hooks may serve calls
// in parallel; to change the working directory, make a new one.
type Hooks struct {
	Commands map[string]string // hook name → shell command, as in a profile's "hooks"
	Timeout  time.Duration     // per run; 0 means DefaultHookTimeout
	Dir      string            // the agent's working directory: where hooks run, "cwd" in payloads
	Env      []string          // more variables as KEY=value, e.g. the session's

	Data    string // $OLLIE; "" means DataDir()
	Session string // the session's ID, "session" in payloads
	Agent   string // the agent's ID, "agent" in payloads
	Profile string // the profile's name, "profile" in payloads
}

// NewHooks returns the hooks of profile p for the agent env describes.
func NewHooks(p *Profile, env PromptEnv) *Hooks {
	return &Hooks{Commands: p.Hooks, Dir: env.Cwd, Env: env.Env, Data: env.Data,
		Session: env.Session, Agent: env.Agent, Profile: p.Name}
}

// Has reports whether the hook called name has a command.
func (h *Hooks) Has(name string) bool {
	return h != nil && h.Commands[name] != ""
}

// A HookOutcome is what one run of a hook did.
type HookOutcome struct {
	Hook     string
	Ran      bool // false: no command for this hook
	ExitCode int  // -1 when it did not exit by itself or did not start
	Stdout   string
	Stderr   string // bounded
	Took     time.Duration
}

// A HookError is a hook that failed: it did not exit by itself (timed
// out, killed, too much output, could not start), or it exited with a code
// that its hook does not define. Err is the cause; a timeout wraps
// context.DeadlineExceeded.
type HookError struct {
	Hook     string
	Command  string
	ExitCode int    // -1 when it did not exit by itself
	Stderr   string // bounded
	Err      error
}

func (e *HookError) Error() string {
	return fmt.Sprintf("agent: hook %s %s: %s", e.Hook, quoteCommand(e.Command), e.why())
}

func (e *HookError) Unwrap() error { return e.Err }

// why is the cause in words, with the hook's stderr.
func (e *HookError) why() string {
	s := e.Err.Error()
	if t := oneLine(e.Stderr); t != "" {
		s += ": " + t
	}
	return s
}

// ErrUnknownHook is wrapped by Run's error for a name not in HookNames.
var ErrUnknownHook = errors.New("unknown hook")

// Run runs the hook called name with payload, which must encode as a JSON
// object (or be nil), on stdin. The payload gets the fields every hook
// sees: hook, session, agent, profile and cwd. Without a command for the
// hook, Run returns an outcome with Ran false and no error.
//
// The error is a *HookError when the hook did not exit by itself; an exit
// code is not an error here, since what it means depends on the hook.
func (h *Hooks) Run(ctx context.Context, name string, payload any) (HookOutcome, error) {
	out := HookOutcome{Hook: name, ExitCode: -1}
	if !slices.Contains(HookNames, name) {
		return out, fmt.Errorf("agent: %w %q (hooks are %s)", ErrUnknownHook, name, strings.Join(HookNames, ", "))
	}
	if !h.Has(name) {
		return out, nil
	}
	command := h.Commands[name]
	stdin, err := h.payload(name, payload)
	if err != nil {
		return out, &HookError{Hook: name, Command: command, ExitCode: -1, Err: fmt.Errorf("cannot encode the payload: %w", err)}
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	data := h.Data
	if data == "" {
		data = DataDir()
	}
	r := shellCmd{
		command: command,
		dir:     h.Dir,
		env:     environ(h.Env, data, h.Dir, h.Session, h.Agent, h.Profile, "OLLIE_HOOK="+name),
		stdin:   stdin,
		timeout: timeout,
		maxOut:  maxHookOutput,
	}.run(ctx)
	out.Ran, out.ExitCode, out.Stdout, out.Stderr, out.Took = true, r.exitCode, r.stdout, r.stderr, r.took
	if r.err != nil {
		return out, &HookError{Hook: name, Command: command, ExitCode: -1, Stderr: r.stderr, Err: r.err}
	}
	return out, nil
}

// payload is the JSON on a hook's stdin: the common fields, then the
// fields of v.
func (h *Hooks) payload(name string, v any) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if string(b) != "null" {
			if err := json.Unmarshal(b, &fields); err != nil {
				return nil, fmt.Errorf("a %T is not a JSON object", v)
			}
		}
	}
	for k, s := range map[string]string{"hook": name, "session": h.Session, "agent": h.Agent, "profile": h.Profile, "cwd": h.Dir} {
		fields[k], _ = json.Marshal(s)
	}
	b, err := json.Marshal(fields) // keys sorted: the same payload is the same bytes
	return append(b, '\n'), err
}

// A HookDecision is what a hook that can refuse decided. The zero value
// refuses.
type HookDecision struct {
	Allow  bool
	Reason string // why not, in words for the model and the chat; "" when allowed
	Inject string // preTurn: what its stdout adds to the context before the prompt
}

// decide runs a hook that can refuse: exit 0 allows, 2 refuses with the
// hook's own reason (its stderr, else its stdout), anything else refuses
// because the hook failed.
func (h *Hooks) decide(ctx context.Context, name, what string, payload any) (HookDecision, error) {
	if !h.Has(name) {
		return HookDecision{Allow: true}, nil
	}
	out, err := h.Run(ctx, name, payload)
	switch {
	case err == nil && out.ExitCode == 0:
		d := HookDecision{Allow: true}
		if name == HookPreTurn {
			d.Inject = out.Stdout
		}
		return d, nil
	case err == nil && out.ExitCode == 2:
		reason := oneLine(out.Stderr)
		if reason == "" {
			reason = oneLine(out.Stdout)
		}
		if reason == "" {
			reason = "no reason given"
		}
		return HookDecision{Reason: fmt.Sprintf("%s blocked by the %s hook: %s", what, name, reason)}, nil
	}
	he := failedHook(h, name, out, err)
	return HookDecision{Reason: fmt.Sprintf("%s blocked: the %s hook failed (%s), and a failing %s hook blocks", what, name, he.why(), name)}, he
}

// A SpawnInfo is what the agentSpawn hook is told beyond the common fields.
type SpawnInfo struct {
	Model   string   `json:"model"`
	Backend string   `json:"backend"`
	Tools   []string `json:"tools"` // the tools loaded
}

// AgentSpawn runs the agentSpawn hook when an agent is created: exit 0
// lets it start, 2 refuses (the reason is the hook's stderr).
func (h *Hooks) AgentSpawn(ctx context.Context, s SpawnInfo) (HookDecision, error) {
	if s.Tools == nil {
		s.Tools = []string{}
	}
	return h.decide(ctx, HookAgentSpawn, "agent start", s)
}

// PreTurn runs the preTurn hook before a prompt is sent: exit 0 allows it
// and Inject holds the hook's stdout for the caller to add to the context;
// 2 refuses the turn.
func (h *Hooks) PreTurn(ctx context.Context, prompt string) (HookDecision, error) {
	return h.decide(ctx, HookPreTurn, "prompt", struct {
		Prompt string `json:"prompt"`
	}{prompt})
}

// A HookCall is a tool call as the preTool and postTool hooks see it.
type HookCall struct {
	ID   string          `json:"callId"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"` // as the model sent them
}

// forHook makes the arguments embeddable: none become {}, and arguments
// that are not JSON (a model's mistake) a JSON string of their text.
func (c HookCall) forHook() HookCall {
	switch {
	case len(bytes.TrimSpace(c.Args)) == 0:
		c.Args = json.RawMessage("{}")
	case !json.Valid(c.Args):
		c.Args, _ = json.Marshal(string(c.Args))
	}
	return c
}

// PreTool runs the preTool hook before a tool call: exit 0 allows it, 2
// blocks it. Blocked, the call must not run and Reason is its result for
// the model. A preTool hook that fails blocks too (fail closed) and the
// error says why.
func (h *Hooks) PreTool(ctx context.Context, call HookCall) (HookDecision, error) {
	return h.decide(ctx, HookPreTool, "tool call", call.forHook())
}

// PostTool runs the postTool hook after a tool call and returns the result
// to give the model: on exit 0 the result with the hook's stdout appended
// (on a new line), on exit 2 the hook's stdout in its place. When the hook
// fails, or exits 2 without writing a replacement, the result is withheld:
// the text returned says that the call ran and why its result is missing,
// and the error is the failure.
func (h *Hooks) PostTool(ctx context.Context, call HookCall, result string, failed bool) (string, error) {
	if !h.Has(HookPostTool) {
		return result, nil
	}
	out, err := h.Run(ctx, HookPostTool, struct {
		HookCall
		Result string `json:"result"`
		Failed bool   `json:"failed"`
	}{call.forHook(), result, failed})
	switch {
	case err == nil && out.ExitCode == 0:
		if out.Stdout == "" {
			return result, nil
		}
		if result != "" && !strings.HasSuffix(result, "\n") {
			result += "\n"
		}
		return result + out.Stdout, nil
	case err == nil && out.ExitCode == 2 && out.Stdout != "":
		return out.Stdout, nil
	}
	// An exit 2 with no replacement is taken for /bin/sh's own exit 2 (a
	// syntax error, a failed redirection) rather than a wish to show nothing.
	he := failedHook(h, HookPostTool, out, err)
	return fmt.Sprintf("the call ran, but its result is withheld: the postTool hook failed (%s), and a failing postTool hook withholds the result", he.why()), he
}

// A TurnInfo is what the postTurn hook is told about a finished prompt.
type TurnInfo struct {
	Prompt string `json:"prompt"`
	Reply  string `json:"reply"` // the final answer; "" when the turn failed
	Error  string `json:"error"` // why the turn ended without one; "" when it did not
	Steps  int    `json:"steps"` // model requests made
}

// PostTurn runs the postTurn hook after a prompt has run to its end. Any
// exit but 0 is a *HookError; it changes nothing.
func (h *Hooks) PostTurn(ctx context.Context, t TurnInfo) error {
	return h.notify(ctx, HookPostTurn, t)
}

// A CompactInfo is what the compaction hooks are told.
type CompactInfo struct {
	Reason   string `json:"reason"`   // "overflow" (the context is full) or "manual" (the compact control)
	Messages int    `json:"messages"` // in the history: before compaction for preCompact, after for postCompact
}

// PreCompact runs the preCompact hook before the history is compacted. Any
// exit but 0 is a *HookError; it changes nothing.
func (h *Hooks) PreCompact(ctx context.Context, c CompactInfo) error {
	return h.notify(ctx, HookPreCompact, c)
}

// PostCompact runs the postCompact hook after the history was compacted.
// Any exit but 0 is a *HookError; it changes nothing.
func (h *Hooks) PostCompact(ctx context.Context, c CompactInfo) error {
	return h.notify(ctx, HookPostCompact, c)
}

func (h *Hooks) notify(ctx context.Context, name string, payload any) error {
	if !h.Has(name) {
		return nil
	}
	out, err := h.Run(ctx, name, payload)
	if err == nil && out.ExitCode == 0 {
		return nil
	}
	return failedHook(h, name, out, err)
}

// A TurnErrorInfo is what the turnError hook is told about a backend error.
type TurnErrorInfo struct {
	Error   string `json:"error"`   // the backend's message
	Attempt int    `json:"attempt"` // 1 for the first failure of this request
	Model   string `json:"model"`
	Backend string `json:"backend"`
}

// TurnError runs the turnError hook when the backend fails. Exit 0 means
// the hook handled the error: the caller skips its retries and note (the
// hook's stdout) says what was done. Exit 1 leaves the error to the usual
// retries. Any other exit, or a failure, leaves it too and is a *HookError.
func (h *Hooks) TurnError(ctx context.Context, e TurnErrorInfo) (handled bool, note string, err error) {
	if !h.Has(HookTurnError) {
		return false, "", nil
	}
	out, err := h.Run(ctx, HookTurnError, e)
	switch {
	case err == nil && out.ExitCode == 0:
		return true, out.Stdout, nil
	case err == nil && out.ExitCode == 1:
		return false, "", nil
	}
	return false, "", failedHook(h, HookTurnError, out, err)
}

// failedHook turns a run's failure, or an exit code the hook does not
// define, into a *HookError.
func failedHook(h *Hooks, name string, out HookOutcome, err error) *HookError {
	var he *HookError
	if errors.As(err, &he) {
		return he
	}
	if err != nil {
		return &HookError{Hook: name, Command: h.Commands[name], ExitCode: -1, Stderr: out.Stderr, Err: err}
	}
	return &HookError{Hook: name, Command: h.Commands[name], ExitCode: out.ExitCode, Stderr: out.Stderr,
		Err: fmt.Errorf("exit status %d", out.ExitCode)}
}
