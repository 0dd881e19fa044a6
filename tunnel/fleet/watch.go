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
	dir := "session/" + r.Run.Session + "/"
	agentDir := dir + "agent/" + agentName + "/"
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if !once {
		// A fresh run shows its chat from the start; an attach from now.
		r.mu.Lock()
		fromStart := h.Steps == 0
		r.mu.Unlock()
		go r.follow(wctx, h, sock, agentDir+"chat", fromStart)
	}

	var c *client.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	lostAfter := r.Cfg.LostAfter
	if lostAfter <= 0 {
		lostAfter = 2 * time.Minute
	}
	var (
		downSince time.Time
		started   string // the daemon's start time, to notice a restart
		busy      bool   // the agent was seen working since it was (re)started
		// restarted: the daemon restarted and the agent has not been
		// given its goal again yet. What its stats show meanwhile (a
		// restored agent's turns, the interruption as its last error, a
		// state seen while it was being restored) is the old turn's.
		restarted bool
		idleSince time.Time
	)
	for ctx.Err() == nil {
		var err error
		if c == nil {
			c, err = dialHost(sock)
		}
		var st wire.Stats
		var goal, daemon string
		if err == nil {
			st, goal, daemon, err = readState(ctx, c, agentDir, dir)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if isGone(err) {
				r.fail(h, "failed", "its session or agent is gone: "+err.Error())
				return
			}
			if once {
				r.update(h, func(h *Host) { h.State = "unreachable now: " + err.Error() })
				return
			}
			if c != nil {
				c.Close()
				c = nil
			}
			if downSince.IsZero() {
				downSince = time.Now()
			}
			if time.Since(downSince) > lostAfter {
				r.fail(h, "lost", fmt.Sprintf("unreachable for %s (%s); its agent may go on: fleet attach %s", lostAfter, tunnelState(ctx, r, h.Name), r.Run.ID))
				return
			}
			r.update(h, func(h *Host) { h.State = "reconnecting: " + tunnelState(ctx, r, h.Name) })
			sleep(ctx, time.Second)
			continue
		}
		downSince = time.Time{}
		if started == "" {
			started = daemon
		} else if daemon != started {
			// The daemon restarted: the session is durable, but the turn
			// it ran was interrupted. The run picks it up.
			started, busy, restarted = daemon, false, true
			r.update(h, func(h *Host) {
				h.Notes = append(h.Notes, "olliesrv restarted during the run; its session was picked up")
			})
		}
		r.update(h, func(h *Host) {
			h.Steps, h.ToolCalls, h.Tokens = max(h.Steps, st.Steps), max(h.ToolCalls, st.ToolCalls), max(h.Tokens, st.PromptTokens+st.CompletionTokens)
		})
		working := st.State == wire.StateThinking || st.State == wire.StateCalling || st.Queued > 0
		if working && restarted {
			// The restored agent went on with its cut turn by itself
			// (a session's resume=auto): it needs no prompt from the run.
			busy, restarted = true, false
		}
		if (working || st.Turns > 0) && !restarted {
			busy = true
		}
		switch {
		case goal == "complete" || goal == "blocked" || goal == "error":
			r.finish(ctx, c, h, agentDir, goal, st)
			return
		case !working && st.State != wire.StatePaused:
			r.mu.Lock()
			interrupted := r.interrupted
			r.mu.Unlock()
			if interrupted {
				r.finish(ctx, c, h, agentDir, "interrupted", st)
				return
			}
			if busy || once && st.Turns > 0 {
				result := "done"
				if st.LastError != "" {
					result = "error"
				}
				r.finish(ctx, c, h, agentDir, result, st)
				return
			}
			// Idle, never seen working: the goal is not given yet, or the
			// daemon restarted and interrupted a turn that did not go on
			// by itself (resume=manual). Give it again after a moment.
			if once {
				r.update(h, func(h *Host) { h.State = "idle" })
				return
			}
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) > 3*time.Second {
				idleSince = time.Time{}
				g, _ := readSmall(ctx, c, dir+"goal")
				prompt := restartPrompt(strings.TrimSpace(string(g)))
				if err := c.Write(ctx, agentDir+"prompt", []byte(prompt)); err == nil {
					busy, restarted = true, false
				}
			}
		default:
			idleSince = time.Time{}
		}
		r.update(h, func(h *Host) { h.State = stateWord(st, r.Cfg.Waiting, h.Name) })
		if once {
			return
		}
		waitChange(ctx, c, agentDir+"statewait", time.Second)
	}
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
	lines := bytes.Split(b, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var m struct{ Role, Content string }
		if json.Unmarshal(lines[i], &m) == nil && m.Role == "assistant" && strings.TrimSpace(m.Content) != "" {
			return clip(strings.TrimSpace(m.Content), maxAnswer)
		}
	}
	return ""
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
		// from the end of what the restart put back (ns/chat does the
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
