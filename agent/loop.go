package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"ollie/agent/backend"
	"ollie/internal/jsonx"
	"ollie/toolsrv/tool"
)

// Safety limits of the loop, from the seed.
const (
	nudgeAfterErrors = 5 // consecutive failed tool calls before a nudge
	abortAfterErrors = 10
	maxRepeats       = 3 // identical consecutive tool-call rounds before stopping
	replanAfter      = 8 // rounds of tool calls without a plan before the replan nudge
	stallAfter       = 5 // rounds with the same last action before the stall nudge
	keepOnCompact    = 8 // messages kept verbatim when the context overflows
)

// say writes to both chat streams.
func (a *Agent) say(s string) {
	a.chat(s)
	a.ChatRaw.Write([]byte(s))
}

// chat writes to the chat stream, and gives the journal its copy.
func (a *Agent) chat(s string) {
	a.chatMu.Lock()
	defer a.chatMu.Unlock()
	a.Chat.Write([]byte(s))
	if a.cfg.Journal != nil {
		a.cfg.Journal.Chat(s)
	}
}

func (a *Agent) raw(s string) { a.ChatRaw.Write([]byte(s)) }

func (a *Agent) appendMsg(m backend.Message) {
	// Arguments that are not JSON are kept as a JSON string, so that the
	// message can be recorded, and the call is refused with the reason.
	for i, c := range m.ToolCalls {
		if !json.Valid(c.Args) {
			if i == 0 {
				m.ToolCalls = append([]backend.ToolCall(nil), m.ToolCalls...)
			}
			raw, _ := json.Marshal(string(c.Args))
			m.ToolCalls[i].Args = raw
			if m.ToolCalls[i].ArgsError == "" {
				m.ToolCalls[i].ArgsError = "not valid JSON"
			}
		}
	}
	a.mu.Lock()
	a.history = append(a.history, m)
	a.mu.Unlock()
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Entry("message", m); err != nil {
			a.say("\n[warning: this message could not be recorded, so a restart would lose it: " + err.Error() + "]\n")
		}
	}
}

func (a *Agent) fail(msg string) {
	a.mu.Lock()
	a.lastErr = msg
	a.mu.Unlock()
	a.say("\n[" + msg + "]\n")
	a.publish("error", msg)
}

// turn runs one prompt to its final answer.
func (a *Agent) turn(ctx context.Context, prompt string) {
	a.mu.Lock()
	a.lastErr = ""
	a.mu.Unlock()
	if a.cfg.TurnNote != "" {
		a.say("[" + a.cfg.TurnNote + "]\n")
	}
	a.raw("<prompt>\n")
	a.say(prompt + "\n")
	a.raw("</prompt>\n")
	if a.cfg.Hooks.Has(HookPreTurn) {
		d, err := a.cfg.Hooks.PreTurn(ctx, prompt)
		if !d.Allow {
			a.fail("not run: " + hookReason(d, err))
			return
		}
		if d.Inject != "" {
			prompt += "\n\n" + d.Inject
		}
	}
	a.appendMsg(backend.Message{Role: backend.RoleUser, Content: prompt})
	a.mu.Lock()
	a.task = TaskState{Objective: firstLine(prompt, 300)}
	a.mu.Unlock()
	a.work(ctx, prompt)
}

// resumeTurn goes on with a turn a stop of olliesrv cut short (Continue):
// no new prompt, the model asked again with the history as it stands.
func (a *Agent) resumeTurn(ctx context.Context) {
	a.mu.Lock()
	a.lastErr = ""
	prompt := ""
	for i := len(a.history) - 1; i >= 0; i-- {
		if a.history[i].Role == backend.RoleUser {
			prompt = a.history[i].Content
			break
		}
	}
	a.task = TaskState{Objective: firstLine(prompt, 300)}
	a.mu.Unlock()
	a.work(ctx, prompt)
}

