package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"ollie/agent/wire"
	"ollie/ns/client"
	"ollie/tunnel/keeper"
)

// What the watch reads from a host is bounded: a host is only data.
const (
	maxSmall  = 64 << 10 // stats, goalstatus, status
	maxLog    = 8 << 20  // the agent's log, for its last answer
	maxLine   = 4 << 10  // a line of chat kept or passed on
	maxAnswer = 16 << 10 // the answer kept in the run
)

// watch follows one host's agent until its goal is met, blocked or failed,
// the host is lost, or ctx ends. Once, it reads the host's state one time
// and returns.
func (r *Runner) watch(ctx context.Context, h *Host, sock string, once bool) {
	w := &watcher{r: r, h: h, sock: sock, once: once, dir: "session/" + r.Run.Session + "/", lostAfter: r.Cfg.LostAfter}
	w.agentDir = w.dir + "agent/" + agentName + "/"
	if w.lostAfter <= 0 {
		w.lostAfter = 2 * time.Minute
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if !once {
		// A fresh run shows its chat from the start; an attach from now.
		r.mu.Lock()
		fromStart := h.Steps == 0
		r.mu.Unlock()
		go r.follow(wctx, h, sock, w.agentDir+"chat", fromStart)
	}
	defer func() {
		if w.c != nil {
			w.c.Close()
		}
	}()
	for ctx.Err() == nil {
		st, goal, daemon, err := w.read(ctx)
		if err != nil {
			if w.unreachable(ctx, err) {
				return
			}
			continue
		}
		w.downSince = time.Time{}
		w.sawDaemon(daemon)
		r.update(h, func(h *Host) {
			h.Steps, h.ToolCalls, h.Tokens = max(h.Steps, st.Steps), max(h.ToolCalls, st.ToolCalls), max(h.Tokens, st.PromptTokens+st.CompletionTokens)
		})
		if w.settle(ctx, st, goal) {
			return
		}
		r.update(h, func(h *Host) { h.State = stateWord(st, r.Cfg.Waiting, h.Name) })
		if once {
			return
		}
		waitChange(ctx, w.c, w.agentDir+"statewait", time.Second)
	}
}

// watcher is one host's watch: the connection it reads the host on and
// what it has seen of the host's agent so far.
type watcher struct {
	r         *Runner
	h         *Host
	sock      string
	once      bool
	dir       string // the run's session, in the host's namespace
	agentDir  string
	lostAfter time.Duration

	c         *client.Conn // nil while the host is not reached
	downSince time.Time
	started   string // the daemon's start time, to notice a restart
	busy      bool   // the agent was seen working since it was (re)started
	// restarted: the daemon restarted and the agent has not been
	// given its goal again yet. What its stats show meanwhile (a
	// restored agent's turns, the interruption as its last error, a
	// state seen while it was being restored) is the old turn's.
	restarted bool
	idleSince time.Time
}

// read reads the host's state, reaching the host first when it is not.
func (w *watcher) read(ctx context.Context) (st wire.Stats, goal, daemon string, err error) {
	if w.c == nil {
		if w.c, err = dialHost(w.sock); err != nil {
			return st, "", "", err
		}
	}
	return readState(ctx, w.c, w.agentDir, w.dir)
}

// unreachable deals with a read that failed, and reports whether the
// watch is over: ctx ended, the session is gone, it was one look, or the
// host has not answered for lostAfter. Otherwise it lets the connection
// go and waits a second before the next try.
func (w *watcher) unreachable(ctx context.Context, err error) (over bool) {
	r := w.r
	if ctx.Err() != nil {
		return true
	}
	if isGone(err) {
		r.fail(w.h, "failed", "its session or agent is gone: "+err.Error())
		return true
	}
	if w.once {
		r.update(w.h, func(h *Host) { h.State = "unreachable now: " + err.Error() })
		return true
	}
	if w.c != nil {
		w.c.Close()
		w.c = nil
	}
	if w.downSince.IsZero() {
		w.downSince = time.Now()
	}
	if time.Since(w.downSince) > w.lostAfter {
		r.fail(w.h, "lost", fmt.Sprintf("unreachable for %s (%s); its agent may go on: fleet attach %s", w.lostAfter, tunnelState(ctx, r, w.h.Name), r.Run.ID))
		return true
	}
	r.update(w.h, func(h *Host) { h.State = "reconnecting: " + tunnelState(ctx, r, h.Name) })
	sleep(ctx, time.Second)
	return false
}

// sawDaemon notes the daemon's start time, and that it restarted when
// the time changed.
func (w *watcher) sawDaemon(daemon string) {
	if w.started == "" {
		w.started = daemon
	} else if daemon != w.started {
		// The daemon restarted: the session is durable, but the turn
		// it ran was interrupted. The run picks it up.
		w.started, w.busy, w.restarted = daemon, false, true
		w.r.update(w.h, func(h *Host) {
			h.Notes = append(h.Notes, "olliesrv restarted during the run; its session was picked up")
		})
	}
}

// settle judges the agent's state and reports whether the host's part
// of the run is over, recording its result then.
func (w *watcher) settle(ctx context.Context, st wire.Stats, goal string) (over bool) {
	working := st.State == wire.StateThinking || st.State == wire.StateCalling || st.Queued > 0
	if working && w.restarted {
		// The restored agent went on with its cut turn by itself
		// (a session's resume=auto): it needs no prompt from the run.
		w.busy, w.restarted = true, false
	}
	if (working || st.Turns > 0) && !w.restarted {
		w.busy = true
	}
	switch {
	case goal == "complete" || goal == "blocked" || goal == "error":
		w.r.finish(ctx, w.c, w.h, w.agentDir, goal, st)
		return true
	case !working && st.State != wire.StatePaused:
		return w.idle(ctx, st)
	default:
		w.idleSince = time.Time{}
	}
	return false
}

// idle is settle for an agent that does not work: its turn ended, the
// run was interrupted, or it has not been given its goal (again) yet.
func (w *watcher) idle(ctx context.Context, st wire.Stats) (over bool) {
	r := w.r
	r.mu.Lock()
	interrupted := r.interrupted
	r.mu.Unlock()
	if interrupted {
		r.finish(ctx, w.c, w.h, w.agentDir, "interrupted", st)
		return true
	}
	if w.busy || w.once && st.Turns > 0 {
		result := "done"
		if st.LastError != "" {
			result = "error"
		}
		r.finish(ctx, w.c, w.h, w.agentDir, result, st)
		return true
	}
	// Idle, never seen working: the goal is not given yet, or the
	// daemon restarted and interrupted a turn that did not go on
	// by itself (resume=manual). Give it again after a moment.
	if w.once {
		r.update(w.h, func(h *Host) { h.State = "idle" })
		return true
	}
	if w.idleSince.IsZero() {
		w.idleSince = time.Now()
	} else if time.Since(w.idleSince) > 3*time.Second {
		w.idleSince = time.Time{}
		g, _ := readSmall(ctx, w.c, w.dir+"goal")
		prompt := restartPrompt(strings.TrimSpace(string(g)))
		if err := w.c.Write(ctx, w.agentDir+"prompt", []byte(prompt)); err == nil {
			w.busy, w.restarted = true, false
		}
	}
	return false
}

// stateWord is a working agent's state for people.
func stateWord(st wire.Stats, waiting func(string) string, host string) string {
	if waiting != nil {
		if tool := waiting(host); tool != "" {
			return "waiting for approval: " + tool
		}
	}
	switch st.State {
	case wire.StateCalling:
		if st.Running != "" {
			return "running " + st.Running
		}
		return "running tools"
	case wire.StatePaused:
		return "paused"
	}
	return "thinking"
}

// finish records a host's result and the agent's last answer.
func (r *Runner) finish(ctx context.Context, c *client.Conn, h *Host, agentDir, result string, st wire.Stats) {
	answer := lastAnswer(ctx, c, agentDir+"log")
	r.update(h, func(h *Host) {
		h.Result, h.State = result, result
		h.Steps, h.ToolCalls, h.Tokens = max(h.Steps, st.Steps), max(h.ToolCalls, st.ToolCalls), max(h.Tokens, st.PromptTokens+st.CompletionTokens)
		h.Answer = answer
		if result == "error" && st.LastError != "" {
			h.Detail = st.LastError
		}
		h.Ended = time.Now().UTC()
	})
}

// readState reads the agent's stats, the goal's status and the daemon's
// start time.
func readState(ctx context.Context, c *client.Conn, agentDir, dir string) (wire.Stats, string, string, error) {
	var st wire.Stats
	b, err := readSmall(ctx, c, agentDir+"stats")
	if err != nil {
		return st, "", "", err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, "", "", fmt.Errorf("%sstats: %w", agentDir, err)
	}
	g, err := readSmall(ctx, c, dir+"goalstatus")
	if err != nil {
		return st, "", "", err
	}
	s, err := readSmall(ctx, c, "status")
	if err != nil {
		return st, "", "", err
	}
	var started string
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "started "); ok {
			started = v
		}
	}
	return st, strings.TrimSpace(string(g)), started, nil
}

