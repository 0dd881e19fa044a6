package host

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"ollie/agent"
	"ollie/ns"
	"ollie/toolsrv"
)

// An agentVerb is one control of an agent's ctl file, declared once: the
// file's description, help, the argument checks and the dispatch are all
// read from agentVerbs.
type agentVerb struct {
	name  string
	usage []string // as help shows it; the name alone when empty
	arg   argRule
	run   func(n *namespace, ctx context.Context, c *ns.Call, e *agentEntry, verb, arg string) ([]byte, error)
}

// argRule says what a verb makes of an argument.
type argRule uint8

const (
	argAny   argRule = iota // the verb checks its argument itself
	argNone                 // a bare verb: an argument is a mistake
	argFixed                // a property set when the agent is made: shown, never changed
)

// agentVerbs are the agent's controls, in the order help lists them.
var agentVerbs = []agentVerb{
	{name: "help", arg: argNone}, // run by agentCtl: help reads this table
	{name: "stop", arg: argNone, run: (*namespace).ctlStop},
	{name: "kill", arg: argNone, run: (*namespace).ctlKill},
	{name: "compact", arg: argNone, run: (*namespace).ctlCompact},
	{name: "clear", arg: argNone, run: (*namespace).ctlClear},
	{name: "inject", usage: []string{"inject TEXT"}, run: (*namespace).ctlInject},
	{name: "agent", usage: []string{"agent [PROFILE]"}, run: (*namespace).ctlProfile},
	{name: "model", usage: []string{"model [NAME]"}, run: (*namespace).ctlModel},
	{name: "backend", arg: argFixed, run: func(_ *namespace, _ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
		return []byte(e.backend + "\n"), nil
	}},
	{name: "name", run: (*namespace).ctlName},
	{name: "cwd", arg: argFixed, run: func(_ *namespace, _ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
		return []byte(e.Cwd() + "\n"), nil
	}},
	{name: "tools", arg: argNone, run: (*namespace).ctlTools},
	{name: "tool_load", usage: []string{"tool_load NAME"}, run: (*namespace).ctlToolList},
	{name: "tool_unload", usage: []string{"tool_unload NAME"}, run: (*namespace).ctlToolList},
	{name: "skill_load", usage: []string{"skill_load NAME"}, run: ctlSkill},
	{name: "skill_unload", usage: []string{"skill_unload NAME"}, run: ctlSkill},
	{name: "peeradd", usage: []string{"peeradd NAME"}, run: (*namespace).ctlPeer},
	{name: "peerdel", usage: []string{"peerdel NAME"}, run: (*namespace).ctlPeer},
	{name: "peers", arg: argNone, run: (*namespace).ctlPeers},
	{name: "proc", usage: []string{"proc", "proc out|term|kill|dismiss PID"}, run: (*namespace).ctlProc},
	{name: "models", arg: argNone, run: (*namespace).ctlModels},
	{name: "systemprompt", arg: argNone, run: func(_ *namespace, _ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
		return []byte(e.System()), nil
	}},
}

// agentUsage lists the controls as help shows them.
func agentUsage() []string {
	var u []string
	for _, v := range agentVerbs {
		if len(v.usage) == 0 {
			u = append(u, v.name)
		}
		u = append(u, v.usage...)
	}
	return u
}

func (n *namespace) agentCtl(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	e, err := n.agentOf(c)
	if err != nil {
		return nil, err
	}
	verb, arg := command(req)
	i := slices.IndexFunc(agentVerbs, func(v agentVerb) bool { return v.name == verb })
	if i < 0 {
		return nil, unknownCommand(c.Path(), verb, agentUsage())
	}
	v := agentVerbs[i]
	switch {
	case arg != "" && v.arg == argFixed:
		return nil, fmt.Errorf("%s: %s cannot change while the agent lives: create a new agent with %s=", c.Path(), verb, verb)
	case arg != "" && v.arg != argAny:
		return nil, fmt.Errorf("%s: %s takes no argument, got %q", c.Path(), verb, arg)
	}
	if v.run == nil {
		return []byte(strings.Join(agentUsage(), "\n") + "\n"), nil
	}
	return v.run(n, ctx, c, e, verb, arg)
}

