package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/ns"
	"ollie/ns/stream"
)

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
	_, child, err := n.toolsOf(ctx, c)
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
