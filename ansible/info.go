package ansible

// ollie_info: the host's facts, read from the namespace.

import (
	"context"
	"strings"

	"ollie/ns/client"
	"ollie/toolsrv"
	"ollie/toolsrv/meta"
)

// Session is one session in ollie_info's facts.
type Session struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	State  string   `json:"state"`
	Agents []string `json:"agents"`
}

// Tool is one tool in ollie_info's facts: offered or not, and the variant
// chosen on this host (-1 for a tool without variants).
type Tool struct {
	Name        string `json:"name"`
	Status      string `json:"status"`
	Variant     int    `json:"variant"`
	Description string `json:"description,omitempty"`
	Definition  string `json:"definition"`
}

// InfoResult is ollie_info's result.
type InfoResult struct {
	Changed  bool              `json:"changed"`
	Failed   bool              `json:"failed"`
	Msg      string            `json:"msg,omitempty"`
	Version  string            `json:"version"`
	Status   map[string]string `json:"status"`
	Sessions []Session         `json:"sessions"`
	Tools    []Tool            `json:"tools"`
}

// Info reads the daemon's status, its sessions and their agents, and
// the tools this host offers with the variant chosen for each (as
// "olliesrv tools" explains them).
func Info(ctx context.Context, c *client.Conn) InfoResult {
	res := InfoResult{Status: map[string]string{}, Sessions: []Session{}, Tools: []Tool{}}
	st, err := c.ReadLimit(ctx, "status", maxSmall)
	if err != nil {
		res.Failed, res.Msg = true, "ollie_info: reading status: "+err.Error()
		return res
	}
	for _, line := range strings.Split(string(st), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			res.Status[k] = v
		}
	}
	res.Version = res.Status["version"]
	idx, err := c.ReadLimit(ctx, "session/idx", maxLog)
	if err != nil {
		res.Failed, res.Msg = true, "ollie_info: reading session/idx: "+err.Error()
		return res
	}
	for _, line := range strings.Split(strings.TrimSpace(string(idx)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 2 {
			continue
		}
		s := Session{ID: f[0], Name: f[1], State: f[len(f)-1], Agents: []string{}}
		if b, err := c.ReadLimit(ctx, "session/"+s.ID+"/agent/idx", maxLog); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if f := strings.Split(line, "\t"); len(f) >= 3 {
					s.Agents = append(s.Agents, f[2])
				}
			}
		}
		res.Sessions = append(res.Sessions, s)
	}
	descs := map[string]string{}
	if b, err := c.ReadLimit(ctx, "tools", maxLog); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, d, ok := strings.Cut(line, "\t"); ok {
				descs[name] = d
			}
		}
	}
	reg := toolsrv.Load(toolsrv.ToolsPath(), meta.LocalHost{})
	for _, e := range reg.Explain() {
		res.Tools = append(res.Tools, Tool{Name: e.Name, Status: e.Status.String(), Variant: e.Variant, Description: descs[e.Name], Definition: e.File})
	}
	return res
}
