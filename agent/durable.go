package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/agent/backend"
	"ollie/agent/store"
)

// Record kinds of a session file, beside the store's own tool.* kinds. The
// namespace's changes are typed (records.go); the loop's journal entries
// (prompt, dequeue, message, history, end) are written below.
const (
	kindSessionName   = "session.name"
	kindSessionPaused = "session.paused"
	kindSessionGoal   = "session.goal"
	kindSessionSave   = "session.save" // ctl save proved the file writable; nothing to restore
	kindAgentNew      = "agent.new"
	kindAgentName     = "agent.name"
	kindAgentKill     = "agent.kill"
	kindAgentPrompt   = "agent.prompt"  // a prompt was queued
	kindAgentDequeue  = "agent.dequeue" // the oldest queued prompt started
	kindAgentResume   = "agent.resume"  // a turn a stop of olliesrv cut short went on by itself
	kindAgentMessage  = "agent.message" // a message joined the history
	kindAgentPlan     = "agent.plan"    // the plan was replaced
	kindAgentHistory  = "agent.history" // the history was replaced (clear, compact)
	kindAgentModel    = "agent.model"   // the model was switched
	kindAgentPeer     = "agent.peer"    // a peer link was added or removed
	kindAgentProfile  = "agent.profile" // the profile was switched
	kindAgentTools    = "agent.tools"   // the agent's own tool list changed
	kindAgentEnd      = "agent.end"     // a turn ended, with its error if it failed
	kindAgentSkills   = "agent.skills"  // the skills loaded, the whole list
)

// SessionMeta is the header metadata of a session file.
type SessionMeta struct {
	Name  string `json:"name"`
	Cwd   string `json:"cwd"`
	Owner string `json:"owner"`
	Yolo  bool   `json:"yolo,omitempty"` // set at creation, for the session's life
	// Resume is "manual" for a session whose cut turns wait for a person;
	// "" (auto) for one whose cut turns go on by themselves.
	Resume string `json:"resume,omitempty"`
}