func (n *namespace) ctlStop(_ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	if !e.Interrupt(agent.ErrStopped) {
		return []byte("idle\n"), nil
	}
	return []byte("stopped\n"), nil
}

func (n *namespace) ctlKill(_ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	if err := n.logs.record(e.session, agent.AgentKilled{Agent: e.ID()}); err != nil {
		return nil, err
	}
	n.agents.remove(e.ID())
	e.Close()
	n.bus.Publish("session."+e.session+".agent."+e.ID()+".kill", e.Name())
	return []byte("ok\n"), nil
}

func (n *namespace) ctlCompact(_ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	removed, err := e.Compact()
	if err != nil {
		return nil, err
	}
	return []byte(fmt.Sprintf("removed %d messages\n", removed)), nil
}

func (n *namespace) ctlClear(_ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	if err := e.Clear(); err != nil {
		return nil, err
	}
	return []byte("ok\n"), nil
}

func (n *namespace) ctlInject(_ context.Context, c *ns.Call, e *agentEntry, _, arg string) ([]byte, error) {
	if arg == "" {
		return nil, fmt.Errorf("%s: inject needs the text to add", c.Path())
	}
	if err := e.Inject(arg); err != nil {
		return nil, err
	}
	return []byte("ok\n"), nil
}

func (n *namespace) ctlProfile(ctx context.Context, c *ns.Call, e *agentEntry, _, arg string) ([]byte, error) {
	if arg != "" && arg != e.profile && !c.Admin {
		// A profile brings tools and the right to spawn: an agent's
		// own tool must not give it more than it has.
		return nil, fmt.Errorf("%s: agent: only olliesrv's own user may switch an agent's profile", c.Path())
	}
	if arg != "" && arg != e.profile {
		if err := n.switchProfile(ctx, c, e, arg); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return []byte(e.profile + "\n"), nil
}

func (n *namespace) ctlModel(ctx context.Context, c *ns.Call, e *agentEntry, _, arg string) ([]byte, error) {
	if arg != "" {
		if err := agent.CheckModel(arg); err != nil {
			return nil, fmt.Errorf("%s: model: %w", c.Path(), err)
		}
		if err := n.checkModel(ctx, e, arg); err != nil {
			return nil, fmt.Errorf("%s: model: %w", c.Path(), err)
		}
		if err := n.logs.record(e.session, agent.AgentModelSet{Agent: e.ID(), Model: arg}); err != nil {
			return nil, err
		}
		e.SetModel(arg)
	}
	if m := e.Model(); m != "" {
		return []byte(m + "\n"), nil
	}
	return []byte("(the backend's default)\n"), nil
}

func (n *namespace) ctlName(ctx context.Context, c *ns.Call, e *agentEntry, _, arg string) ([]byte, error) {
	if arg != "" {
		if err := n.renameAgent(ctx, c, []byte(arg)); err != nil {
			return nil, err
		}
	}
	return []byte(e.Name() + "\n"), nil
}

func (n *namespace) ctlModels(ctx context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	be, err := n.backend(e.backend)
	if err != nil {
		return nil, err
	}
	models, err := be.Models(ctx)
	if err != nil {
		return nil, err
	}
	return []byte(strings.Join(models, "\n") + "\n"), nil
}

func (n *namespace) ctlTools(ctx context.Context, c *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	tools := e.Tools()
	if tools == nil {
		return nil, fmt.Errorf("%s: the agent has no tools", c.Path())
	}
	decls, err := tools.Decls(ctx)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, d := range decls {
		fmt.Fprintf(&b, "%s\t%s\n", d.Name, d.Description)
	}
	return []byte(b.String()), nil
}

// ctlToolList serves tool_load and tool_unload.
func (n *namespace) ctlToolList(ctx context.Context, c *ns.Call, e *agentEntry, verb, arg string) ([]byte, error) {
	if arg == "" {
		return nil, fmt.Errorf("%s: %s needs a tool name", c.Path(), verb)
	}
	s, child, err := n.toolsOf(ctx, c)
	if err != nil {
		return nil, err
	}
	// Each agent changes only its own list: a tool the session lacks is
	// loaded into its toolsrv but stays hidden from the other agents.
	at, ok := e.Tools().(*toolsrv.View)
	if !ok {
		return nil, fmt.Errorf("%s: this agent has no tools to change", c.Path())
	}
	have, err := at.Names(ctx)
	if err != nil {
		return nil, err
	}
	add := verb == "tool_load"
	switch {
	case add && e.limit != nil && !slices.Contains(e.limit, arg):
		return nil, fmt.Errorf("%s: tool_load: %s is not among the tools of the agent that made this one (%s), and an agent never outgrows its maker", c.Path(), arg, strings.Join(e.limit, ", "))
	case add:
		if err := n.tools.Load(ctx, s.ID, child, arg); err != nil {
			return nil, err
		}
	case !slices.Contains(have, arg):
		return nil, fmt.Errorf("%s: tool_unload: %s is not among this agent's tools (%s)", c.Path(), arg, strings.Join(have, ", "))
	}
	list, err := at.Next(ctx, arg, add)
	if err != nil {
		return nil, err
	}
	// Recorded before it takes effect, as every change.
	if err := n.logs.record(e.session, agent.AgentToolsSet{Agent: e.ID(), Tools: list}); err != nil {
		return nil, err
	}
	at.Use(list)
	return []byte(strings.Join(list, "\n") + "\n"), nil
}

func ctlSkill(_ *namespace, _ context.Context, c *ns.Call, e *agentEntry, verb, arg string) ([]byte, error) {
	return skillCtl(c, e, verb, arg)
}

// ctlPeer serves peeradd and peerdel.
func (n *namespace) ctlPeer(_ context.Context, c *ns.Call, e *agentEntry, verb, arg string) ([]byte, error) {
	if verb == "peeradd" && !c.Admin {
		// A link lets each agent prompt the other: an agent's own tool
		// must not open that way into another agent.
		return nil, fmt.Errorf("%s: peeradd: only olliesrv's own user may link agents", c.Path())
	}
	other := n.agents.lookup(e.session, arg)
	if other == nil || other == e {
		return nil, fmt.Errorf("%s: %s: no other agent %q in this session", c.Path(), verb, arg)
	}
	add := verb == "peeradd"
	if err := n.logs.record(e.session, agent.AgentPeered{Agent: e.ID(), Peer: other.ID(), Add: add}); err != nil {
		return nil, err
	}
	linkPeers(e, other, add)
	return []byte("ok\n"), nil
}

func (n *namespace) ctlPeers(_ context.Context, _ *ns.Call, e *agentEntry, _, _ string) ([]byte, error) {
	var b strings.Builder
	for _, p := range n.peersOf(e) {
		b.WriteString(p.Name() + "\n")
	}
	return []byte(b.String()), nil
}

func (n *namespace) ctlProc(ctx context.Context, c *ns.Call, e *agentEntry, _, arg string) ([]byte, error) {
	_, child, err := n.toolsOf(ctx, c)
	if err != nil {
		return nil, err
	}
	sub, pid, _ := strings.Cut(arg, " ")
	pid = strings.TrimSpace(pid)
	// The session's toolsrv holds every agent's processes: this agent
	// sees and controls only its own, as its proc/ directory shows.
	own := map[string]bool{}
	for _, p := range e.Procs() {
		own[p.ID] = true
	}
	if sub != "" && sub != "top" && !own[pid] {
		return nil, fmt.Errorf("%s: proc: no background process %s of agent %s", c.Path(), pid, e.Name())
	}
	switch sub {
	case "", "top":
		all, err := child.Procs(ctx)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, line := range strings.SplitAfter(string(all), "\n") {
			if id, _, _ := strings.Cut(line, "\t"); own[id] {
				b.WriteString(line)
			}
		}
		return []byte(b.String()), nil
	case "out":
		p, err := child.Poll(ctx, pid, 0)
		if err != nil {
			return nil, err
		}
		return []byte(p.Data), nil
	case "term", "kill", "dismiss":
		return child.RdWr(ctx, "proc/"+pid+"/ctl", []byte(sub))
	}
	return nil, fmt.Errorf("%s: proc: unknown command %q (valid: proc, proc top, proc out PID, proc term PID, proc kill PID, proc dismiss PID)", c.Path(), sub)
}
