package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/internal/paths"
	"ollie/ns"
	"ollie/ns/stream"
	"ollie/toolsrv"
)

// agentGroup is the 9P group of the files of every agent people made. No
// agent is a member, so other agents get the "other" bits: they cannot
// read an agent's chat, log, fifo or ctl. An agent an agent made has its
// maker's group instead (makerGroup).
const agentGroup = "agent"

// agents holds the live agents of every session.
type agents struct {
	mu      sync.Mutex
	byID    map[string]*agentEntry
	byToken map[string]*agentEntry
	claimed map[[2]string]chan struct{} // session and name an agent is about to take; closed when it has
	closed  bool
}

type agentEntry struct {
	*agent.Agent
	session string
	created time.Time
	// Its name, model and directory are the agent's own (agent.Agent);
	// these are what only the namespace knows of it.
	mu      sync.Mutex
	backend string
	profile string
	peers   map[string]bool           // agent IDs this agent may message
	outs    map[string]*stream.Stream // background process output, copied from toolsrv

	// token is the agent's capability: its tools present it to attach as
	// the agent (see identify). It lives in memory only; a restart makes
	// new ones, as it ends every tool that held the old.
	token  string
	parent string   // the agent whose tool created this one, if any
	depth  int      // how many such creations lie above it
	limit  []string // the tools it may ever have (nil: no limit)
}

// of returns a session's agents, oldest first.
func (as *agents) of(session string) []*agentEntry {
	as.mu.Lock()
	var list []*agentEntry
	for _, e := range as.byID {
		if e.session == session {
			list = append(list, e)
		}
	}
	as.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].created.Before(list[j].created) })
	return list
}

// lookup finds a session's agent by name or ID.
func (as *agents) lookup(session, nameOrID string) *agentEntry {
	for _, e := range as.of(session) {
		if e.ID() == nameOrID || e.Name() == nameOrID {
			return e
		}
	}
	return nil
}

// claim holds name in session for an agent being made or renamed (self,
// or nil for a new one) until release is called, so that two requests at
// once (two chats starting in one directory) cannot both take it between
// the check and the agent's arrival. A request for a name another holds
// waits for that one to finish: it then finds the agent made, or the
// name free again. It reports false if another agent has the name, or
// ctx ends first.
func (as *agents) claim(ctx context.Context, session, name string, self *agentEntry) (release func(), ok bool) {
	key := [2]string{session, name}
	for {
		as.mu.Lock()
		held, busy := as.claimed[key]
		if !busy {
			break
		}
		as.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, false
		}
	}
	defer as.mu.Unlock()
	for _, e := range as.byID {
		if e != self && e.session == session && (e.Name() == name || e.ID() == name) {
			return nil, false
		}
	}
	if as.claimed == nil {
		as.claimed = map[[2]string]chan struct{}{}
	}
	done := make(chan struct{})
	as.claimed[key] = done
	return func() {
		as.mu.Lock()
		delete(as.claimed, key)
		as.mu.Unlock()
		close(done)
	}, true
}

// add registers an agent; it reports false once shutting down.
func (as *agents) add(e *agentEntry) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.closed {
		return false
	}
	if as.byID == nil {
		as.byID = map[string]*agentEntry{}
	}
	as.byID[e.ID()] = e
	if as.byToken == nil {
		as.byToken = map[string]*agentEntry{}
	}
	as.byToken[e.token] = e
	return true
}

func (as *agents) remove(id string) *agentEntry {
	as.mu.Lock()
	defer as.mu.Unlock()
	e := as.byID[id]
	delete(as.byID, id)
	if e != nil {
		delete(as.byToken, e.token)
	}
	return e
}

// get returns a live agent by ID.
func (as *agents) get(id string) *agentEntry {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.byID[id]
}