// work asks the model and runs its tool calls until its final answer, for
// the turn of prompt.
func (a *Agent) work(ctx context.Context, prompt string) {
	a.injectProcs(ctx)
	t := &turnState{}
	defer func() {
		// Compact at the end of the turn, so no tool result is cut from
		// its call mid-turn.
		if t.fill == "" {
			return
		}
		a.cfg.Hooks.PreCompact(context.WithoutCancel(ctx), CompactInfo{Reason: "overflow"})
		a.compact()
		a.cfg.Hooks.PostCompact(context.WithoutCancel(ctx), CompactInfo{Reason: "overflow"})
		a.say("[compacted: the last request used " + t.fill + " of context, more than half]\n")
	}()
	defer func() {
		a.mu.Lock()
		lastErr := a.lastErr
		a.mu.Unlock()
		a.cfg.Hooks.PostTurn(context.WithoutCancel(ctx), TurnInfo{Prompt: prompt, Reply: t.final, Error: lastErr, Steps: t.steps})
	}()

	decls, tools, ok := a.turnTools(ctx)
	if !ok {
		return
	}
	for step := 0; ; step++ {
		if step == a.cfg.MaxSteps {
			a.fail(fmt.Sprintf("stopped: %d model requests for one prompt is the limit (max steps)", a.cfg.MaxSteps))
			return
		}
		reply, next := a.ask(ctx, tools, t)
		switch next {
		case stepStop:
			return
		case stepAgain:
			continue
		}
		a.appendMsg(reply.Message)
		calls := a.lastCalls()
		if len(calls) == 0 && reply.TextToolCall != "" && !t.toldText {
			// The model meant to call a tool but wrote the call as text:
			// tell it how to call it, once a turn.
			t.toldText = true
			a.nudge("nudge", fmt.Sprintf("Your last reply wrote %s as plain text, so it was not run. Call the tool through the tools API (a tool call), not as text in your reply.", reply.TextToolCall))
			continue
		}
		if len(calls) == 0 {
			if !strings.HasSuffix(reply.Message.Content, "\n") {
				a.say("\n")
			}
			t.final = reply.Message.Content
			return
		}
		if a.repeated(t, calls) {
			return
		}
		action := a.noteAction(t, calls)
		a.runCalls(ctx, decls, calls, t)
		if ctx.Err() != nil {
			a.fail("interrupted: " + context.Cause(ctx).Error())
			return
		}
		a.injectProcs(ctx)
		if !a.steer(t, action) {
			return
		}
	}
}

// turnState is what a turn counts from one model request to the next.
type turnState struct {
	steps                      int    // model requests made
	fill                       string // set when a request used more than half the context window
	final                      string // the reply that ended the turn
	compacted                  bool   // compacted once already for an overflow
	toldText                   bool   // told once already to call tools, not write them
	lastRound                  string // the last round's calls, as asked
	repeats                    int    // rounds in a row that asked exactly that
	rounds                     int    // rounds of tool calls
	failures                   int    // tool calls in a row that failed
	nudged, replanned, stalled bool
	sameAction                 int // rounds in a row that ended with the same action
}

// A stepNext says how a turn goes on after a model request.
type stepNext uint8

const (
	stepOn    stepNext = iota // the reply is in: act on it
	stepAgain                 // ask again (the conversation was compacted)
	stepStop                  // the turn ended (failed or interrupted)
)

// turnTools lists the tools the model is offered this turn; false if
// they could not be listed (the turn has failed).
func (a *Agent) turnTools(ctx context.Context) ([]tool.FunctionDecl, []backend.Tool, bool) {
	var decls []tool.FunctionDecl
	if a.cfg.Tools != nil {
		var err error
		if decls, err = a.cfg.Tools.Decls(ctx); err != nil {
			a.fail("cannot list tools: " + err.Error())
			return nil, nil, false
		}
	}
	a.refreshOffer()
	if a.cfg.Skills != nil && len(a.offered) > 0 {
		// The built-in takes the name: a tool of the same name would
		// never be reached.
		decls = append(slices.DeleteFunc(decls, func(d tool.FunctionDecl) bool { return d.Name == LoadSkillTool }), loadSkillDecl())
	}
	tools := make([]backend.Tool, len(decls))
	for i, d := range decls {
		tools[i] = backend.Tool{Name: d.Name, Description: d.Description, Parameters: d.Parameters}
	}
	return decls, tools, true
}