// AgentMeta describes an agent in its session file.
type AgentMeta struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Cwd     string `json:"cwd"`
	Backend string `json:"backend,omitempty"`
	Model   string `json:"model,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Parent is the agent whose tool created this one through the
	// namespace, and Limit the tools it may ever have: its creator's,
	// which it can never outgrow (nil: no limit, for an agent the admin
	// created).
	Parent string   `json:"parent,omitempty"`
	Depth  int      `json:"depth,omitempty"`
	Limit  []string `json:"limit,omitempty"`
}

// A SessionLog is a session's durable file: everything that determines
// the session's behaviour is committed there before it takes effect.
type SessionLog struct {
	st *store.Store
}

// CreateSessionLog starts the file of a new session in dir.
func CreateSessionLog(dir string, s *Session) (*SessionLog, error) {
	if err := os.MkdirAll(dir, 0700); err != nil {
		return nil, fmt.Errorf("agent: sessions directory: %w", err)
	}
	m := SessionMeta{Name: s.Name(), Cwd: s.Cwd(), Owner: s.Owner, Yolo: s.Yolo}
	if s.ResumeManual {
		m.Resume = "manual"
	}
	meta, _ := json.Marshal(m)
	st, err := store.Create(filepath.Join(dir, s.ID+".jsonl"), store.Header{ID: s.ID, CreatedAt: s.Created, Meta: meta}, nil)
	if err != nil {
		return nil, err
	}
	return &SessionLog{st: st}, nil
}

// Record commits a change to the session or one of its agents, before the
// caller applies it.
func (l *SessionLog) Record(c Change) error {
	if err := l.record(c.kind(), c); err != nil {
		return fmt.Errorf("cannot record %s: %w", c.kind(), err)
	}
	return nil
}

// record commits one record of kind with v as its payload.
func (l *SessionLog) record(kind string, v any) error {
	rec, err := store.NewRecord(kind, v)
	if err != nil {
		return err
	}
	return l.st.Commit(rec)
}

// Path is the session file's path.
func (l *SessionLog) Path() string { return l.st.Path() }

// Save proves that the file takes writes now: it commits a record that
// restoring ignores, and returns once it is on disk. Every change is
// written before it takes effect, so there is nothing else to save; after a
// failed write (a full disk) this also puts the file back, as any change
// would. The error names the file and why it cannot be written.
func (l *SessionLog) Save() error { return l.record(kindSessionSave, nil) }

// Broken returns why the last write to the file failed, until a write
// succeeds again; nil when the file holds every change.
func (l *SessionLog) Broken() error { return l.st.Broken() }

// Close closes the file.
func (l *SessionLog) Close() error { return l.st.Close() }

// Retire moves a killed session's file into dir/killed, out of the way of
// restoring, but not destroyed.
func (l *SessionLog) Retire() error {
	l.st.Close()
	dir := filepath.Join(filepath.Dir(l.st.Path()), "killed")
	if err := os.MkdirAll(dir, 0700); err != nil {
		return err
	}
	return os.Rename(l.st.Path(), filepath.Join(dir, filepath.Base(l.st.Path())))
}

// Journal returns the journal of one agent of the session.
func (l *SessionLog) Journal(agentID string) Journal { return &agentJournal{l: l, agent: agentID} }

type agentJournal struct {
	l     *SessionLog
	agent string

	// rec is held from taking the chat to committing it, so that the
	// chat's pieces reach the file in the order they were written.
	rec  sync.Mutex
	mu   sync.Mutex
	chat string // written to the chat stream since the last entry
	// held, guarded by rec, are records kept to go in one commit with
	// the next (one fsync, not two), in order:
	//   - a model's message that asks for tool calls, before the first
	//     call's intent. Nothing has acted on it: a crash loses only the
	//     model's answer, and the resumed turn asks again.
	//   - the settlement of the agent's last running call, before its
	//     result's message, which the loop commits next and before the
	//     model sees the result. A crash between the two answers the call
	//     as interrupted, as a crash just before the settlement did.
	held []store.Record
	// running counts the calls whose intent this journal committed and
	// which are not settled: a settlement is held only when it is the
	// last, so that one call's result never waits on another's run.
	running int
}

// agentRecord is every agent.* record's payload. Chat is what the agent
// wrote to its chat stream before the record, so that the stream is the
// records' chats in order after a restart.
type agentRecord struct {
	Agent    string            `json:"agent"`
	Text     string            `json:"text,omitempty"`
	Message  *backend.Message  `json:"message,omitempty"`
	Messages []backend.Message `json:"messages,omitempty"`
	Error    string            `json:"error,omitempty"`
	Skills   []string          `json:"skills,omitempty"`
	Chat     string            `json:"chat,omitempty"`
}

func (j *agentJournal) Chat(text string) {
	j.mu.Lock()
	j.chat += text
	j.mu.Unlock()
}

func (j *agentJournal) Entry(kind string, v any) error {
	rec := agentRecord{Agent: j.agent}
	var recKind string
	switch kind {
	case "prompt":
		rec.Text, _ = v.(string)
		recKind = kindAgentPrompt
	case "dequeue":
		recKind = kindAgentDequeue
	case "resume":
		rec.Error, _ = v.(string) // why: what the restart found
		recKind = kindAgentResume
	case "end":
		rec.Error, _ = v.(string)
		recKind = kindAgentEnd
	case "skills":
		names, ok := v.([]string)
		if !ok {
			return fmt.Errorf("agent: journal: skills entry of type %T", v)
		}
		rec.Skills = names
		recKind = kindAgentSkills
	case "history":
		h, ok := v.([]backend.Message)
		if !ok {
			return fmt.Errorf("agent: journal: history entry of type %T", v)
		}
		rec.Messages = h
		recKind = kindAgentHistory
	case "message":
		m, ok := v.(backend.Message)
		if !ok {
			return fmt.Errorf("agent: journal: message entry of type %T", v)
		}
		rec.Message = &m
		recKind = kindAgentMessage
	default:
		return fmt.Errorf("agent: journal: unknown entry kind %q", kind)
	}
	j.rec.Lock()
	defer j.rec.Unlock()
	j.mu.Lock()
	rec.Chat, j.chat = j.chat, ""
	j.mu.Unlock()
	r, err := store.NewRecord(recKind, rec)
	if err == nil && rec.Message != nil && rec.Message.Role == backend.RoleAssistant && len(rec.Message.ToolCalls) > 0 {
		j.held = append(j.held, r)
		return nil
	}
	if err == nil {
		err = j.commit(r)
	}
	if err != nil {
		// Not in the file: the next entry carries it.
		j.mu.Lock()
		j.chat = rec.Chat + j.chat
		j.mu.Unlock()
		return err
	}
	return nil
}

// commit commits r, after the held message if there is one, as one
// transaction; j.rec is held. A message whose commit failed stays held.
func (j *agentJournal) commit(r store.Record) error {
	if err := j.l.st.Commit(append(j.held, r)...); err != nil {
		return err
	}
	j.held = nil
	return nil
}

func (j *agentJournal) Intent(id, tool string, args json.RawMessage, replaySafe bool) error {
	extra, _ := json.Marshal(map[string]string{"agent": j.agent})
	r, err := store.IntentRecord(store.Intent{ID: id, Tool: tool, Args: args, ReplaySafe: replaySafe, Extra: extra})
	if err != nil {
		return err
	}
	j.rec.Lock()
	defer j.rec.Unlock()
	if err := j.commit(r); err != nil {
		return err
	}
	j.running++
	return nil
}

func (j *agentJournal) Settle(id string, result any) error {
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	r, err := store.SettleRecord(id, b)
	if err != nil {
		return err
	}
	j.rec.Lock()
	defer j.rec.Unlock()
	if j.running > 0 {
		j.running--
		if j.running == 0 {
			j.held = append(j.held, r)
			return nil
		}
	}
	return j.commit(r)
}

// RestoredSession is a session read back from its file.
type RestoredSession struct {
	ID         string
	Created    time.Time
	Meta       SessionMeta
	Paused     bool
	Goal       string
	GoalStatus string
	Agents     []*RestoredAgent
	Log        *SessionLog
	Rerun      []store.Intent // replay-safe calls to run once more, then Settle
	Notices    []string       // what a person should know: torn lines dropped, calls interrupted
}

// RestoredAgent is an agent read back from its session file.
type RestoredAgent struct {
	AgentMeta
	History     []backend.Message
	Queue       []string // prompts queued and not started
	Plan        string
	Peers       map[string]bool // agent IDs linked as peers
	Tools       []string        // the agent's own tool list, when changed from its profile's
	Skills      []string        // the skills it had loaded
	Interrupted bool            // a turn was running when olliesrv stopped
	Resumes     int             // how often that turn went on by itself after a stop without getting further (no message recorded since)
	LastError   string          // how the last turn failed, if it did
	Chat        string          // the chat stream up to the last record, for Agent.Resume
}

// A DamagedFile is a session file that could not be restored. Its session
// is not served, and the file is left as it is for a person to repair or
// move aside.
type DamagedFile struct {
	Path string
	Err  error // why; a store.CorruptError names the line
}

func (d *DamagedFile) Error() string { return d.Err.Error() }
func (d *DamagedFile) Unwrap() error { return d.Err }

// State says in a word why the file is not served: "newer" (written by a
// newer ollie), "locked" (open in another olliesrv) or "damaged".
func (d *DamagedFile) State() string {
	switch {
	case errors.Is(d.Err, store.ErrNewerVersion):
		return "newer"
	case errors.Is(d.Err, store.ErrLocked):
		return "locked"
	}
	return "damaged"
}

// RestoreSessions opens every session file in dir. A file that cannot be
// opened is reported in damaged and left as it is; the others come back.
func RestoreSessions(dir string) (sessions []*RestoredSession, damaged []*DamagedFile) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, []*DamagedFile{{Path: dir, Err: err}}
	}
	sort.Strings(files)
	for _, f := range files {
		rs, err := restoreSession(f)
		if err != nil {
			damaged = append(damaged, &DamagedFile{Path: f, Err: err})
			continue
		}
		sessions = append(sessions, rs)
	}
	return sessions, damaged
}

func restoreSession(path string) (*RestoredSession, error) {
	st, recs, err := store.Open(path, nil)
	if err != nil {
		return nil, err
	}
	rs := &RestoredSession{ID: st.Header().ID, Created: st.Header().CreatedAt, Log: &SessionLog{st: st}}
	if err := json.Unmarshal(st.Header().Meta, &rs.Meta); err != nil {
		st.Close()
		return nil, fmt.Errorf("agent: %s: header metadata: %w", path, err)
	}
	for _, w := range st.Warnings() {
		rs.Notices = append(rs.Notices, w)
	}
	rp := &replay{rs: rs, byID: map[string]*RestoredAgent{}, chats: map[*RestoredAgent]*strings.Builder{},
		dequeued: map[*RestoredAgent]string{},
		calls:    &callLog{intents: map[string]bool{}, settled: map[string]json.RawMessage{}, latest: map[string]string{}}}
	for _, r := range recs {
		rp.add(r)
	}

	// Calls that were running: settle or hand back, once.
	rerun, err := st.Recover()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("agent: %s: recovering tool calls: %w", path, err)
	}
	rs.Rerun = rerun
	for _, a := range rs.Agents {
		if p, ok := rp.dequeued[a]; ok {
			a.Queue = append([]string{p}, a.Queue...)
			a.Interrupted = false
		}
		if b := rp.chats[a]; b != nil {
			a.Chat = b.String()
		}
		a.History = closeOpenCalls(a.ID, a.History, rerun, rp.calls)
		if a.Interrupted {
			rs.Notices = append(rs.Notices, fmt.Sprintf("agent %s: a turn was running when olliesrv stopped; it was interrupted", a.Name))
		}
	}
	return rs, nil
}

// A replay reads a session file's records, in order, into the session
// they describe.
type replay struct {
	rs    *RestoredSession
	byID  map[string]*RestoredAgent
	chats map[*RestoredAgent]*strings.Builder
	// A prompt dequeued and not yet begun (its user message not
	// recorded): a stop between the two leaves it queued, not lost, and
	// no turn cut.
	dequeued map[*RestoredAgent]string
	calls    *callLog
}

func (rp *replay) add(r store.Record) {
	rp.calls.add(r)
	rs := rp.rs
	switch r.Kind {
	case kindSessionName:
		var v SessionRenamed
		r.Decode(&v)
		rs.Meta.Name = v.Name
	case kindSessionPaused:
		var v SessionPaused
		r.Decode(&v)
		rs.Paused = v.Paused
	case kindSessionGoal:
		var v GoalSet
		r.Decode(&v)
		if v.Goal != nil {
			rs.Goal = *v.Goal
		}
		if v.Status != "" {
			rs.GoalStatus = v.Status
		}
	case kindAgentNew:
		var m AgentMeta
		if err := r.Decode(&m); err == nil {
			a := &RestoredAgent{AgentMeta: m}
			rp.byID[m.ID] = a
			rs.Agents = append(rs.Agents, a)
		}
	case kindAgentName, kindAgentKill, kindAgentPrompt, kindAgentDequeue, kindAgentResume, kindAgentMessage, kindAgentPlan, kindAgentHistory, kindAgentModel, kindAgentPeer, kindAgentProfile, kindAgentTools, kindAgentEnd, kindAgentSkills:
		// Each agent.* record names its agent; the journal's carry
		// the chat written before them. The fields of the
		// namespace's changes are read by kind.
		var v agentRecord
		r.Decode(&v)
		a := rp.byID[v.Agent]
		if a == nil {
			return
		}
		if v.Chat != "" {
			if rp.chats[a] == nil {
				rp.chats[a] = &strings.Builder{}
			}
			rp.chats[a].WriteString(v.Chat)
		}
		if !rp.turn(a, r.Kind, v) {
			rp.change(a, r, v)
		}
	}
}

// change applies a record of a change made through the namespace.
func (rp *replay) change(a *RestoredAgent, r store.Record, v agentRecord) {
	switch r.Kind {
	case kindAgentName:
		var c AgentRenamed
		r.Decode(&c)
		a.Name = c.Name
	case kindAgentPlan:
		var c AgentPlanSet
		r.Decode(&c)
		a.Plan = c.Plan
	case kindAgentModel:
		var c AgentModelSet
		r.Decode(&c)
		a.Model = c.Model
	case kindAgentProfile:
		var c AgentProfileSet
		r.Decode(&c)
		a.Profile, a.Tools = c.Profile, nil
	case kindAgentTools:
		var c AgentToolsSet
		r.Decode(&c)
		a.Tools = append([]string{}, c.Tools...)
	case kindAgentSkills:
		a.Skills = append([]string(nil), v.Skills...)
	case kindAgentHistory:
		a.History = append([]backend.Message(nil), v.Messages...)
	case kindAgentPeer:
		var c AgentPeered
		r.Decode(&c)
		if other := rp.byID[c.Peer]; other != nil {
			for _, p := range [][2]*RestoredAgent{{a, other}, {other, a}} {
				if p[0].Peers == nil {
					p[0].Peers = map[string]bool{}
				}
				if c.Add {
					p[0].Peers[p[1].ID] = true
				} else {
					delete(p[0].Peers, p[1].ID)
				}
			}
		}
	case kindAgentKill:
		delete(rp.byID, v.Agent)
		if i := slices.Index(rp.rs.Agents, a); i >= 0 {
			rp.rs.Agents = slices.Delete(rp.rs.Agents, i, i+1)
		}
	}
}

// turn applies a record of the agent's queue and turns; false if the
// record is of another kind.
func (rp *replay) turn(a *RestoredAgent, kind string, v agentRecord) bool {
	switch kind {
	case kindAgentPrompt:
		a.Queue = append(a.Queue, v.Text)
	case kindAgentDequeue:
		// A prompt dequeued and never begun was queued again, first,
		// by the restart that followed (restoreSession), so this
		// dequeue takes it again: replaying the file must do the same,
		// or the prompt after it is lost (the drill lost prompt 35 of
		// 80 this way on its second restart).
		if p, ok := rp.dequeued[a]; ok {
			a.Queue = append([]string{p}, a.Queue...)
			delete(rp.dequeued, a)
		}
		if len(a.Queue) > 0 {
			rp.dequeued[a] = a.Queue[0]
			a.Queue = a.Queue[1:]
		}
		a.Interrupted = true // until the turn's end shows otherwise
		a.LastError = ""
		a.Resumes = 0
	case kindAgentResume:
		delete(rp.dequeued, a)
		a.Interrupted = true // the resumed turn runs until its end
		a.Resumes++
	case kindAgentEnd:
		delete(rp.dequeued, a) // a turn refused before its message (a pre-turn hook) used its prompt
		a.Interrupted = false
		a.LastError = v.Error
		a.Resumes = 0
	case kindAgentMessage:
		if v.Message != nil {
			delete(rp.dequeued, a) // its turn began
			a.History = append(a.History, *v.Message)
			a.Resumes = 0 // the turn got further: a crash loop makes no progress
			// Files written before agent.end existed end a turn here.
			if m := v.Message; m.Role == backend.RoleAssistant && len(m.ToolCalls) == 0 {
				a.Interrupted = false
			}
		}
	default:
		return false
	}
	return true
}

// closeOpenCalls answers every tool call of the history that has no
// result, so the conversation stays well formed: the model is told the call
// was interrupted and not run again. Calls about to be re-run (replay-safe)
// are left for the caller to answer.
func closeOpenCalls(agentID string, h []backend.Message, rerun []store.Intent, calls *callLog) []backend.Message {
	skip := map[string]bool{}
	for _, in := range rerun {
		if id, ok := strings.CutPrefix(CallBase(in.ID), agentID+"/"); ok {
			skip[id] = true
		}
	}
	answered := map[string]bool{}
	var out []backend.Message
	var open []backend.ToolCall
	flush := func() {
		for _, c := range open {
			if !answered[c.ID] && !skip[c.ID] {
				out = append(out, backend.Message{Role: backend.RoleTool, ToolCallID: c.ID, Name: c.Name,
					Content: calls.answer(calls.latest[agentID+"/"+c.ID])})
			}
		}
		open = nil
	}
	for _, m := range h {
		if m.Role != backend.RoleTool {
			flush()
		}
		out = append(out, m)
		switch m.Role {
		case backend.RoleAssistant:
			open = m.ToolCalls
		case backend.RoleTool:
			answered[m.ToolCallID] = true
		}
	}
	flush()
	return out
}

// callLog is what a session file says of tool calls: which started, and
// how those that were settled ended.
type callLog struct {
	intents map[string]bool
	settled map[string]json.RawMessage
	latest  map[string]string // AGENT/CALL → the last intent id for it
}

// CallBase is a call record's id without its nonce: AGENT/CALL, the call
// id being the model's.
func CallBase(id string) string {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		return id[:i]
	}
	return id
}

func (l *callLog) add(r store.Record) {
	switch r.Kind {
	case store.KindIntent:
		var in store.Intent
		if r.Decode(&in) == nil {
			l.intents[in.ID] = true
			l.latest[CallBase(in.ID)] = in.ID
		}
	case store.KindSettle:
		var st store.Settlement
		if r.Decode(&st) == nil {
			l.settled[st.ID] = st.Result
		}
	}
}

// answer is the tool message for a call the history left unanswered: its
// settled result when there is one (olliesrv stopped between the
// settlement and the message), else why it has none.
func (l *callLog) answer(id string) string {
	if res, ok := l.settled[id]; ok {
		var r struct {
			Output  string
			Failed  bool
			Content json.RawMessage
			Status  string `json:"status"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal(res, &r) == nil {
			switch {
			case r.Status == store.StatusInterrupted:
				return "error: " + r.Reason
			case len(r.Content) > 0 && string(r.Content) != "null":
				return string(r.Content)
			case r.Failed:
				return "error: " + r.Output
			default:
				return r.Output
			}
		}
	}
	if l.intents[id] {
		return "error: " + store.ReasonInterrupted
	}
	return "error: olliesrv stopped before this call started; it was not run"
}

// ErrNoSessionLog reports an operation on a session without a file.
var ErrNoSessionLog = errors.New("agent: session has no file")
