package host

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/internal/paths"
	"ollie/toolsrv"
	"ollie/toolsrv/tool"
)

// DefaultStateDir is where session files live:
// $XDG_STATE_HOME/ollie/sessions, by default ~/.local/state/ollie/sessions.
func DefaultStateDir() (string, error) {
	dir, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "sessions"), nil
}

// sessionLogs holds each session's open file, and the files that could
// not be restored.
type sessionLogs struct {
	dir     string
	mu      sync.Mutex
	logs    map[string]*agent.SessionLog
	damaged []*agent.DamagedFile
}

// damagedFiles returns the session files found at start that could not be
// restored; they stay so until a restart finds them repaired.
func (sl *sessionLogs) damagedFiles() []*agent.DamagedFile {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return append([]*agent.DamagedFile(nil), sl.damaged...)
}

// state says in a word whether a session's file holds every change:
// "ok", or "unwritable" after a write failed (a full disk) until one
// succeeds again.
func (sl *sessionLogs) state(id string) string {
	if l := sl.get(id); l != nil && l.Broken() != nil {
		return "unwritable"
	}
	return "ok"
}

// save proves that a session's file takes writes now, and says where it is.
func (sl *sessionLogs) save(id string) (string, error) {
	l := sl.get(id)
	if l == nil {
		return "", fmt.Errorf("session %s: %w", id, agent.ErrNoSessionLog)
	}
	if err := l.Save(); err != nil {
		return "", fmt.Errorf("session %s: not saved: %w", id, err)
	}
	return l.Path(), nil
}

func (sl *sessionLogs) get(id string) *agent.SessionLog {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.logs[id]
}

func (sl *sessionLogs) put(id string, l *agent.SessionLog) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.logs == nil {
		sl.logs = map[string]*agent.SessionLog{}
	}
	sl.logs[id] = l
}

// record commits a change to a session's file, before it takes effect.
func (sl *sessionLogs) record(id string, c agent.Change) error {
	l := sl.get(id)
	if l == nil {
		return fmt.Errorf("session %s: %w", id, agent.ErrNoSessionLog)
	}
	if err := l.Record(c); err != nil {
		return fmt.Errorf("session %s: %w", id, err)
	}
	return nil
}

// retire moves a killed session's file aside.
func (sl *sessionLogs) retire(id string) {
	sl.mu.Lock()
	l := sl.logs[id]
	delete(sl.logs, id)
	sl.mu.Unlock()
	if l != nil {
		l.Retire()
	}
}

func (sl *sessionLogs) closeAll() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for id, l := range sl.logs {
		l.Close()
		delete(sl.logs, id)
	}
}

// unavailable stands in for a backend a restored agent names that is not
// configured any more: the agent comes back, and says why it cannot think.
type unavailable struct {
	name string
	err  error
}

func (u unavailable) Name() string                              { return u.name }
func (u unavailable) DefaultModel() string                      { return "" }
func (u unavailable) Models(context.Context) ([]string, error)  { return nil, u.err }
func (u unavailable) ContextLength(context.Context, string) int { return 0 }
func (u unavailable) Chat(context.Context, []backend.Message, []backend.Tool, backend.Params, func(backend.Delta)) (*backend.Reply, error) {
	return nil, u.err
}