// ask makes one model request, streaming its reply to the chat, and
// counts what it used.
func (a *Agent) ask(ctx context.Context, tools []backend.Tool, t *turnState) (*backend.Reply, stepNext) {
	a.setState(StateThinking)
	t.steps++
	a.raw("<assistant>\n")
	reply, err := a.cfg.Backend.Chat(ctx, a.messages(), tools, backend.Params{Model: a.cfg.Model, Run: a.cfg.Run}, func(d backend.Delta) {
		if d.Restart {
			a.say("\n[the model's stream broke off; asking again]\n")
		}
		if d.Text != "" {
			a.say(d.Text)
		}
		if d.Reasoning != "" {
			a.raw(d.Reasoning)
		}
	})
	a.raw("\n</assistant>\n")
	if ctx.Err() != nil {
		a.fail("interrupted: " + context.Cause(ctx).Error())
		return reply, stepStop
	}
	if errors.Is(err, backend.ErrContextOverflow) && !t.compacted {
		t.compacted = true
		a.say("\n[the conversation no longer fits the model's context: compacting and retrying]\n")
		a.cfg.Hooks.PreCompact(ctx, CompactInfo{Reason: "overflow"})
		a.compact()
		a.cfg.Hooks.PostCompact(ctx, CompactInfo{Reason: "overflow"})
		return reply, stepAgain
	}
	if err != nil {
		if handled, note, _ := a.cfg.Hooks.TurnError(ctx, TurnErrorInfo{Error: err.Error(), Attempt: 1, Model: a.cfg.Model, Backend: a.cfg.Backend.Name()}); handled {
			a.fail("model error, handled by the turnError hook: " + err.Error() + note)
			return reply, stepStop
		}
		a.fail("model error: " + err.Error())
		return reply, stepStop
	}
	limit := a.cfg.Backend.ContextLength(ctx, a.Model())
	a.mu.Lock()
	a.usage.PromptTokens += reply.Usage.PromptTokens
	a.usage.CompletionTokens += reply.Usage.CompletionTokens
	a.steps++
	a.window, a.lastIn = limit, reply.Usage.PromptTokens
	a.mu.Unlock()
	if limit > 0 && reply.Usage.PromptTokens > limit/2 {
		t.fill = fmt.Sprintf("%d of %d tokens", reply.Usage.PromptTokens, limit)
	}
	for _, w := range reply.Warnings {
		a.say("\n[warning: " + w + "]\n")
	}
	return reply, stepOn
}

// repeated counts a round that asks exactly what the last one asked
// (compared by what was asked, not by the ids) and, at maxRepeats in a
// row, answers the calls unrun and fails the turn.
func (a *Agent) repeated(t *turnState, calls []backend.ToolCall) bool {
	asked := make([]backend.ToolCall, len(calls))
	for i, c := range calls {
		asked[i] = backend.ToolCall{Name: c.Name, Args: c.Args}
	}
	key, _ := json.Marshal(asked)
	if string(key) == t.lastRound {
		t.repeats++
	} else {
		t.lastRound, t.repeats = string(key), 1
	}
	if t.repeats < maxRepeats {
		return false
	}
	// Answer the calls so the history stays well formed, then stop.
	for _, c := range calls {
		a.appendMsg(backend.Message{Role: backend.RoleTool, ToolCallID: c.ID, Name: c.Name,
			Content: "not run: the same call was repeated"})
	}
	a.fail(fmt.Sprintf("stopped: the model made the same tool call %d times in a row", t.repeats))
	return true
}

// noteAction records the round's last call as the task's last action,
// for stall detection and the agent's status, and returns it.
func (a *Agent) noteAction(t *turnState, calls []backend.ToolCall) string {
	t.rounds++
	action := calls[len(calls)-1].Name + " " + compactJSON(calls[len(calls)-1].Args)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.task.LastAction == action {
		t.sameAction++
	} else {
		t.sameAction = 1
	}
	a.task.LastAction = action
	a.task.PlanStep = firstLine(a.plan, 200)
	return action
}

// runCalls runs a round's calls and records their results, counting
// failures in a row.
func (a *Agent) runCalls(ctx context.Context, decls []tool.FunctionDecl, calls []backend.ToolCall, t *turnState) {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	a.mu.Lock()
	a.toolRuns += len(calls)
	a.running = strings.Join(names, " ")
	a.mu.Unlock()
	a.setState(StateCalling)
	results := a.dispatch(ctx, decls, calls)
	a.mu.Lock()
	a.running = ""
	a.mu.Unlock()
	for i, c := range calls {
		res := results[i]
		text := resultText(res)
		if d, ok := declOf(decls, c.Name); ok && d.Tier == tool.TierCold {
			// Cold results are collapsed at once: the model saw that
			// the call happened, the chat keeps the whole output.
			text = fmt.Sprintf("%s (%d bytes of output, collapsed: this tool's results are cold)", firstLine(text, 200), len(text))
		}
		a.appendMsg(backend.Message{Role: backend.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: text})
		if res.Failed {
			t.failures++
		} else {
			t.failures = 0
		}
	}
}

