package chat

import "testing"

// The host's text for who asks is "session:  NAME (ID), agent NAME (ID)"
// (broker.Request.Prompt), each name the host's or an agent's own choice:
// only the ID that ends the line says whose request it is.
func TestAskedBy(t *testing.T) {
	const a, b = "aaaa-1111", "bbbb-2222"
	for _, c := range []struct {
		line string
		want bool
	}{
		{"  session:  s (s-id), agent a (" + a + ")", true},
		{"  session:  s (s-id), agent " + a, true}, // an agent without a name
		{"  session:  s (s-id), agent b (" + b + ")", false},
		{"  session:  s (s-id), agent " + a + " (" + b + ")", false},          // b named after a's ID
		{"  session:  s (s-id), agent x, agent " + a + " (" + b + ")", false}, // and more
		{"  session:  s (" + a + "), agent b (" + b + ")", false},             // a session with a's ID for a name
		{"  session:  x, agent y (" + a + ") (s-id), no agent: called through the session's tools", false},
		{"  session:  none: run by hand on the host (olliesrv tools run), not by an agent", false},
		{"  args:     {\"x\":\"  session:  s (s-id), agent a (" + a + ")\"}", false}, // not the session line
	} {
		text := "ollie: (unknown host) asks to run outside its sandbox\n  tool:     t\n" + c.line + "\n  request:  r\n"
		if got := askedBy(text, a); got != c.want {
			t.Errorf("askedBy(%q) = %v, want %v", c.line, got, c.want)
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
