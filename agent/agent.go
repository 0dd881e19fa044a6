package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"ollie/agent/backend"
	"ollie/agent/wire"
	"ollie/internal/changes"
	"ollie/ns/stream"
	"ollie/toolsrv/tool"
)

// Agent states, as the state file shows them (wire's, the format's home).
const (
	StateIdle     = wire.StateIdle
	StateThinking = wire.StateThinking
	StateCalling  = wire.StateCalling
	StatePaused   = wire.StatePaused
	StateClosed   = wire.StateClosed
)

// Tools is how an agent reaches its session's tools: toolsrv.View, an
// agent's view of its session's toolsrv child, is one.
type Tools interface {
	Decls(ctx context.Context) ([]tool.FunctionDecl, error)
	Call(ctx context.Context, tool string, args json.RawMessage) (*tool.Result, error)
}

// BackgroundTools also runs calls in the background (background: true):
// toolsrv.View is one. Their output reaches the model as it comes.
type BackgroundTools interface {
	Tools
	Start(ctx context.Context, tool string, args json.RawMessage) (string, error)
	Poll(ctx context.Context, id string, off int64) (*tool.ProcPoll, error)
}

// A Journal records what an agent does so that a session survives a crash:
// every entry before it takes effect, every tool call as an intent before
// it runs and a settlement after. Nil records nothing.
type Journal interface {
	Entry(kind string, v any) error
	Intent(id, tool string, args json.RawMessage, replaySafe bool) error
	Settle(id string, result any) error
	// Chat is given everything the agent writes to its chat stream, in
	// order; the journal keeps it with its next entry, so that a restart
	// rebuilds the stream (see Resume).
	Chat(text string)
}

// Config sets up an agent.
type Config struct {
	ID        string // immutable UUID
	Name      string
	SessionID string
	// Run is the session's name as the agent was made: requests to the
	// desktop's model are counted and budgeted by it (a fleet run's
	// session is named after the run).
	Run      string
	Backend  backend.Backend
	Model    string // "" means the backend's default
	System   string // the resolved system prompt
	Tools    Tools  // nil: the agent has no tools
	Cwd      string
	MaxSteps int                      // model requests per prompt (default 50)
	Publish  func(topic, data string) // state and chat events (may be nil)
	Journal  Journal                  // may be nil
	Hooks    *Hooks                   // nil runs none
	Now      func() time.Time         // time.Now when nil
	History  []backend.Message        // restored history
	// TurnNote, when set, is written to the chat at the start of every
	// turn, as a line in brackets: what a person reading any turn must
	// know (a yolo session's tools run unsandboxed and unapproved).
	TurnNote string
	// Skills are the skills the host offers (nil: none), and LoadedSkills
	// those a restored agent had loaded: listed as loaded and offered
	// again, their text not sent again.
	Skills       Skills
	LoadedSkills []string
}

// An Agent runs the loop for one conversation: each prompt is streamed to
// the model, its tool calls are dispatched, and the results go back until
// the model answers without calling a tool.
type Agent struct {
	cfg Config

	Chat    *stream.Stream // what a person reads: text, tool calls, results, errors
	ChatRaw *stream.Stream // everything, with markers

	chatMu sync.Mutex // keeps the chat stream and the journal's copy in one order

	mu       sync.Mutex
	state    string
	changed  changes.Counter // bumped under mu when state, stateVer or turns move
	history  []backend.Message
	queue    []string
	goOn     string                  // why the cut turn goes on (Continue), before the queue; "" when none
	restored int                     // the chat stream's bytes Resume put back
	hold     <-chan struct{}         // no turn starts until it is closed (HoldUntil); nil: none
	cancel   context.CancelCauseFunc // of the running turn, nil when idle
	usage    backend.Usage
	turns    int
	// announcing holds the waiters for a turn's end until its idle event
	// is out, so a waiter that wakes may trust every subscriber saw it.
	announcing bool
	steps      int    // the model's replies, every turn's
	toolRuns   int    // the tool calls it made
	running    string // the tools running now, "" when none
	window     int    // the context window at the last reply, 0 if unknown
	lastIn     int    // the prompt tokens of the last reply
	lastErr    string
	closed     bool
	procs      []*bgProc  // background calls whose output is still coming
	started    []ProcInfo // every background call this agent started
	stateVer   uint64
	plan       string
	task       TaskState
	skills     []loadedSkill // loaded, oldest first
	offered    []SkillInfo   // on offer for the running turn
	wake       chan struct{}
	done       chan struct{}
}