// steer nudges a model that works without a plan, stalls on one action,
// or keeps failing, once each a turn; false once failures end the turn.
func (a *Agent) steer(t *turnState, action string) bool {
	if t.rounds >= replanAfter && !t.replanned && strings.TrimSpace(a.Plan()) == "" {
		t.replanned = true
		a.nudge("replan", fmt.Sprintf("You have made %d rounds of tool calls without a plan. Before calling more tools, write a short numbered plan (what is done, what is next, how you will know you are finished) and follow it.", t.rounds))
	}
	if t.sameAction >= stallAfter && !t.stalled {
		t.stalled = true
		a.nudge("stall", fmt.Sprintf("Your last %d rounds ended with the same action (%s) and nothing changed. You are stalled: step back, state what you have learned, and choose a different next step.", t.sameAction, action))
	}
	switch {
	case t.failures >= abortAfterErrors:
		a.fail(fmt.Sprintf("stopped: %d tool calls in a row failed", t.failures))
		return false
	case t.failures >= nudgeAfterErrors && !t.nudged:
		t.nudged = true
		a.nudge("nudge", fmt.Sprintf("The last %d tool calls failed. Stop repeating what does not work: read the errors, reconsider the approach, and try something different or explain what is blocking you.", t.failures))
	}
	return true
}

// nudge tells the model text as the user, and the chat as "[kind: text]".
func (a *Agent) nudge(kind, text string) {
	a.appendMsg(backend.Message{Role: backend.RoleUser, Content: text})
	a.say("\n[" + kind + ": " + text + "]\n")
}

// lastCalls returns the tool calls of the last message, as recorded.
func (a *Agent) lastCalls() []backend.ToolCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.history[len(a.history)-1].ToolCalls
}

// messages is what the model is sent: the system prompt with the task
// state overlay, then the history.
func (a *Agent) messages() []backend.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	msgs := make([]backend.Message, 0, len(a.history)+1)
	system := a.cfg.System + a.skillPrompt()
	if a.task.Objective != "" {
		ts, _ := json.Marshal(a.task)
		system += "\n\n<task-state>" + string(ts) + "</task-state>"
	}
	if system != "" {
		msgs = append(msgs, backend.Message{Role: backend.RoleSystem, Content: system})
	}
	return append(msgs, a.history...)
}

// firstLine returns s's first line, at most n bytes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// compact shortens the history to fit the context window, carrying the
// loaded skills through, and records it.
func (a *Agent) compact() {
	loaded := a.skillTexts()
	a.mu.Lock()
	a.history = keepSkills(a.history, compactHistory(a.history), loaded)
	h := append([]backend.Message(nil), a.history...)
	a.mu.Unlock()
	if a.cfg.Journal != nil {
		a.cfg.Journal.Entry("history", h)
	}
}

// compactHistory keeps the most recent messages, starting at a user message
// so that no tool result loses its call, and notes what was dropped.
//
// Three zones, from the seed: the hot zone (the last messages) stays
// verbatim; the warm zone (up to warmIndex messages before it) becomes a
// one-line-each decision index; everything older is cold and leaves only
// its count, the task state carrying its thread.
func compactHistory(h []backend.Message) []backend.Message {
	cut := len(h) - keepOnCompact
	for cut > 0 && h[cut].Role != backend.RoleUser {
		cut--
	}
	if cut <= 0 {
		return h
	}
	warmFrom := max(0, cut-warmIndex)
	var b strings.Builder
	fmt.Fprintf(&b, "[%d earlier messages were removed to fit the context window", cut)
	if warmFrom > 0 {
		fmt.Fprintf(&b, "; the %d oldest are summarised by the task state", warmFrom)
	}
	b.WriteString("]\nDecision index of the messages just before the ones kept:\n")
	for _, m := range h[warmFrom:cut] {
		fmt.Fprintf(&b, "- %s\n", indexLine(m))
	}
	note := backend.Message{Role: backend.RoleUser, Content: b.String()}
	return append([]backend.Message{note}, h[cut:]...)
}

// warmIndex is how many messages the decision index summarises.
const warmIndex = 10

