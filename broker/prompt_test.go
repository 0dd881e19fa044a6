package broker_test

import (
	"encoding/json"
	"strings"
	"testing"

	"ollie/broker"
)

// TestPromptWhoAsks: the prompt names the session and the agent, says
// when there is none, and shows a variant only for a tool that has them.
func TestPromptWhoAsks(t *testing.T) {
	for _, tc := range []struct {
		name           string
		session, agent string
		variant        int
		want, not      []string
	}{
		{"agent", "s1", "ops", 0, []string{"  tool:     system_logs (variant 0)\n", "  session:  s1, agent ops\n"}, nil},
		{"names", "s1", "ops", 0, []string{"  session:  web (s1), agent fixer (ops)\n"}, nil},
		{"no variants", "s1", "ops", -1, []string{"  tool:     system_logs\n"}, []string{"variant"}},
		{"second variant", "s1", "ops", 1, []string{"system_logs (variant 1)\n"}, nil},
		{"no agent", "s1", "", -1, []string{"  session:  s1, no agent: called through the session's tools\n"}, []string{", agent"}},
		{"by hand", "", "", -1, []string{"  session:  none: run by hand on the host (olliesrv tools run), not by an agent\n"}, nil},
	} {
		req := &broker.Request{
			ID: "req-1", Host: "db3", Tool: "system_logs", Executable: "/usr/bin/dmesg",
			Args: json.RawMessage(`{"lines": "10"}`), Cwd: "/home/ops", Sudo: true,
		}
		req.Session, req.Agent, req.Variant = tc.session, tc.agent, tc.variant
		if tc.name == "names" {
			req.SessionName, req.AgentName = "web", "fixer"
		}
		p := req.Prompt()
		for _, w := range tc.want {
			if !strings.Contains(p, w) {
				t.Errorf("%s: the prompt lacks %q:\n%s", tc.name, w, p)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(p, w) {
				t.Errorf("%s: the prompt says %q:\n%s", tc.name, w, p)
			}
		}
	}
}