// restoredChat reads the daemon's start and how much of the agent's chat
// stream its start put back.
func restoredChat(ctx context.Context, c *client.Conn, agentDir string) (started string, restored int64, err error) {
	b, err := readSmall(ctx, c, agentDir+"stats")
	if err != nil {
		return "", 0, err
	}
	var st wire.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		return "", 0, err
	}
	s, err := readSmall(ctx, c, "status")
	if err != nil {
		return "", 0, err
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "started "); ok {
			started = v
		}
	}
	return started, int64(st.ChatRestored), nil
}

// readSmall reads a small file within 10 s.
func readSmall(ctx context.Context, c *client.Conn, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := c.ReadLimit(ctx, name, maxSmall)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// waitChange blocks on a wait file until it reads or d passes.
func waitChange(ctx context.Context, c *client.Conn, name string, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c.ReadLimit(ctx, name, maxSmall)
}

// isGone is the host's answer that the session or agent was removed.
func isGone(err error) bool { return client.IsNotExist(err) }

// lastAnswer is the agent's last message with text, from its log.
func lastAnswer(ctx context.Context, c *client.Conn, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := c.ReadLimit(ctx, name, maxLog)
	if err != nil {
		return ""
	}
	return wire.LastAnswer(b, maxAnswer)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// restartPrompt is the prompt that gives the goal again to an agent
// whose daemon restarted and interrupted it.
func restartPrompt(goal string) string {
	return "olliesrv on this host restarted and interrupted your work. Continue towards the session's goal:\n" + goal
}

// injected reports whether a line of chat is a line of a prompt the run
// gave (the goal, as the host words it, or the goal given again after a
// restart): the chat echoes each prompt, and the host's detail is its
// own latest words, never the run's instructions read back.
func (r *Runner) injected(line string) bool {
	r.promptOnce.Do(func() {
		r.promptLines = map[string]bool{}
		goal := strings.TrimSpace(r.Run.Goal)
		for _, p := range []string{wire.GoalPrompt(goal, r.Run.Session), restartPrompt(goal)} {
			for _, l := range strings.Split(p, "\n") {
				if l = strings.TrimSpace(l); l != "" {
					r.promptLines[clip(l, maxLine)] = true
				}
			}
		}
	})
	return r.promptLines[line]
}

// follow passes each line of the host's chat to the observer and keeps
// the last one not of the run's prompts as the host's detail, across
// reconnects, until ctx ends.
func (r *Runner) follow(ctx context.Context, h *Host, sock, name string, fromStart bool) {
	var off int64 = -1
	if fromStart {
		off = 0
	}
	daemon := "" // the daemon's start, to notice a restart
	for ctx.Err() == nil {
		c, err := dialHost(sock)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		// A restarted daemon's stream is the old one up to its last
		// record, then what came since: go on from where we were, or
		// from the end of what the restart put back (chat does the
		// same), so nothing is passed on twice or missed.
		if started, restored, err := restoredChat(ctx, c, strings.TrimSuffix(name, "chat")); err == nil {
			if daemon != "" && started != daemon && off >= 0 {
				off = min(off, restored)
			}
			daemon = started
		}
		if off < 0 {
			if off, err = c.Size(ctx, name); err != nil {
				c.Close()
				sleep(ctx, time.Second)
				continue
			}
		}
		lw := &lineWriter{emit: func(line string) {
			if r.Obs != nil {
				r.Obs.Output(h.Name, line)
			}
			if t := strings.TrimSpace(line); t != "" && !r.injected(t) {
				r.mu.Lock()
				working := h.Result == ""
				r.mu.Unlock()
				if working {
					r.update(h, func(h *Host) { h.Detail = clip(t, maxLine) })
				}
			}
		}}
		off, err = c.FollowFrom(ctx, name, off, lw)
		lw.flush()
		c.Close()
		if err == nil || ctx.Err() != nil {
			return
		}
		sleep(ctx, time.Second)
	}
}

// lineWriter cuts a stream into lines, a long line into pieces.
type lineWriter struct {
	buf  []byte
	emit func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > maxLine {
				w.emit(string(w.buf[:maxLine]))
				w.buf = w.buf[maxLine:]
				continue
			}
			return len(p), nil
		}
		w.emit(string(w.buf[:min(i, maxLine)]))
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}

// tunnelState is the keeper's word on the host's connection.
func tunnelState(ctx context.Context, r *Runner, host string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rep, err := keeper.Call(ctx, keeper.Request{Op: "list", Config: r.Cfg.SSH.Config, Known: r.Cfg.SSH.Known}, nil)
	if err != nil {
		return "the keeper does not answer"
	}
	for _, h := range rep.Held {
		if h.Host == host {
			return h.Tunnel
		}
	}
	return "not held"
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