// ErrClosed is the cause of a turn ended by Close.
var ErrClosed = errors.New("agent: closed")

// ErrStopped is the cause of a turn ended by the stop control.
var ErrStopped = errors.New("agent: stopped")

// New starts an agent; it waits idle for prompts.
func New(cfg Config) *Agent {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 50
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Agent{
		cfg:     cfg,
		Chat:    stream.NewStream(0),
		ChatRaw: stream.NewStream(0),
		state:   StateIdle,
		history: append([]backend.Message(nil), cfg.History...),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	for _, name := range cfg.LoadedSkills {
		a.skills = append(a.skills, loadedSkill{name: name})
	}
	go a.run()
	return a
}

// ID returns the agent's immutable ID.
func (a *Agent) ID() string { return a.cfg.ID }

func (a *Agent) publish(what, data string) {
	if a.cfg.Publish != nil {
		a.cfg.Publish("session."+a.cfg.SessionID+".agent."+a.cfg.ID+"."+what, data)
	}
}

// notify wakes every waiter; a.mu is held.
func (a *Agent) notify() { a.changed.Bump() }

func (a *Agent) setState(s string) {
	a.mu.Lock()
	if a.state == s {
		a.mu.Unlock()
		return
	}
	a.state = s
	a.stateVer++
	a.notify()
	a.mu.Unlock()
	a.publish("state", s)
}

// StateVersion counts the agent's state changes.
func (a *Agent) StateVersion() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateVer
}

// WaitState blocks until the state has changed since version v (a turn
// that came and went counts), and returns the state then; or until ctx
// ends.
func (a *Agent) WaitState(ctx context.Context, v uint64) (string, bool) {
	var s string
	err := a.changed.Until(ctx, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		s = a.state
		return a.stateVer != v
	})
	return s, err == nil
}

// WaitTurns blocks until n prompts have run to their end, or ctx ends.
func (a *Agent) WaitTurns(ctx context.Context, n int) bool {
	return a.changed.Until(ctx, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.turns >= n && !a.announcing
	}) == nil
}

// State returns the agent's state.
func (a *Agent) State() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// WaitChange blocks until the state differs from current and returns it,
// or until ctx ends (then it returns the state and false).
func (a *Agent) WaitChange(ctx context.Context, current string) (string, bool) {
	var s string
	err := a.changed.Until(ctx, func() bool { s = a.State(); return s != current })
	return s, err == nil
}

// Submit queues a prompt; the agent runs it when it is idle.
func (a *Agent) Submit(ctx context.Context, input string) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	a.mu.Unlock()
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Entry("prompt", input); err != nil {
			return fmt.Errorf("agent: recording the prompt: %w", err)
		}
	}
	a.Queue(input)
	return nil
}

// Queue adds a prompt to the queue without recording it.
func (a *Agent) Queue(prompt string) {
	a.mu.Lock()
	a.queue = append(a.queue, prompt)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Queued returns the prompts waiting to run.
func (a *Agent) Queued() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.queue...)
}

// Note writes a line for people to both chat streams, outside any turn.
func (a *Agent) Note(s string) { a.say("[" + s + "]\n") }

// Resume puts back what a restored agent's session file kept of it: its
// chat stream up to the last record (chat.raw gets it too, between
// <restored> markers, as the raw details were not kept), and the error its
// last turn ended with. It records nothing, and is for an agent no one can
// reach yet.
func (a *Agent) Resume(chat, lastErr string) {
	a.mu.Lock()
	a.lastErr = lastErr
	a.mu.Unlock()
	if chat == "" {
		return
	}
	a.Chat.Write([]byte(chat))
	a.mu.Lock()
	a.restored = len(chat)
	a.mu.Unlock()
	if !strings.HasSuffix(chat, "\n") {
		chat += "\n"
	}
	a.ChatRaw.Write([]byte("<restored>\n" + chat + "</restored>\n"))
}

// EndInterrupted settles a restored agent's turn that the session file
// shows running, which a stop of olliesrv cut short: the chat says note,
// and the turn's end is recorded with note as its error, so that the next
// restart finds it ended and does not mark it again. Like Resume, it is for
// an agent no one can reach yet.
func (a *Agent) EndInterrupted(note string) error {
	a.mu.Lock()
	a.lastErr = note
	a.mu.Unlock()
	a.Note(note)
	if a.cfg.Journal == nil {
		return nil
	}
	return a.cfg.Journal.Entry("end", note)
}

