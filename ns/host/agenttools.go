package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"ollie/toolsrv"
)

// agentTools is one agent's view of its session's toolsrv. An agent with a
// list (from its profile, or from its own tool_load and tool_unload) sees
// only those tools; an agent without one sees the session's shared tools,
// which leave out the ones loaded for a single agent.
type agentTools struct {
	*toolsrv.Child
	private func(string) bool              // a tool loaded for one agent only
	who     toolsrv.Caller                 // the agent: its directory, and the capability its tools get
	named   func() (session, agent string) // their names now, for approvals (nil: none)

	mu      sync.Mutex
	allowed []string // nil: the session's shared tools
}

func (a *agentTools) has(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.allowed == nil {
		return !a.private(name)
	}
	return slices.Contains(a.allowed, name)
}

// names is the agent's list, made from the shared tools if it has none yet.
func (a *agentTools) names(ctx context.Context) ([]string, error) {
	a.mu.Lock()
	allowed := a.allowed
	a.mu.Unlock()
	if allowed != nil {
		return slices.Clone(allowed), nil
	}
	all, err := a.Child.Decls(ctx)
	if err != nil {
		return nil, err
	}
	list := []string{}
	for _, d := range all {
		if !a.private(d.Name) {
			list = append(list, d.Name)
		}
	}
	return list, nil
}

// next returns the agent's list with a tool added or removed, without
// changing it: the caller records the list first, then uses it. The first
// change turns the shared tools into the agent's own list, so that no
// other agent is affected.
func (a *agentTools) next(ctx context.Context, name string, add bool) ([]string, error) {
	list, err := a.names(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.Index(list, name)
	switch {
	case add && i < 0:
		list = append(list, name)
	case !add && i >= 0:
		list = slices.Delete(list, i, i+1)
	}
	return list, nil
}

// use makes list the agent's tools.
func (a *agentTools) use(list []string) {
	a.mu.Lock()
	a.allowed = slices.Clone(list)
	a.mu.Unlock()
}

func (a *agentTools) Decls(ctx context.Context) ([]toolsrv.FunctionDecl, error) {
	all, err := a.Child.Decls(ctx)
	if err != nil {
		return nil, err
	}
	var out []toolsrv.FunctionDecl
	for _, d := range all {
		if a.has(d.Name) {
			out = append(out, d)
		}
	}
	return out, nil
}

func (a *agentTools) Call(ctx context.Context, tool string, args json.RawMessage) (*toolsrv.Result, error) {
	if !a.has(tool) {
		list, _ := a.names(ctx)
		return &toolsrv.Result{Tool: tool, Failed: true, ExitCode: -1,
			Output: fmt.Sprintf("not run: %s is not among this agent's tools (%s)", tool, strings.Join(list, ", "))}, nil
	}
	return a.Child.CallFor(ctx, a.caller(), tool, args)
}

// caller is who a call runs for, named as the session and agent are now.
func (a *agentTools) caller() toolsrv.Caller {
	who := a.who
	if a.named != nil {
		who.SessionName, who.AgentName = a.named()
	}
	return who
}

func (a *agentTools) Start(ctx context.Context, tool string, args json.RawMessage) (string, error) {
	if !a.has(tool) {
		return "", fmt.Errorf("not run: %s is not among this agent's tools", tool)
	}
	return a.Child.StartFor(ctx, a.caller(), tool, args)
}

// forAgent gives an agent its view of the session's tools. A listed tool
// the toolsrv has not loaded (a profile's, or one the agent loaded before a
// restart) is loaded for that agent alone; one that no longer loads is left
// out, as the model would only see it fail.
func (ts *toolServers) forAgent(ctx context.Context, session string, child *toolsrv.Child, allowed []string, who toolsrv.Caller, named func() (string, string)) *agentTools {
	a := &agentTools{Child: child, allowed: slices.Clone(allowed), who: who, named: named,
		private: func(name string) bool { return ts.isPrivate(session, name) }}
	if allowed == nil {
		return a
	}
	loaded := map[string]bool{}
	if all, err := child.Decls(ctx); err == nil {
		for _, d := range all {
			loaded[d.Name] = true
		}
	}
	for _, name := range allowed {
		if !loaded[name] {
			if _, err := child.RdWr(ctx, "ctl", []byte("load "+name)); err == nil {
				ts.markPrivate(session, name)
			}
		}
	}
	return a
}

// load loads a tool into the session's toolsrv, for one agent alone, when
// the session does not have it.
func (ts *toolServers) load(ctx context.Context, session string, child *toolsrv.Child, name string) error {
	all, err := child.Decls(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(all, func(d toolsrv.FunctionDecl) bool { return d.Name == name }) {
		if _, err := child.RdWr(ctx, "ctl", []byte("load "+name)); err != nil {
			return err
		}
		ts.markPrivate(session, name)
	}
	return nil
}

func (ts *toolServers) markPrivate(session, name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.private == nil {
		ts.private = map[string]map[string]bool{}
	}
	if ts.private[session] == nil {
		ts.private[session] = map[string]bool{}
	}
	ts.private[session][name] = true
}

func (ts *toolServers) isPrivate(session, name string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.private[session][name]
}

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