// indexLine summarises a message for the decision index.
func indexLine(m backend.Message) string {
	switch {
	case len(m.ToolCalls) > 0:
		var names []string
		for _, c := range m.ToolCalls {
			names = append(names, c.Name+" "+compactJSON(c.Args))
		}
		return "assistant called " + firstLine(strings.Join(names, "; "), 160)
	case m.Role == backend.RoleTool:
		return m.Name + " returned " + firstLine(m.Content, 120)
	}
	return m.Role + ": " + firstLine(m.Content, 160)
}

func resultText(r *tool.Result) string {
	text := r.Output
	if len(r.Content) > 0 && string(r.Content) != "null" {
		text = string(r.Content)
	}
	if r.Failed {
		return "error: " + text
	}
	return text
}

func declOf(decls []tool.FunctionDecl, name string) (tool.FunctionDecl, bool) {
	for _, d := range decls {
		if d.Name == name {
			return d, true
		}
	}
	return tool.FunctionDecl{}, false
}

// dispatch runs one round of calls, in parallel where their scopes allow:
// reads together, writes to different paths together, global calls alone.
func (a *Agent) dispatch(ctx context.Context, decls []tool.FunctionDecl, calls []backend.ToolCall) []*tool.Result {
	byName := map[string]tool.FunctionDecl{}
	for _, d := range decls {
		byName[d.Name] = d
	}
	scopes := make([]tool.Scope, len(calls))
	for i, c := range calls {
		if d, ok := byName[c.Name]; ok {
			scopes[i] = d.CallScope(c.Args, a.cfg.Cwd)
		}
	}
	results := make([]*tool.Result, len(calls))
	for _, batch := range tool.Batches(scopes) {
		var wg sync.WaitGroup
		for _, i := range batch {
			c := calls[i]
			a.say(fmt.Sprintf("\n→ %s %s\n", c.Name, compactJSON(c.Args)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = a.call(ctx, byName[c.Name], c)
			}()
		}
		wg.Wait()
		for _, i := range batch {
			r := results[i]
			a.raw(fmt.Sprintf("<tool_result name=%q id=%q failed=%t>\n%s\n</tool_result>\n", calls[i].Name, calls[i].ID, r.Failed, resultText(r)))
			a.chat(fmt.Sprintf("← %s: %s\n", calls[i].Name, summary(r)))
		}
	}
	return results
}

// call runs one tool call inside its effect sandwich.
func (a *Agent) call(ctx context.Context, d tool.FunctionDecl, c backend.ToolCall) *tool.Result {
	if d.Name == "" {
		return &tool.Result{Tool: c.Name, Failed: true, ExitCode: -1,
			Output: fmt.Sprintf("there is no tool %q in this session", c.Name)}
	}
	if c.ArgsError != "" || !json.Valid(c.Args) {
		why := c.ArgsError
		if why == "" {
			why = "not valid JSON"
		}
		return &tool.Result{Tool: c.Name, Failed: true, ExitCode: -1,
			Output: fmt.Sprintf("not run: the arguments are malformed (%s): %s", why, c.Args)}
	}
	hc := HookCall{ID: c.ID, Tool: c.Name, Args: c.Args}
	if a.cfg.Hooks.Has(HookPreTool) {
		if d, err := a.cfg.Hooks.PreTool(ctx, hc); !d.Allow {
			return &tool.Result{Tool: c.Name, Failed: true, ExitCode: -1,
				Output: "not run: " + hookReason(d, err)}
		}
	}
	if c.Name == LoadSkillTool && a.cfg.Skills != nil {
		// Answered here; its effect is recorded as the skills entry.
		return a.loadSkillCall(c.Args)
	}
	// Models reuse call ids across turns (many local ones count from 0 in
	// every reply): a nonce keeps each call's record its own.
	id := a.cfg.ID + "/" + c.ID + "#" + nonce()
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Intent(id, c.Name, c.Args, d.ReplaySafe); err != nil {
			return &tool.Result{Tool: c.Name, Failed: true, ExitCode: -1, Output: "not run: cannot record the call: " + err.Error()}
		}
	}
	var res *tool.Result
	var err error
	if bt, ok := a.cfg.Tools.(BackgroundTools); ok && wantsBackground(c.Args) {
		var id string
		if id, err = bt.Start(ctx, c.Name, c.Args); err == nil {
			a.mu.Lock()
			a.procs = append(a.procs, &bgProc{id: id, tool: c.Name})
			a.started = append(a.started, ProcInfo{ID: id, Tool: c.Name})
			a.mu.Unlock()
			res = &tool.Result{Tool: c.Name, Output: fmt.Sprintf("started in the background as process %s; its output will be shown to you as <system-proc-interrupt> blocks as it comes", id)}
		}
	} else {
		res, err = a.cfg.Tools.Call(ctx, c.Name, c.Args)
	}
	if err != nil {
		res = &tool.Result{Tool: c.Name, Failed: true, ExitCode: -1, Output: err.Error()}
	}
	if a.cfg.Journal != nil {
		a.cfg.Journal.Settle(id, res)
	}
	if a.cfg.Hooks.Has(HookPostTool) {
		text, err := a.cfg.Hooks.PostTool(ctx, hc, resultText(res), res.Failed)
		if err != nil {
			return &tool.Result{Tool: c.Name, Failed: true, ExitCode: res.ExitCode,
				Output: "the result was withheld: the postTool hook failed: " + err.Error()}
		}
		res = &tool.Result{Tool: res.Tool, Output: text, ExitCode: res.ExitCode, Sandbox: res.Sandbox}
		if strings.HasPrefix(text, "error: ") {
			res.Failed, res.Output = true, strings.TrimPrefix(text, "error: ")
		}
	}
	return res
}

