package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"ollie/toolsrv/tool"
	"slices"
	"strings"
	"sync"
)

// A View is one agent's view of its session's toolsrv, and the path of
// every tool call from the loop: it filters what the model is shown and
// what it may call, and names the agent each call runs for. An agent with a
// list (from its profile, or from its own tool_load and tool_unload) sees
// only those tools; an agent without one sees the session's shared tools,
// which leave out the ones loaded for a single agent.
type View struct {
	*Child
	private func(string) bool              // a tool loaded for one agent only
	who     Caller                         // the agent: its directory, and the capability its tools get
	named   func() (session, agent string) // their names now, for approvals (nil: none)

	mu      sync.Mutex
	allowed []string // nil: the session's shared tools
}

// Has reports whether the agent may call the tool.
func (a *View) Has(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.allowed == nil {
		return !a.private(name)
	}
	return slices.Contains(a.allowed, name)
}

// Names is the agent's list, made from the shared tools if it has none yet.
func (a *View) Names(ctx context.Context) ([]string, error) {
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

// Next returns the agent's list with a tool added or removed, without
// changing it: the caller records the list first, then uses it. The first
// change turns the shared tools into the agent's own list, so that no
// other agent is affected.
func (a *View) Next(ctx context.Context, name string, add bool) ([]string, error) {
	list, err := a.Names(ctx)
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

// Use makes list the agent's tools.
func (a *View) Use(list []string) {
	a.mu.Lock()
	a.allowed = slices.Clone(list)
	a.mu.Unlock()
}

// Decls are the agent's tools as the model is shown them.
func (a *View) Decls(ctx context.Context) ([]tool.FunctionDecl, error) {
	all, err := a.Child.Decls(ctx)
	if err != nil {
		return nil, err
	}
	var out []tool.FunctionDecl
	for _, d := range all {
		if a.Has(d.Name) {
			out = append(out, d)
		}
	}
	return out, nil
}

// Call runs a call for the agent; a tool it may not call is a failed
// result the model reads, not an error.
func (a *View) Call(ctx context.Context, name string, args json.RawMessage) (*tool.Result, error) {
	if !a.Has(name) {
		list, _ := a.Names(ctx)
		return &tool.Result{Tool: name, Failed: true, ExitCode: -1,
			Output: fmt.Sprintf("not run: %s is not among this agent's tools (%s)", name, strings.Join(list, ", "))}, nil
	}
	return a.Child.CallFor(ctx, a.caller(), name, args)
}

// caller is who a call runs for, named as the session and agent are now.
func (a *View) caller() Caller {
	who := a.who
	if a.named != nil {
		who.SessionName, who.AgentName = a.named()
	}
	return who
}

// Start starts a call in the background for the agent.
func (a *View) Start(ctx context.Context, name string, args json.RawMessage) (string, error) {
	if !a.Has(name) {
		return "", fmt.Errorf("not run: %s is not among this agent's tools", name)
	}
	return a.Child.StartFor(ctx, a.caller(), name, args)
}