// identify is the namespace's ns.Server.Identify: a sandboxed peer is the
// live agent whose capability it presents as its aname, and none without
// one. The name it attaches with proves nothing.
func (as *agents) identify(uname, aname string) string {
	if len(aname) != 2*tokenBytes {
		return ""
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if e := as.byToken[aname]; e != nil {
		return e.ID()
	}
	return ""
}

// member is the namespace's ns.Server.InGroup. A session's directory has
// the session's ID as its group, and the session's agents are its members,
// so that they may write its goalstatus; an agent is the member of the
// group of the agents it made (makerGroup).
func (as *agents) member(user, group string) bool {
	if maker, ok := strings.CutPrefix(group, makerGroup("")); ok {
		return user == maker && as.get(user) != nil
	}
	e := as.get(user)
	return e != nil && e.session == group
}

const tokenBytes = 32

func newToken() string {
	var b [tokenBytes]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// killSession closes every agent of a session.
func (as *agents) killSession(session string) {
	for _, e := range as.of(session) {
		as.remove(e.ID())
		e.Close()
	}
}

// closeAll closes every agent, for shutdown.
func (as *agents) closeAll() {
	as.mu.Lock()
	as.closed = true
	list := make([]*agentEntry, 0, len(as.byID))
	for _, e := range as.byID {
		list = append(list, e)
	}
	as.byID, as.byToken = nil, nil
	as.mu.Unlock()
	for _, e := range list {
		e.Close()
	}
}

// agentSpec declares an agent's files, owned by the agent's ID, in the
// agent group, with the seed's modes.
func (n *namespace) agentSpec() *ns.Node {
	each := ns.Listing(n.sessionAgents, agentEntryOf)
	return ns.Dir("agent", 0555, "Agents in the session.",
		ns.RdWrFile("new", 0666, "Create an agent: write 'name=X [cwd=DIR] [profile=P] [backend=B] [model=M] [prompt=TEXT...]' (quote a value with spaces as a shell does); read its name, or with prompt= run it as a sub-agent and read its final answer. An agent's tool (its profile must say \"spawn\": true) adds agents only to its own session and to the sessions it made.", n.newAgent),
		ns.ReadFile("idx", 0444, "Agent index: session-id<TAB>agent-id<TAB>agent-name<TAB>parent-id<TAB>depth<TAB>state.", n.agentIdx),
		ns.Dynamic("aname", 0555, "An agent, by name or by ID (an invisible alias).", each,
			ns.WriteFile("prompt", 0220, "Queue a user turn: each write is one prompt.", n.agentPrompt),
			&ns.Node{Name: "fifo", Mode: 0660, Read: n.agentRead(agentFifo), Write: n.agentPrompt,
				Doc: "Prompts waiting to run, one per line; a write queues one."},
			&ns.Node{Name: "plan", Mode: 0660, Read: n.agentRead(func(e *agentEntry) string { return e.Plan() }),
				Write: n.agentPlan, Doc: "The agent's planning scratch space; a write replaces it (kept across restarts)."},
			ns.StreamFile("chat", 0440, "The conversation as it happens: prompts, replies, tool calls and results.", n.agentChat(false)),
			ns.StreamFile("chat.raw", 0440, "Everything the agent streams, with markers.", n.agentChat(true)),
			ns.ReadFile("state", 0444, "idle, thinking, calling, paused or closed.", n.agentRead(func(e *agentEntry) string { return e.State() + "\n" })),
			ns.WaitFile("statewait", 0444, "Blocks until the state changes, then reads the new state.", n.agentStatewait),
			ns.ReadFile("log", 0440, "The conversation so far, one JSON message per line.", n.agentRead(agentLog)),
			ns.ReadFile("stats", 0444, "Turns, tokens and the last error, as JSON; context_window is the model's window in tokens at the last reply (for Ollama the num_ctx ollie sets) and prompt_tokens_last how much of it that reply's prompt took.", n.agentRead(agentStats)),
			ns.RdWrFile("ctl", 0660, "Agent controls: "+strings.Join(agentUsage(), ", ")+".", n.agentCtl),
			ns.ReadFile("id", 0444, "Immutable agent UUID.", n.agentRead(func(e *agentEntry) string { return e.ID() + "\n" })),
			ns.ReadFile("skills", 0444, "The skills the agent has loaded, one name a line (ctl skill_load, skill_unload; the host's are in /skills).", n.agentRead(agentSkills)),
			&ns.Node{Name: "cfg", Mode: 0640, Read: n.agentRead(agentCfg), Write: n.agentSetCfg,
				Doc: "Agent configuration as JSON; write 'model=NAME' lines to change what may change."},
			ns.Dir("proc", 0555, "Background processes this agent started.",
				ns.Dynamic("pid", 0555, "One background process, by its id.", ns.Listing(n.agentProcs, procEntry),
					ns.StreamFile("out", 0440, "Its output as it comes; ends when it exits.", n.procOut),
					ns.ReadFile("status", 0444, "running, or how it ended.", n.procStatus),
					ns.ReadFile("tool", 0444, "The tool it runs.", n.procTool),
				),
			),
			ns.Dir("peer", 0555, "Peer links (see peeradd).",
				ns.DynamicFile("pname", 0200, "Send a message to a linked peer agent: it arrives as a prompt.",
					ns.Listing(n.agentPeers, peerEntry), &ns.Node{Write: n.peerMessage}),
			),
			&ns.Node{Name: "name", Mode: 0644, Read: n.agentRead(func(e *agentEntry) string { return e.Name() + "\n" }),
				Write: n.renameAgent, Doc: "Mutable display name: write to rename."},
		),
	)
}

func agentEntryOf(e *agentEntry) ns.Entry {
	group := agentGroup
	if e.parent != "" {
		group = makerGroup(e.parent)
	}
	return ns.Entry{Name: e.Name(), Key: e.ID(), Owner: e.ID(), Group: group}
}

// makerGroup is the group of the files of an agent that another agent's
// tool made. The maker is its one member, so that it can brief, follow and
// stop what it made (prompt, fifo, plan and ctl have group bits), as the
// admin can any agent.
func makerGroup(id string) string { return "maker:" + id }

func (n *namespace) agentOf(c *ns.Call) (*agentEntry, error) {
	id := c.Key("aname")
	n.agents.mu.Lock()
	e := n.agents.byID[id]
	n.agents.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("%s: agent %s no longer exists", c.Path(), id)
	}
	return e, nil
}

func (n *namespace) agentRead(f func(*agentEntry) string) func(context.Context, *ns.Call) ([]byte, error) {
	return func(ctx context.Context, c *ns.Call) ([]byte, error) {
		e, err := n.agentOf(c)
		if err != nil {
			return nil, err
		}
		return []byte(f(e)), nil
	}
}

func agentFifo(e *agentEntry) string {
	var b strings.Builder
	for _, p := range e.Queued() {
		b.WriteString(strings.ReplaceAll(p, "\n", `\n`) + "\n")
	}
	return b.String()
}

func agentLog(e *agentEntry) string {
	var b strings.Builder
	for _, m := range e.History() {
		line, _ := json.Marshal(m)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func agentStats(e *agentEntry) string {
	b, _ := json.MarshalIndent(e.Stats(), "", "  ")
	return string(b) + "\n"
}

var agentName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

var agentKeys = []string{"name", "cwd", "profile", "backend", "model"}

func (n *namespace) newAgent(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	s, err := n.session(c)
	if err != nil {
		return nil, err
	}
	// prompt= takes the rest of the request, spaces and all: the agent runs
	// it as a sub-agent and the reply is its final answer.
	line := string(req)
	prompt, hasPrompt := "", false
	if i := strings.Index(line, "prompt="); i >= 0 && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
		prompt, hasPrompt = strings.TrimSpace(line[i+len("prompt="):]), true
		line = line[:i]
		if prompt == "" {
			return nil, errors.New("agent/new: prompt= is empty")
		}
	}
	opt := map[string]string{}
	words, err := keyValues(line, agentKeys)
	if err != nil {
		return nil, fmt.Errorf("agent/new: %w", err)
	}
	for _, kv := range words {
		if !contains(agentKeys, kv.key) {
			return nil, fmt.Errorf("agent/new: unknown key %q (keys: %s)", kv.key, strings.Join(agentKeys, ", "))
		}
		opt[kv.key] = kv.value
	}
	if m := opt["model"]; m != "" {
		if err := agent.CheckModel(m); err != nil {
			return nil, fmt.Errorf("agent/new: %w", err)
		}
	}
	name := opt["name"]
	var release func()
	if name == "" {
		// The first free of a1, a2, ...: another request may take one
		// at the same moment.
		for i := len(n.agents.of(s.ID)) + 1; release == nil; i++ {
			name = fmt.Sprintf("a%d", i)
			if release, _ = n.agents.claim(ctx, s.ID, name, nil); ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		defer release()
	}
	if !agentName.MatchString(name) {
		return nil, fmt.Errorf("agent/new: invalid name %q: use 1-64 letters, digits, '.', '_' or '-'", name)
	}
	if agent.Reserved(name) {
		return nil, fmt.Errorf("agent/new: invalid name %q: it is the name of a file beside the agents", name)
	}
	if release == nil {
		var ok bool
		if release, ok = n.agents.claim(ctx, s.ID, name, nil); !ok {
			return nil, fmt.Errorf("agent/new: an agent named %q exists in this session", name)
		}
		defer release()
	}
	creator, err := n.creator(c, s)
	if err != nil {
		return nil, err
	}
	cwd := opt["cwd"]
	if cwd == "" {
		cwd = s.Cwd()
		if creator != nil {
			// The narrower of the two: the creator's directory, or the
			// session's where the creator made it inside its own.
			if _, err := paths.Within(creator.Cwd(), s.Cwd()); err == nil {
				cwd = creator.Cwd()
			}
		}
	}
	if cwd, err = agentCwd(s, creator, cwd); err != nil {
		return nil, err
	}
	id := agent.NewID()
	meta := agent.AgentMeta{ID: id, Name: name, Cwd: cwd, Backend: opt["backend"], Model: opt["model"], Profile: opt["profile"]}
	if creator != nil {
		meta.Parent, meta.Depth = creator.ID(), creator.depth+1
		if meta.Limit, err = creator.toolNames(ctx); err != nil {
			return nil, fmt.Errorf("agent/new: the tools of %s: %w", creator.Name(), err)
		}
	}
	e, err := n.startAgent(ctx, s, meta, nil)
	if err != nil {
		return nil, fmt.Errorf("agent/new: %w", err)
	}
	if err := n.logs.record(s.ID, e.meta()); err != nil {
		e.Close()
		return nil, fmt.Errorf("agent/new: %w", err)
	}
	if !n.agents.add(e) {
		e.Close()
		return nil, errors.New("agent/new: olliesrv is shutting down")
	}
	n.bus.Publish("session."+s.ID+".agent."+id+".new", name)
	if prof, err := agent.LoadProfile(e.profile); err == nil {
		preloadSkills(e, prof.Skills)
	}
	if !hasPrompt {
		return []byte(name + "\n"), nil
	}
	return n.runSubAgent(ctx, e, prompt)
}

// maxDepth bounds how deep agents may create agents, so that a prompt
// injection cannot recurse without end.
const maxDepth = 8

// creator returns the agent whose tool makes a request that creates a
// session or an agent, or nil for the admin; into is the session an agent
// is added to, nil for a new session. It is the one place that decides
// whether an agent may spawn. Such work is never wider than its creator
// (see agentCwd and AgentMeta.Limit), and only a profile that says
// "spawn": true may ask for it. An agent adds agents only to its own
// session and to the sessions its tools made: a session the admin or
// another agent made is theirs, wherever its directory lies, and a yolo
// session's agents the admin's alone.
func (n *namespace) creator(c *ns.Call, into *agent.Session) (*agentEntry, error) {
	if c.Admin {
		return nil, nil
	}
	e := n.agents.get(c.User)
	if e == nil {
		return nil, fmt.Errorf("%s: refused: %s is not a live agent", c.Path(), c.User)
	}
	e.mu.Lock()
	profile := e.profile
	e.mu.Unlock()
	prof, err := agent.LoadProfile(profile)
	if err != nil {
		return nil, fmt.Errorf("%s: refused: agent %s's profile: %w", c.Path(), e.Name(), err)
	}
	if !prof.Spawn {
		return nil, fmt.Errorf(`%s: refused: agent %s has profile %q, which may not create sessions or agents (a profile needs "spawn": true, as orchestrator has)`, c.Path(), e.Name(), profile)
	}
	if e.depth >= maxDepth {
		return nil, fmt.Errorf("%s: refused: agent %s is %d levels below the agents people made, the most allowed", c.Path(), e.Name(), e.depth)
	}
	if into == nil {
		return e, nil
	}
	if into.Yolo {
		// Its tools would run unsandboxed: an escape for the creator's.
		return nil, fmt.Errorf("%s: refused: %s is a yolo session, whose tools run unsandboxed; only the admin may add agents to it, not agent %s's tool", c.Path(), into.Name(), e.Name())
	}
	if into.ID != e.session && into.Owner != e.ID() {
		maker := "another agent"
		if into.Owner == ns.Admin {
			maker = "the admin"
		}
		return nil, fmt.Errorf("%s: refused: agent %s adds agents only to its own session and to the sessions it made; %s was made by %s", c.Path(), e.Name(), into.Name(), maker)
	}
	return e, nil
}

// agentCwd checks an agent's directory: a directory inside its session's,
// and inside its creator's when an agent creates it. The sandbox confines
// the agent's tools to it.
func agentCwd(s *agent.Session, creator *agentEntry, cwd string) (string, error) {
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("agent/new: cwd %q is not a directory on this host", cwd)
	}
	real, err := paths.Within(cwd, s.Cwd())
	if err != nil {
		return "", fmt.Errorf("agent/new: cwd: %w: an agent works inside its session's directory", err)
	}
	if creator != nil {
		if real, err = paths.Within(real, creator.Cwd()); err != nil {
			return "", fmt.Errorf("agent/new: cwd: %w: an agent made by %s works inside its directory", err, creator.Name())
		}
	}
	return real, nil
}

// toolNames is the agent's current list of tools.
func (e *agentEntry) toolNames(ctx context.Context) ([]string, error) {
	at, ok := e.Tools().(*toolsrv.View)
	if !ok {
		return []string{}, nil
	}
	return at.Names(ctx)
}

// runSubAgent runs one prompt on a new agent and answers with its final
// reply; the agent is then removed. A flush of the request stops it.
func (n *namespace) runSubAgent(ctx context.Context, e *agentEntry, prompt string) ([]byte, error) {
	defer func() {
		n.logs.record(e.session, agent.AgentKilled{Agent: e.ID()})
		n.agents.remove(e.ID())
		e.Close()
		n.bus.Publish("session."+e.session+".agent."+e.ID()+".kill", e.Name())
	}()
	if err := e.Submit(ctx, prompt); err != nil {
		return nil, fmt.Errorf("agent/new: %w", err)
	}
	if !e.WaitTurns(ctx, 1) {
		e.Interrupt(errors.New("the sub-agent's caller went away"))
		return nil, ctx.Err()
	}
	h := e.History()
	if len(h) == 0 || h[len(h)-1].Role != "assistant" || len(h[len(h)-1].ToolCalls) > 0 {
		return nil, fmt.Errorf("agent/new: the sub-agent %s ended without an answer: %s", e.Name(), e.Stats().LastError)
	}
	out := h[len(h)-1].Content
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return []byte(out), nil
}

// within is the tools of list that limit allows: list itself without a
// limit, and limit for a list of every tool (nil).
func within(list, limit []string) []string {
	if limit == nil {
		return list
	}
	if list == nil {
		return slices.Clone(limit)
	}
	out := []string{}
	for _, name := range list {
		if slices.Contains(limit, name) {
			out = append(out, name)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// meta is what the session file keeps of the agent.
func (e *agentEntry) meta() agent.AgentMeta {
	e.mu.Lock()
	defer e.mu.Unlock()
	return agent.AgentMeta{ID: e.ID(), Name: e.Name(), Cwd: e.Cwd(), Backend: e.backend, Model: e.Model(), Profile: e.profile,
		Parent: e.parent, Depth: e.depth, Limit: e.limit}
}

// startAgent builds an agent from its profile: the system prompt is
// resolved from the profile's commands, its hooks are armed, and the
// agentSpawn hook may refuse it. A restored agent passes its history.
func (n *namespace) startAgent(ctx context.Context, s *agent.Session, m agent.AgentMeta, restored *agent.RestoredAgent) (*agentEntry, error) {
	if m.Profile == "" {
		m.Profile = "default"
	}
	prof, err := agent.LoadProfile(m.Profile)
	if err != nil {
		return nil, err
	}
	if m.Backend == "" {
		m.Backend = prof.Backend
	}
	if m.Model == "" {
		m.Model = prof.Model
	}
	if err := agent.CheckModel(m.Model); m.Model != "" && err != nil {
		if restored == nil {
			return nil, err
		}
		// A session file written before names were checked: the
		// backend's default, rather than hand a backend that name.
		n.log.Error("olliesrv: a restored agent's model is no model's name; it gets the backend's default", "agent", m.Name, "err", err)
		m.Model = ""
	}
	be, err := n.backend(m.Backend)
	if err != nil {
		if restored == nil {
			return nil, err
		}
		be = unavailable{name: m.Backend, err: err}
	}
	env := agent.PromptEnv{Cwd: m.Cwd, Session: s.ID, Agent: m.ID}
	system, err := agent.ResolvePrompt(ctx, prof, env)
	if err != nil {
		if restored == nil {
			return nil, err
		}
		system = "You are an agent working on a host through tools."
		n.log.Error("olliesrv: a restored agent's prompt did not resolve", "agent", m.Name, "err", err)
	}
	hooks := agent.NewHooks(prof, env)
	if restored == nil {
		d, err := hooks.AgentSpawn(ctx, agent.SpawnInfo{Model: m.Model, Backend: be.Name(), Tools: prof.Tools})
		if !d.Allow {
			reason := d.Reason
			if reason == "" && err != nil {
				reason = err.Error()
			}
			return nil, fmt.Errorf("the agentSpawn hook refused: %s", reason)
		}
	}
	token := newToken()
	var tools agent.Tools
	if child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo); err == nil {
		allowed := prof.Tools
		if restored != nil && restored.Tools != nil {
			allowed = restored.Tools
		}
		tools = n.tools.ForAgent(ctx, s.ID, child, within(allowed, m.Limit), toolsrv.Caller{Agent: m.ID, Token: token, Cwd: m.Cwd}, n.callerNames(s.ID, m.ID))
	} else if restored == nil {
		return nil, fmt.Errorf("the session's tools: %w", err)
	}
	cfg := agent.Config{ID: m.ID, Name: m.Name, SessionID: s.ID, Run: s.Name(), Backend: be, Model: m.Model, System: system,
		Tools: tools, Cwd: m.Cwd, MaxSteps: prof.MaxSteps, Publish: n.bus.Publish, Hooks: hooks, Skills: n.skillsOf()}
	if s.Yolo {
		cfg.TurnNote = yoloNote
	}
	if l := n.logs.get(s.ID); l != nil {
		cfg.Journal = l.Journal(m.ID)
	}
	e := &agentEntry{session: s.ID, created: time.Now(), backend: be.Name(),
		profile: m.Profile, token: token, parent: m.Parent, depth: m.Depth, limit: m.Limit}
	if restored != nil {
		cfg.History = restored.History
		cfg.LoadedSkills = restored.Skills
		e.peers = restored.Peers
	}
	e.Agent = agent.New(cfg)
	if restored != nil {
		e.SetPlan(restored.Plan)
	}
	return e, nil
}

func (n *namespace) agentIdx(ctx context.Context, c *ns.Call) ([]byte, error) {
	sid := c.Key("sname")
	var b strings.Builder
	for _, e := range n.agents.of(sid) {
		parent := e.parent
		if parent == "" {
			parent = "-"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%d\t%s\n", sid, e.ID(), e.Name(), parent, e.depth, e.State())
	}
	return []byte(b.String()), nil
}

func (n *namespace) agentPrompt(ctx context.Context, c *ns.Call, data []byte) error {
	e, err := n.agentOf(c)
	if err != nil {
		return err
	}
	p := strings.TrimRight(string(data), "\n")
	if strings.TrimSpace(p) == "" {
		return fmt.Errorf("%s: empty prompt", c.Path())
	}
	return e.Submit(ctx, p)
}

func (n *namespace) agentChat(raw bool) func(context.Context, *ns.Call) (*stream.Stream, error) {
	return func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
		e, err := n.agentOf(c)
		if err != nil {
			return nil, err
		}
		if raw {
			return e.ChatRaw, nil
		}
		return e.Chat, nil
	}
}

func (n *namespace) agentStatewait(ctx context.Context, c *ns.Call) ([]byte, error) {
	e, err := n.agentOf(c)
	if err != nil {
		return nil, err
	}
	// By version, not by value: a turn that comes and goes before this
	// reader looks still counts as a change.
	s, ok := e.WaitState(ctx, e.StateVersion())
	if !ok {
		return nil, ctx.Err()
	}
	return []byte(s + "\n"), nil
}

func (n *namespace) renameAgent(ctx context.Context, c *ns.Call, data []byte) error {
	e, err := n.agentOf(c)
	if err != nil {
		return err
	}
	name := strings.TrimSpace(string(data))
	if !agentName.MatchString(name) || agent.Reserved(name) {
		return fmt.Errorf("%s: invalid name %q", c.Path(), name)
	}
	release, ok := n.agents.claim(ctx, e.session, name, e)
	if !ok {
		return fmt.Errorf("%s: an agent named %q exists in this session", c.Path(), name)
	}
	defer release()
	if err := n.logs.record(e.session, agent.AgentRenamed{Agent: e.ID(), Name: name}); err != nil {
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	e.SetName(name)
	n.bus.Publish("session."+e.session+".agent."+e.ID()+".name", name)
	return nil
}

// checkModel refuses a model the agent's backend does not list, where it
// lists any: a typo would otherwise surface only at the next turn.
func (n *namespace) checkModel(ctx context.Context, e *agentEntry, model string) error {
	be, err := n.backend(e.backend)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	models, err := be.Models(mctx)
	if err != nil || len(models) == 0 || slices.Contains(models, model) {
		return nil // nothing to check against; the next turn says
	}
	shown := models
	if len(shown) > 10 {
		shown = append(slices.Clone(shown[:10]), "...")
	}
	return fmt.Errorf("backend %s has no model %q (it has %s)", be.Name(), model, strings.Join(shown, ", "))
}

// backend returns the named backend, or the default one.
func (n *namespace) backend(name string) (backend.Backend, error) {
	n.reloadEdited()
	n.bmu.Lock()
	lookup := n.backends
	n.bmu.Unlock()
	if lookup == nil {
		return nil, errors.New("no model backend is configured: set OPENAI_BASE_URL/OPENAI_API_KEY or OLLAMA_HOST, or write ~/.config/ollie/backends.json")
	}
	return lookup(name)
}

func (n *namespace) agentPlan(ctx context.Context, c *ns.Call, data []byte) error {
	e, err := n.agentOf(c)
	if err != nil {
		return err
	}
	if err := n.logs.record(e.session, agent.AgentPlanSet{Agent: e.ID(), Plan: string(data)}); err != nil {
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	e.SetPlan(string(data))
	n.bus.Publish("session."+e.session+".agent."+e.ID()+".plan", fmt.Sprint(len(data)))
	return nil
}

// linkPeers adds or removes the link both ways.
func linkPeers(a, b *agentEntry, add bool) {
	for _, p := range [][2]*agentEntry{{a, b}, {b, a}} {
		p[0].mu.Lock()
		if p[0].peers == nil {
			p[0].peers = map[string]bool{}
		}
		if add {
			p[0].peers[p[1].ID()] = true
		} else {
			delete(p[0].peers, p[1].ID())
		}
		p[0].mu.Unlock()
	}
}

func (n *namespace) peersOf(e *agentEntry) []*agentEntry {
	var out []*agentEntry
	for _, o := range n.agents.of(e.session) {
		e.mu.Lock()
		linked := e.peers[o.ID()]
		e.mu.Unlock()
		if linked {
			out = append(out, o)
		}
	}
	return out
}

// peerMessage delivers a message from the agent to a linked peer, as a
// prompt that says who it is from.
func (n *namespace) peerMessage(ctx context.Context, c *ns.Call, data []byte) error {
	from, err := n.agentOf(c)
	if err != nil {
		return err
	}
	n.agents.mu.Lock()
	to := n.agents.byID[c.Key("pname")]
	n.agents.mu.Unlock()
	if to == nil {
		return fmt.Errorf("%s: the peer no longer exists", c.Path())
	}
	from.mu.Lock()
	linked := from.peers[to.ID()]
	from.mu.Unlock()
	if !linked {
		return fmt.Errorf("%s: %s is no longer a peer of %s", c.Path(), to.Name(), from.Name())
	}
	msg := strings.TrimSpace(string(data))
	if msg == "" {
		return fmt.Errorf("%s: empty message", c.Path())
	}
	return to.Submit(ctx, fmt.Sprintf("Message from your peer %s:\n%s", from.Name(), msg))
}

func agentCfg(e *agentEntry) string {
	e.mu.Lock()
	cfg := map[string]string{"profile": e.profile, "backend": e.backend, "cwd": e.Cwd()}
	e.mu.Unlock()
	cfg["model"] = e.Model()
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return string(b) + "\n"
}

// cfgKeys are what a write to cfg may set: what can change while the
// agent lives.
var cfgKeys = []string{"model"}

// agentSetCfg takes key=value words, a line each or on one line.
func (n *namespace) agentSetCfg(ctx context.Context, c *ns.Call, data []byte) error {
	if _, err := n.agentOf(c); err != nil {
		return err
	}
	words, err := keyValues(string(data), cfgKeys)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	if len(words) == 0 {
		return fmt.Errorf("%s: write key=value (keys: %s)", c.Path(), strings.Join(cfgKeys, ", "))
	}
	for _, kv := range words {
		if kv.key != "model" {
			return fmt.Errorf("%s: %q cannot change while the agent lives (settable: %s); create a new agent for another profile, backend or cwd", c.Path(), kv.key, strings.Join(cfgKeys, ", "))
		}
	}
	for _, kv := range words {
		if _, err := n.agentCtl(ctx, c, []byte("model "+kv.value)); err != nil {
			return err
		}
	}
	return nil
}

// procOut serves a background process's output from a local stream that
// one goroutine fills by following the toolsrv's stream: readers here
// block on this stream, not on toolsrv.
func (n *namespace) procOut(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
	e, err := n.agentOf(c)
	if err != nil {
		return nil, err
	}
	s, err := n.session(c)
	if err != nil {
		return nil, err
	}
	id := c.Key("pid")
	e.mu.Lock()
	defer e.mu.Unlock()
	if st := e.outs[id]; st != nil {
		return st, nil
	}
	child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo)
	if err != nil {
		return nil, err
	}
	st := stream.NewStream(0)
	if e.outs == nil {
		e.outs = map[string]*stream.Stream{}
	}
	e.outs[id] = st
	go func() {
		if err := child.Follow(context.Background(), "proc/"+id+"/out", st); err != nil {
			fmt.Fprintf(st, "\n[output lost: %v]\n", err)
		}
		st.Close()
	}()
	return st, nil
}

func (n *namespace) procFile(ctx context.Context, c *ns.Call, file string) ([]byte, error) {
	s, err := n.session(c)
	if err != nil {
		return nil, err
	}
	child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo)
	if err != nil {
		return nil, err
	}
	return child.ReadFile(ctx, "proc/"+c.Key("pid")+"/"+file)
}

func (n *namespace) procStatus(ctx context.Context, c *ns.Call) ([]byte, error) {
	return n.procFile(ctx, c, "status")
}

func (n *namespace) procTool(ctx context.Context, c *ns.Call) ([]byte, error) {
	return n.procFile(ctx, c, "tool")
}

// switchProfile gives a live, idle agent another profile: its prompt is
// resolved again, its hooks and tool list replaced, and the switch recorded.
func (n *namespace) switchProfile(ctx context.Context, c *ns.Call, e *agentEntry, name string) error {
	s, err := n.session(c)
	if err != nil {
		return err
	}
	prof, err := agent.LoadProfile(name)
	if err != nil {
		return err
	}
	env := agent.PromptEnv{Cwd: e.Cwd(), Session: s.ID, Agent: e.ID()}
	system, err := agent.ResolvePrompt(ctx, prof, env)
	if err != nil {
		return err
	}
	child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo)
	if err != nil {
		return err
	}
	tools := n.tools.ForAgent(ctx, s.ID, child, within(prof.Tools, e.limit), toolsrv.Caller{Agent: e.ID(), Token: e.token, Cwd: e.Cwd()}, n.callerNames(s.ID, e.ID()))
	// Recorded before it takes effect; a switch the agent refuses (it is
	// busy) is recorded back, so that a restart brings back what ran.
	e.mu.Lock()
	old := e.profile
	e.mu.Unlock()
	if err := n.logs.record(e.session, agent.AgentProfileSet{Agent: e.ID(), Profile: name}); err != nil {
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	if err := e.Reconfigure(system, agent.NewHooks(prof, env), tools, prof.MaxSteps); err != nil {
		if rerr := n.logs.record(e.session, agent.AgentProfileSet{Agent: e.ID(), Profile: old}); rerr != nil {
			n.log.Error("olliesrv: a refused profile switch could not be recorded back", "agent", e.ID(), "err", rerr)
		}
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	e.mu.Lock()
	e.profile = name
	e.mu.Unlock()
	// The new profile's skills, beside those already loaded.
	var want []string
	for _, sk := range prof.Skills {
		if !slices.Contains(e.LoadedSkills(), sk) {
			want = append(want, sk)
		}
	}
	preloadSkills(e, want)
	return nil
}

// sessionAgents, agentProcs and agentPeers are the items of the agent/,
// proc/ and peers/ directories.
func (n *namespace) sessionAgents(_ context.Context, c *ns.Call) ([]*agentEntry, error) {
	return n.agents.of(c.Key("sname")), nil
}

func (n *namespace) agentProcs(_ context.Context, c *ns.Call) ([]agent.ProcInfo, error) {
	e, err := n.agentOf(c)
	if err != nil {
		return nil, err
	}
	return e.Procs(), nil
}

func procEntry(p agent.ProcInfo) ns.Entry { return ns.Entry{Name: p.ID, Key: p.ID} }

func (n *namespace) agentPeers(_ context.Context, c *ns.Call) ([]*agentEntry, error) {
	e, err := n.agentOf(c)
	if err != nil {
		return nil, err
	}
	return n.peersOf(e), nil
}

func peerEntry(p *agentEntry) ns.Entry { return ns.Entry{Name: p.Name(), Key: p.ID()} }

// callerNames returns the names of a session and one of its agents as they
// are when asked (either may be renamed), for the approvals its calls need.
func (n *namespace) callerNames(session, agentID string) func() (string, string) {
	return func() (s, a string) {
		if ss, ok := n.sessions.Lookup(session); ok {
			s = ss.Name()
		}
		if e := n.agents.get(agentID); e != nil {
			a = e.Name()
		}
		return s, a
	}
}
