package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

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
		{"agent", "s1", "ops", 0, []string{"  tool:     system_logs (variant 0)\n", "    session:  \"s1\", agent \"ops\"\n"}, nil},
		{"names", "s1", "ops", 0, []string{"    session:  \"web\" (\"s1\"), agent \"fixer\" (\"ops\")\n"}, nil},
		{"no variants", "s1", "ops", -1, []string{"  tool:     system_logs\n"}, []string{"variant"}},
		{"second variant", "s1", "ops", 1, []string{"system_logs (variant 1)\n"}, nil},
		{"no agent", "s1", "", -1, []string{"    session:  \"s1\", no agent: called through the session's tools\n"}, []string{", agent"}},
		{"by hand", "", "", -1, []string{"    session:  none: run by hand on the host (olliesrv tools run), not by an agent\n"}, nil},
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

// TestReceiveHoldsNames: a request whose tool or id is a sentence, not a
// name, is refused where it is received, with the reason for its sender,
// and never reaches whoever would show it; a host named in a request is
// dropped, for the receiver to say from its connection.
func TestReceiveHoldsNames(t *testing.T) {
	for _, c := range []struct {
		name   string
		req    broker.Request
		reason string // "" when received
	}{
		{"tool with words", broker.Request{ID: "r1", Tool: "system_logs for h5 (asked by h5)", Variant: -1}, "is not a tool's name"},
		{"tool with escapes", broker.Request{ID: "r1", Tool: "x\x1b[2J", Variant: -1}, "is not a tool's name"},
		{"tool too long", broker.Request{ID: "r1", Tool: strings.Repeat("a", 65), Variant: -1}, "is not a tool's name"},
		{"id with words", broker.Request{ID: "r1 from h5", Tool: "system_logs", Variant: -1}, "request id"},
		{"bad variant", broker.Request{ID: "r1", Tool: "system_logs", Variant: -7}, "variant"},
		{"host named", broker.Request{ID: "r1", Host: "h5", Tool: "system_logs", Variant: 0}, ""},
		{"yolo", broker.Request{ID: "r1", Host: "h5", Tool: "anything at all", Yolo: true}, ""},
	} {
		a, b := net.Pipe()
		got := make(chan *broker.Incoming, 1)
		go func() {
			in, err := broker.Receive(context.Background(), b)
			if err != nil {
				if !errors.Is(err, broker.ErrBadRequest) {
					t.Errorf("%s: Receive: %v, want ErrBadRequest", c.name, err)
				}
				b.Close()
			}
			got <- in
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req := c.req
		if c.reason == "" {
			go func() { broker.Ask(ctx, a, &req) }()
			in := <-got
			if in == nil {
				t.Errorf("%s: refused", c.name)
			} else if in.Req.Host != "" || in.Req.Check() != nil {
				t.Errorf("%s: received %+v: a host's name kept, or a bad request", c.name, in.Req)
			}
		} else {
			_, ans, err := broker.Ask(ctx, a, &req)
			if in := <-got; in != nil {
				t.Errorf("%s: received, want refused", c.name)
			}
			if err != nil || ans.Decision != broker.Deny || !strings.Contains(ans.Reason, c.reason) {
				t.Errorf("%s: asker got %+v, %v; want denied, the reason saying %q", c.name, ans, err, c.reason)
			}
		}
		cancel()
		a.Close()
		b.Close()
	}
}