// Continue has a restored agent go on with the turn a stop of olliesrv
// cut short, before any queued prompt and without a new one: the model is
// asked again with the history as it stands (a tool call that was running
// answered as interrupted, its outcome unknown; nothing is run again by
// itself). why is said on the chat and recorded. Like Resume, it is for
// an agent no one can reach yet.
func (a *Agent) Continue(why string) {
	a.mu.Lock()
	a.goOn = why
	a.mu.Unlock()
	// Busy from now: whoever waits for the cut turn's end never sees the
	// agent idle before it goes on.
	a.setState(StateThinking)
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// HoldUntil keeps the agent from starting any turn (the one Continue
// asks for, a queued prompt) until ready is closed: a restored agent waits
// for the results of the calls run once more after a restart, which its
// history needs first.
func (a *Agent) HoldUntil(ready <-chan struct{}) {
	a.mu.Lock()
	a.hold = ready
	a.mu.Unlock()
}

// Interrupt ends the running turn with cause; it reports whether one was
// running.
func (a *Agent) Interrupt(cause error) bool {
	a.mu.Lock()
	cancel := a.cancel
	a.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel(cause)
	return true
}

// History returns a copy of the conversation.
func (a *Agent) History() []backend.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]backend.Message(nil), a.history...)
}

// Stats is the agent's stats file (wire.Stats, the format's one home).
type Stats = wire.Stats

// Stats returns the agent's statistics.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Stats{Turns: a.turns, PromptTokens: a.usage.PromptTokens, CompletionTokens: a.usage.CompletionTokens,
		Messages: len(a.history), LastError: a.lastErr, State: a.state, Queued: len(a.queue),
		Steps: a.steps, ToolCalls: a.toolRuns, Running: a.running,
		ContextWindow: a.window, PromptTokensLast: a.lastIn, ChatRestored: a.restored}
}

// Close interrupts the running turn, stops the agent and ends its streams.
func (a *Agent) Close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.done
		return
	}
	a.closed = true
	a.mu.Unlock()
	a.Interrupt(ErrClosed)
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
	a.setState(StateClosed)
	a.Chat.Close()
	a.ChatRaw.Close()
}

// run takes prompts off the queue one at a time.
func (a *Agent) run() {
	defer close(a.done)
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return
		}
		if len(a.queue) == 0 && a.goOn == "" {
			a.mu.Unlock()
			<-a.wake
			continue
		}
		if h := a.hold; h != nil {
			a.mu.Unlock()
			select {
			case <-h:
				a.mu.Lock()
				if a.hold == h {
					a.hold = nil
				}
				a.mu.Unlock()
			case <-a.wake: // Close, or more work: look again
			}
			continue
		}
		var prompt string
		goOn := a.goOn
		if goOn != "" {
			a.goOn = ""
		} else {
			prompt = a.queue[0]
			a.queue = a.queue[1:]
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		a.cancel = cancel
		a.mu.Unlock()
		if goOn != "" {
			// Said before it is recorded, so the record carries it and a
			// restart shows it.
			a.say("\n[" + goOn + "]\n")
		}
		switch {
		case a.cfg.Journal != nil && goOn != "":
			a.cfg.Journal.Entry("resume", goOn)
		case a.cfg.Journal != nil:
			a.cfg.Journal.Entry("dequeue", nil)
		}

		if goOn != "" {
			a.resumeTurn(ctx)
		} else {
			a.turn(ctx, prompt)
		}
		if a.cfg.Journal != nil {
			// How the turn ended, and the chat to its end: a restart then
			// tells a failed turn from one a crash cut short.
			a.mu.Lock()
			lastErr := a.lastErr
			a.mu.Unlock()
			a.cfg.Journal.Entry("end", lastErr)
		}

		// The turn ends at once for every observer: counted, not
		// interruptible, and idle, in one step. (Counting it after the
		// state went idle let a waiter for the next turn's end return on
		// this one's.)
		cancel(nil)
		a.mu.Lock()
		a.cancel = nil
		a.turns++
		changed := a.state != StateIdle
		if changed {
			a.state = StateIdle
			a.stateVer++
			a.announcing = true
		}
		a.mu.Unlock()
		// The event goes out before the waiters for the turn's end wake;
		// a waiter woken meanwhile by another change waits on.
		if changed {
			a.publish("state", StateIdle)
		}
		a.mu.Lock()
		a.announcing = false
		a.notify()
		a.mu.Unlock()
	}
}

// ErrBusy refuses a change of the history while a turn runs.
var ErrBusy = errors.New("agent: busy: stop the running turn first")

