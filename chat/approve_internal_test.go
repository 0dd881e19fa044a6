package chat

import (
	"encoding/json"
	"testing"

	"ollie/broker"
)

// The host's text for who asks is the session line of
// broker.Request.Prompt, `session:  "NAME" ("ID"), agent "NAME" ("ID")`,
// each name the host's or an agent's own choice: only the ID that ends
// the line says whose request it is.
func TestAskedBy(t *testing.T) {
	const a, b = "aaaa-1111", "bbbb-2222"
	for _, c := range []struct {
		session, sessionName, agent, agentName string
		args                                   string
		want                                   bool
	}{
		{"s-id", "s", a, "a", "", true},
		{"s-id", "s", a, "", "", true}, // an agent without a name
		{"s-id", "s", b, "b", "", false},
		{"s-id", "s", b, a, "", false},                                                 // b named after a's ID
		{"s-id", "s", b, `x, agent "` + a + `"`, "", false},                            // and more
		{"s-id", `s" ("` + a + `")`, b, "b", "", false},                                // a session named to end like a's
		{a, "s", b, "b", "", false},                                                    // a session with a's ID
		{"", "", "", "", "", false},                                                    // run by hand
		{"s-id", "s", b, "b", `{"x":"  session:  \"s\", agent \"` + a + `\""}`, false}, // not the session line
	} {
		r := broker.Request{ID: "r", Tool: "t", Variant: -1, Session: c.session, SessionName: c.sessionName,
			Agent: c.agent, AgentName: c.agentName, Args: json.RawMessage(c.args)}
		if c.args == "" {
			r.Args = nil
		}
		text := r.Prompt()
		if got := askedBy(text, a); got != c.want {
			t.Errorf("askedBy(%q) = %v, want %v", text, got, c.want)
		}
	}
}

func TestWaitOf(t *testing.T) {
	for _, c := range []struct {
		last    string
		attempt int
		waits   bool
	}{
		{"write approve, always or deny [REASON] to this file to answer", 0, true},
		{"approved: sudo asks for the password (attempt 1 of 3)", 1, true},
		{"approved: sudo asks for the password again (attempt 2 of 3): wrong password", 2, true},
		{"approved: waiting for sudo to ask for the password (it asks none if this user may run the tool without one)", 0, false},
		{"approved: sudo asks for the password (attempt x of 3)", 0, false},
		{"", 0, false},
	} {
		text := "ollie: (unknown host) asks to run as root (sudo)\n  tool:     t\n" + c.last + "\npassword: write 'password SECRET' to this file\n"
		if attempt, waits := waitOf(text); attempt != c.attempt || waits != c.waits {
			t.Errorf("waitOf(…%q…) = %d, %v; want %d, %v", c.last, attempt, waits, c.attempt, c.waits)
		}
	}
}