// hookReason says why a hook refused, for the model and the chat.
func hookReason(d HookDecision, err error) string {
	switch {
	case d.Reason != "":
		return d.Reason
	case err != nil:
		return err.Error()
	}
	return "no reason given"
}

// compactJSON is b canonical and cut to 200 bytes, for a line of chat;
// what is not JSON is shown whole, as the model sent it.
func compactJSON(b json.RawMessage) string {
	if !json.Valid(b) {
		return string(b)
	}
	out := jsonx.Canonical(b)
	if len(out) > 200 {
		return string(out[:200]) + "…"
	}
	return string(out)
}

// summary is one line about a result, for the filtered chat.
func summary(r *tool.Result) string {
	text := strings.TrimSpace(resultText(r))
	first, rest, more := strings.Cut(text, "\n")
	if len(first) > 120 {
		first, more = first[:120]+"…", true
	}
	if more {
		return fmt.Sprintf("%s (%d lines)", first, strings.Count(rest, "\n")+2)
	}
	return first
}

// bgProc is a background call whose output the model has not all seen.
type bgProc struct {
	id   string
	tool string
	off  int64
}

func wantsBackground(args json.RawMessage) bool {
	var v struct {
		Background bool `json:"background"`
	}
	json.Unmarshal(args, &v)
	return v.Background
}

// injectProcs shows the model what background calls printed since it last
// looked, and how they ended, as one user message.
func (a *Agent) injectProcs(ctx context.Context) {
	bt, ok := a.cfg.Tools.(BackgroundTools)
	if !ok {
		return
	}
	a.mu.Lock()
	procs := append([]*bgProc(nil), a.procs...)
	a.mu.Unlock()
	var b strings.Builder
	var ended []*bgProc
	for _, p := range procs {
		poll, err := bt.Poll(ctx, p.id, p.off)
		if err != nil {
			fmt.Fprintf(&b, "<system-proc-interrupt id=%q tool=%q status=%q>\n</system-proc-interrupt>\n", p.id, p.tool, "gone: "+err.Error())
			ended = append(ended, p)
			continue
		}
		p.off = poll.Next
		if poll.Data == "" && !poll.Ended {
			continue
		}
		fmt.Fprintf(&b, "<system-proc-interrupt id=%q tool=%q status=%q>\n%s</system-proc-interrupt>\n", p.id, p.tool, poll.Status, poll.Data)
		if poll.Ended {
			ended = append(ended, p)
		}
	}
	if len(ended) > 0 {
		a.mu.Lock()
		keep := a.procs[:0]
		for _, p := range a.procs {
			done := false
			for _, e := range ended {
				done = done || e == p
			}
			if !done {
				keep = append(keep, p)
			}
		}
		a.procs = keep
		a.mu.Unlock()
	}
	if b.Len() > 0 {
		a.appendMsg(backend.Message{Role: backend.RoleUser, Content: b.String()})
		a.raw(b.String())
	}
}

// nonce is 8 random hex digits.
func nonce() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
