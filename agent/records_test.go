package agent

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"testing"

	"ollie/agent/backend"
)

// Every change the namespace records comes back from the file as it went
// in: the writer's type is the reader's, so a kind or a field cannot be
// written one way and read another.
func TestChangesRestore(t *testing.T) {
	dir := t.TempDir()
	s, err := NewSessions(nil).Create(SessionOptions{Name: "first", Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := CreateSessionLog(dir, s)
	if err != nil {
		t.Fatal(err)
	}
	goal := "ship it"
	for _, c := range []Change{
		SessionRenamed{Name: "second"},
		SessionPaused{Paused: true},
		GoalSet{Goal: &goal, Status: "working"},
		GoalSet{Status: "done"},
		AgentMeta{ID: "a1", Name: "one", Cwd: dir, Model: "m0", Profile: "default"},
		AgentMeta{ID: "a2", Name: "two", Cwd: dir},
		AgentMeta{ID: "a3", Name: "three", Cwd: dir},
		AgentRenamed{Agent: "a1", Name: "uno"},
		AgentModelSet{Agent: "a1", Model: "m1"},
		AgentPlanSet{Agent: "a1", Plan: "1. look\n2. fix\n"},
		AgentProfileSet{Agent: "a1", Profile: "orchestrator"},
		AgentToolsSet{Agent: "a1", Tools: []string{"shell", "read"}},
		AgentPeered{Agent: "a1", Peer: "a2", Add: true},
		AgentPeered{Agent: "a1", Peer: "a3", Add: true},
		AgentPeered{Agent: "a3", Peer: "a1", Add: false},
		AgentKilled{Agent: "a3"},
	} {
		if err := l.Record(c); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}
	j := l.Journal("a1")
	for _, list := range [][]string{{"apt"}, {"apt", "systemd"}, {"systemd"}} {
		if err := j.Entry("skills", list); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	got, damaged := RestoreSessions(dir)
	if len(damaged) > 0 || len(got) != 1 {
		t.Fatalf("restored %d sessions, damaged %v", len(got), damaged)
	}
	rs := got[0]
	defer rs.Log.Close()
	if rs.Meta.Name != "second" || !rs.Paused || rs.Goal != goal || rs.GoalStatus != "done" {
		t.Errorf("session: name %q paused %v goal %q status %q", rs.Meta.Name, rs.Paused, rs.Goal, rs.GoalStatus)
	}
	if len(rs.Agents) != 2 {
		t.Fatalf("agents: %d, want a1 and a2 (a3 was killed)", len(rs.Agents))
	}
	a := rs.Agents[0]
	want := RestoredAgent{
		AgentMeta: AgentMeta{ID: "a1", Name: "uno", Cwd: dir, Model: "m1", Profile: "orchestrator"},
		Plan:      "1. look\n2. fix\n",
		Tools:     []string{"shell", "read"},
		Skills:    []string{"systemd"},
		Peers:     map[string]bool{"a2": true},
	}
	a.Chat, a.History = "", nil
	if !reflect.DeepEqual(*a, want) {
		t.Errorf("agent a1:\n got %+v\nwant %+v", *a, want)
	}
	if p := rs.Agents[1].Peers; !reflect.DeepEqual(p, map[string]bool{"a1": true}) {
		t.Errorf("agent a2's peers: %v, want a1 only", p)
	}
}

// A stop between a prompt's dequeue and its first message (seen in the
// heal drill: prompt 31 of 80 was never answered, and the turn before it
// answered twice) leaves the prompt queued, first, and no turn cut; the
// restart's second dequeue takes that same prompt again (a later restore
// once lost the prompt after it: 35 of 80); a turn that ends without a
// message (a pre-turn hook refused it) used its prompt.
func TestDequeuedNotBegunStaysQueued(t *testing.T) {
	type entry struct {
		kind string
		v    any
	}
	user := func(p string) entry { return entry{"message", backend.Message{Role: backend.RoleUser, Content: p}} }
	answer := func(p string) entry {
		return entry{"message", backend.Message{Role: backend.RoleAssistant, Content: "answer to " + p}}
	}
	prompts := []entry{{"prompt", "prompt 30"}, {"prompt", "prompt 31"}, {"prompt", "prompt 32"}}
	for _, c := range []struct {
		name    string
		entries []entry
		want    []string
	}{
		{"stop after the dequeue", []entry{
			{"dequeue", nil}, user("prompt 30"), answer("prompt 30"), {"end", ""},
			{"dequeue", nil}, // prompt 31, then the stop
		}, []string{"prompt 31", "prompt 32"}},
		{"the restart took it again", []entry{
			{"dequeue", nil}, // prompt 30, then the stop
			{"dequeue", nil}, user("prompt 30"), answer("prompt 30"), {"end", ""},
		}, []string{"prompt 31", "prompt 32"}},
		{"stopped twice before it began", []entry{
			{"dequeue", nil}, {"dequeue", nil}, {"dequeue", nil},
		}, []string{"prompt 30", "prompt 31", "prompt 32"}},
		{"refused before its message", []entry{
			{"dequeue", nil}, {"end", "not run: the hook said no"},
		}, []string{"prompt 31", "prompt 32"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := NewSessions(nil).Create(SessionOptions{Name: "s", Cwd: dir})
			if err != nil {
				t.Fatal(err)
			}
			l, err := CreateSessionLog(dir, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Record(AgentMeta{ID: "a1", Name: "one", Cwd: dir}); err != nil {
				t.Fatal(err)
			}
			j := l.Journal("a1")
			for _, e := range append(slices.Clone(prompts), c.entries...) {
				if err := j.Entry(e.kind, e.v); err != nil {
					t.Fatalf("%s: %v", e.kind, err)
				}
			}
			l.Close()
			got, damaged := RestoreSessions(dir)
			if len(damaged) > 0 || len(got) != 1 || len(got[0].Agents) != 1 {
				t.Fatalf("restored %v, damaged %v", got, damaged)
			}
			defer got[0].Log.Close()
			a := got[0].Agents[0]
			if !reflect.DeepEqual(a.Queue, c.want) || a.Interrupted {
				t.Errorf("queue %q, interrupted %v; want %q and no turn cut", a.Queue, a.Interrupted, c.want)
			}
		})
	}
}

// A model's message asking for tool calls reaches the file in one commit
// with the first call's intent (one fsync before the tool runs, not two),
// and a message held so goes with whatever is committed first otherwise.
// Restored, the history and the pending call are as before.
func TestToolCallMessageCommitsWithIntent(t *testing.T) {
	dir, l, j, lines := journalRig(t)
	ask := backend.Message{Role: backend.RoleAssistant, ToolCalls: []backend.ToolCall{{ID: "c1", Name: "echo", Args: []byte(`{}`)}}}
	before := lines()
	if err := j.Entry("message", ask); err != nil {
		t.Fatal(err)
	}
	if lines() != before {
		t.Fatal("the message asking for a call was committed alone")
	}
	if err := j.Intent("a1/c1#1", "echo", []byte(`{}`), false); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != before+1 {
		t.Fatalf("the message and the intent took %d commits, want 1", n-before)
	}
	// Held, then a prompt comes first: both in the prompt's commit.
	if err := j.Entry("message", ask); err != nil {
		t.Fatal(err)
	}
	if err := j.Entry("prompt", "meanwhile"); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != before+2 {
		t.Fatalf("the held message and the prompt took %d commits, want 1", n-before-1)
	}
	l.Close()

	got, damaged := RestoreSessions(dir)
	if len(damaged) > 0 || len(got) != 1 || len(got[0].Agents) != 1 {
		t.Fatalf("restored %+v, damaged %v", got, damaged)
	}
	defer got[0].Log.Close()
	a := got[0].Agents[0]
	// Each ask, then the result a restart gives a call it cut.
	if len(a.History) != 4 || len(a.History[0].ToolCalls) != 1 || a.History[1].Role != backend.RoleTool ||
		len(a.History[2].ToolCalls) != 1 || a.History[3].Role != backend.RoleTool {
		t.Errorf("restored history %+v", a.History)
	}
	if len(a.Queue) != 1 || a.Queue[0] != "meanwhile" {
		t.Errorf("restored queue %q", a.Queue)
	}
}

// The settlement of an agent's last running call goes in one commit with
// the call's result message; one of several running goes at once, so that
// no result waits on another call's run; and a settlement by a journal
// that did not record the intent (a restart's re-run) goes at once.
func TestLastSettlementCommitsWithResult(t *testing.T) {
	_, l, j, lines := journalRig(t)
	defer l.Close()
	for _, id := range []string{"a1/c1#1", "a1/c2#1"} {
		if err := j.Intent(id, "echo", []byte(`{}`), false); err != nil {
			t.Fatal(err)
		}
	}
	n := lines()
	if err := j.Settle("a1/c1#1", "one"); err != nil || lines() != n+1 {
		t.Fatalf("a settlement while another call runs: %v, %d commits, want 1 at once", err, lines()-n)
	}
	if err := j.Settle("a1/c2#1", "two"); err != nil || lines() != n+1 {
		t.Fatalf("the last call's settlement: %v, %d commits, want it held", err, lines()-n-1)
	}
	result := backend.Message{Role: backend.RoleTool, ToolCallID: "c2", Name: "echo", Content: "two"}
	if err := j.Entry("message", result); err != nil || lines() != n+2 {
		t.Fatalf("the result's message: %v, %d commits, want 1 with the settlement", err, lines()-n-1)
	}
	if p := l.st.Pending(); len(p) != 0 {
		t.Errorf("pending after both settled: %v", p)
	}

	if err := j.Intent("a1/c3#1", "echo", []byte(`{}`), false); err != nil {
		t.Fatal(err)
	}
	n = lines()
	if err := l.Journal("a1").Settle("a1/c3#1", "re-run"); err != nil || lines() != n+1 {
		t.Fatalf("a settlement by another journal: %v, %d commits, want 1 at once", err, lines()-n)
	}
}

// journalRig is a session file in a fresh directory with agent a1 and its
// journal, and how many lines (commits) the file holds.
func journalRig(t *testing.T) (dir string, l *SessionLog, j Journal, lines func() int) {
	t.Helper()
	dir = t.TempDir()
	s, err := NewSessions(nil).Create(SessionOptions{Name: "s", Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	if l, err = CreateSessionLog(dir, s); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(AgentMeta{ID: "a1", Name: "one", Cwd: dir}); err != nil {
		t.Fatal(err)
	}
	lines = func() int {
		b, err := os.ReadFile(l.Path())
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte("\n"))
	}
	return dir, l, l.Journal("a1"), lines
}