// rewrite replaces the history when the agent is idle, once the new one is
// recorded. The lock is held across the record so that no turn starts and
// no message joins between the record and the change.
func (a *Agent) rewrite(f func([]backend.Message) []backend.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		return ErrBusy
	}
	h := f(append([]backend.Message(nil), a.history...))
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Entry("history", h); err != nil {
			return fmt.Errorf("agent: the history was not changed: %w", err)
		}
	}
	a.history = h
	return nil
}

// Clear empties the conversation, and so unloads every skill.
func (a *Agent) Clear() error {
	if err := a.rewrite(func([]backend.Message) []backend.Message { return nil }); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.skills) == 0 {
		return nil
	}
	return a.setSkills(nil)
}

// Compact keeps the most recent messages and notes what was removed; it
// returns how many messages were removed.
func (a *Agent) Compact() (int, error) {
	removed := 0
	loaded := a.skillTexts()
	err := a.rewrite(func(h []backend.Message) []backend.Message {
		out := keepSkills(h, compactHistory(h), loaded)
		removed = len(h) - len(out)
		if removed > 0 {
			removed++ // the note replaces them
		}
		return out
	})
	return max(removed, 0), err
}

// Inject adds text to the context as a user message, without running a
// turn, once it is recorded.
func (a *Agent) Inject(text string) error {
	m := backend.Message{Role: backend.RoleUser, Content: text}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Entry("message", m); err != nil {
			return fmt.Errorf("agent: not injected: %w", err)
		}
	}
	a.history = append(a.history, m)
	return nil
}

// Name is the agent's display name.
func (a *Agent) Name() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Name
}

// SetName renames the agent.
func (a *Agent) SetName(name string) {
	a.mu.Lock()
	a.cfg.Name = name
	a.mu.Unlock()
}

// Cwd is the directory the agent works in; it never changes.
func (a *Agent) Cwd() string { return a.cfg.Cwd }

// Model returns the model requests use ("" for the backend's default).
func (a *Agent) Model() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Model
}

// SetModel switches the model for the next requests.
func (a *Agent) SetModel(m string) {
	a.mu.Lock()
	a.cfg.Model = m
	a.mu.Unlock()
}

// Plan returns the agent's plan.
func (a *Agent) Plan() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.plan
}

// SetPlan replaces the agent's plan (the plan file).
func (a *Agent) SetPlan(p string) {
	a.mu.Lock()
	a.plan = p
	a.mu.Unlock()
}

// TaskState is the structured overlay shown to the model at the top of
// every request: what it is doing, so a long conversation (or one cut by
// compaction) keeps its thread.
type TaskState struct {
	Objective    string `json:"objective"`
	PlanStep     string `json:"plan_step,omitempty"`
	Constraints  string `json:"constraints,omitempty"`
	LastAction   string `json:"last_action,omitempty"`
	NextDecision string `json:"next_decision,omitempty"`
}

// Task returns the agent's task state.
func (a *Agent) Task() TaskState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.task
}

// AppendResults adds tool results to the history, recorded, as a restart
// does when it has re-run calls a crash interrupted.
func (a *Agent) AppendResults(msgs ...backend.Message) {
	for _, m := range msgs {
		a.appendMsg(m)
	}
}

// Tools returns how the agent reaches its tools (nil for none).
func (a *Agent) Tools() Tools {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Tools
}

// ProcInfo names a background process an agent started.
type ProcInfo struct {
	ID   string
	Tool string
}

// Procs returns the background processes the agent started, oldest first.
func (a *Agent) Procs() []ProcInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ProcInfo(nil), a.started...)
}

// Reconfigure switches the agent to another profile's system prompt,
// hooks, tools and step limit. It is refused while a turn runs or prompts
// wait, so a turn never sees half of two profiles.
func (a *Agent) Reconfigure(system string, hooks *Hooks, tools Tools, maxSteps int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil || len(a.queue) > 0 {
		return ErrBusy
	}
	a.cfg.System, a.cfg.Hooks, a.cfg.Tools = system, hooks, tools
	if maxSteps > 0 {
		a.cfg.MaxSteps = maxSteps
	}
	return nil
}

// System returns the system prompt the next turn's requests carry: the
// profile's, and the skills on offer (ctl systemprompt shows it).
func (a *Agent) System() string {
	// As the next turn's requests will have it: with the skills on offer now.
	var offered []SkillInfo
	if a.cfg.Skills != nil {
		offered = a.cfg.Skills.Offered()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	saved := a.offered
	a.offered = offered
	defer func() { a.offered = saved }()
	return a.cfg.System + a.skillPrompt()
}
