package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"ollie/agent"
	"ollie/internal/paths"
	"ollie/ns"
	"ollie/toolsrv"
)

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