// restore brings back every session and agent from the state directory:
// idle agents come back idle, queued prompts run, interrupted turns say
// so, and tool calls that were running are settled once (replay-safe ones
// run once more).
func (n *namespace) restore(ctx context.Context) {
	restored, damaged := agent.RestoreSessions(n.logs.dir)
	for _, d := range damaged {
		n.log.Error("olliesrv: a session could not be restored; its file is left as it is", "file", d.Path, "state", d.State(), "err", d.Err)
	}
	n.logs.mu.Lock()
	n.logs.damaged = damaged
	n.logs.mu.Unlock()
	for _, rs := range restored {
		s, err := n.sessions.Restore(rs.ID, rs.Created, agent.SessionOptions{Name: rs.Meta.Name, Cwd: rs.Meta.Cwd, Owner: rs.Meta.Owner, Yolo: rs.Meta.Yolo,
			ResumeManual: rs.Meta.Resume == "manual"}, rs.Paused)
		if err != nil {
			n.log.Error("olliesrv: restoring a session", "session", rs.ID, "err", err)
			rs.Log.Close()
			continue
		}
		n.logs.put(s.ID, rs.Log)
		if err := n.tools.Hold(s.ID, s.Cwd()); err != nil {
			// Its tools are refused until it is made again: the directory
			// may have been swapped while olliesrv was down.
			n.log.Error("olliesrv: a restored session's directory cannot be held; its tools will not run", "session", s.Name(), "cwd", s.Cwd(), "err", err)
		}
		if s.Yolo {
			n.log.Warn("olliesrv: a yolo session restored: its tools run unsandboxed and without approval", "session", s.Name(), "id", s.ID)
		}
		if rs.Goal != "" || rs.GoalStatus != "" {
			s.SetGoal(&rs.Goal, rs.GoalStatus)
		}
		for _, note := range rs.Notices {
			n.log.Warn("olliesrv: restored session", "session", s.Name(), "note", note)
		}
		var started []*agentEntry
		goOn := map[string]string{} // agent ID → why its cut turn goes on
		ready := make(chan struct{})
		for _, ra := range rs.Agents {
			e, err := n.startAgent(ctx, s, ra.AgentMeta, ra)
			if err != nil {
				n.log.Error("olliesrv: an agent could not be restored", "session", s.Name(), "agent", ra.Name, "err", err)
				continue
			}
			e.Resume(ra.Chat, ra.LastError)
			if why, ok := resumeWhy(s, ra, len(rs.Rerun) > 0); ok {
				goOn[ra.ID] = why
			} else if ra.Interrupted {
				if err := e.EndInterrupted(why); err != nil {
					n.log.Error("olliesrv: recording an interrupted turn's end; the next restart marks it again", "session", s.Name(), "agent", ra.Name, "err", err)
				}
			}
			// Before anyone can reach it: the cut turn goes on and the
			// queued prompts run once the calls run again have their
			// results, and it is busy until then.
			e.HoldUntil(ready)
			if why := goOn[ra.ID]; why != "" {
				e.Continue(why)
			}
			for _, p := range ra.Queue {
				e.Queue(p)
			}
			if !n.agents.add(e) {
				e.Close()
				continue
			}
			started = append(started, e)
		}
		// Replay-safe calls run once more in the background, so a slow one
		// never keeps the namespace from starting; the agents' queued
		// prompts wait for their results.
		who := map[string]toolsrv.Caller{}
		for _, e := range started {
			who[e.ID()] = toolsrv.Caller{Agent: e.ID(), Token: e.token, Cwd: e.Cwd(), SessionName: s.Name(), AgentName: e.Name()}
		}
		go func() {
			results := n.rerun(ctx, s, rs, who)
			for _, e := range started {
				e.AppendResults(results[e.ID()]...)
			}
			close(ready)
		}()
	}
}

// MaxResumes is how often in a row one turn goes on by itself after stops
// of olliesrv without getting further (no message of the turn recorded in
// between): a turn whose every run ends in a crash at the same point (a
// tool that kills the daemon, a request that exhausts its memory) then
// waits for a person. A turn that gets further between stops goes on
// however often it is cut.
const MaxResumes = 3

// resumeWhy says whether the restored agent's turn goes on by itself
// (ok), and why, or, when it does not, the note that ends it: the
// session asked for resume=manual, or the turn was resumed MaxResumes
// times already.
func resumeWhy(s *agent.Session, ra *agent.RestoredAgent, reran bool) (why string, ok bool) {
	calls := "tool calls that were running were not run again: the model is told their outcome is unknown"
	if reran {
		calls = "replay-safe tool calls are run once more; others were not run again: the model is told their outcome is unknown"
	}
	switch {
	case !ra.Interrupted:
		return "", false
	case s.Paused():
		return "interrupted: olliesrv stopped during this turn; " + calls + "; the session is paused: resume it and say go on to continue", false
	case s.ResumeManual:
		return "interrupted: olliesrv stopped during this turn; " + calls + "; this session waits for a person (resume=manual): say go on to continue", false
	case ra.Resumes >= MaxResumes:
		return fmt.Sprintf("interrupted: olliesrv stopped during this turn again, after it went on by itself %d times in a row without getting further; %s; say go on to continue", ra.Resumes, calls), false
	}
	return "olliesrv stopped during this turn and started again; the turn goes on by itself: " + calls, true
}

// rerun runs once more the replay-safe calls that were running when
// olliesrv stopped, for the agent that made each (who: its directory, its
// capability, and its name in an approval), settles them, and returns
// their results by agent.
func (n *namespace) rerun(ctx context.Context, s *agent.Session, rs *agent.RestoredSession, who map[string]toolsrv.Caller) map[string][]backend.Message {
	out := map[string][]backend.Message{}
	for _, in := range rs.Rerun {
		agentID, callID, _ := strings.Cut(agent.CallBase(in.ID), "/")
		var res *tool.Result
		child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo)
		if err == nil {
			c, ok := who[agentID]
			if !ok {
				c = toolsrv.Caller{Agent: agentID}
			}
			res, err = child.CallFor(ctx, c, in.Tool, in.Args)
		}
		if err != nil {
			res = &tool.Result{Tool: in.Tool, Failed: true, ExitCode: -1, Output: "interrupted, and running it again failed: " + err.Error()}
		}
		if err := rs.Log.Journal(agentID).Settle(in.ID, res); err != nil {
			n.log.Error("olliesrv: settling a re-run call", "call", in.ID, "err", err)
		}
		content := res.Output
		if res.Failed {
			content = "error: " + content
		}
		out[agentID] = append(out[agentID], backend.Message{Role: backend.RoleTool, ToolCallID: callID, Name: in.Tool,
			Content: content})
	}
	return out
}
