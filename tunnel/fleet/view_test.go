package fleet

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"ollie/internal/await"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hostile is what a host may send as its words: escapes that would move
// the cursor, retitle the window or clear the screen.
const hostile = "\x1b]0;owned\x07\x1b[2J\x1b[1;1Hrm -rf /\r\x1b[31m"

func testRun() *Run {
	now := time.Now().UTC()
	return &Run{ID: "rabcdefgh", Session: "fleet-rabcdefgh", Goal: "check", Hosts: []*Host{
		{Name: "web1", State: "thinking", Started: now},
		{Name: "web2", State: "running shell", Started: now, Detail: "line " + hostile},
		{Name: "web3" + hostile, State: "unreachable", Result: "unreachable", Started: now, Ended: now, Detail: "dial: connection refused"},
	}}
}

// TestLiveRedrawsInPlace: the live view moves up over what it drew and
// draws every host's newest state, and a host's words never reach the
// terminal as escapes.
func TestLiveRedrawsInPlace(t *testing.T) {
	run := testRun()
	var out syncBuffer
	v := &Live{Out: &out, Run: run, Width: func() (int, int) { return 80, 20 }}
	v.Start()
	await.Until(t, 5*time.Second, "the first drawing", func() bool { return strings.Contains(out.String(), "3 hosts") })
	h := *run.Hosts[0]
	h.State, h.Result, h.Answer, h.Detail = "done", "done", "all is well", "all is well"
	v.Changed(h)
	await.Until(t, 5*time.Second, "a redraw in place with web1 done", func() bool {
		s := out.String()
		i := strings.LastIndex(s, "\x1b[4A\r")
		return i >= 0 && strings.Contains(s[i:], "all is well")
	})
	v.Stop()
	s := out.String()
	if !strings.Contains(s, "\x1b[4A\r") {
		t.Errorf("the view did not move up over its four lines to redraw:\n%q", s)
	}
	last := s[strings.LastIndex(s, "\x1b[4A\r"):]
	for _, want := range []string{"web1", "done", "all is well", "running shell", "3 hosts · 1 working · 1 done · 1 unreachable"} {
		if !strings.Contains(last, want) {
			t.Errorf("the last drawing has no %q:\n%q", want, last)
		}
	}
	for _, bad := range []string{"\x1b]0", "\x1b[2J", "\x1b[1;1H", "\x1b[31m", "\r\x1b[31m", "\x07"} {
		if strings.Contains(s, bad) {
			t.Errorf("a host's escape %q reached the terminal:\n%q", bad, s)
		}
	}
	for _, line := range strings.Split(strings.ReplaceAll(last, "\x1b[2K", ""), "\n") {
		line = strings.TrimPrefix(line, "\x1b[4A\r")
		if n := utf8.RuneCountInString(line); n >= 80 {
			t.Errorf("a line of %d characters on a terminal 80 wide would wrap: %q", n, line)
		}
	}
}

// TestViewLinesWorkingFirst: more hosts than rows show the working ones,
// then how many more there are.
func TestViewLinesWorkingFirst(t *testing.T) {
	var hosts []Host
	for i := range 30 {
		h := Host{Name: "h" + string(rune('a'+i%26)) + string(rune('a'+i/26)), State: "done", Result: "done"}
		if i == 25 {
			h.State, h.Result = "thinking", ""
		}
		hosts = append(hosts, h)
	}
	lines := viewLines(hosts, time.Now(), 80, 10)
	if len(lines) != 10 {
		t.Fatalf("%d lines on 10 rows:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "thinking") {
		t.Errorf("the working host is not first: %q", lines[0])
	}
	if lines[8] != "… and 22 more hosts" || lines[9] != "30 hosts · 1 working · 29 done" {
		t.Errorf("the last lines are %q", lines[8:])
	}
}

// TestLinesAndChat: a line per change of state, none for the same state
// again; chat lines only with Chat, prefixed by the host and made safe.
func TestLinesAndChat(t *testing.T) {
	run := testRun()
	var out bytes.Buffer
	v := &Lines{Out: &out, Chat: true}
	v.Width(run)
	v.Changed(*run.Hosts[0])
	v.Changed(*run.Hosts[0])
	v.Output("web2", "hello "+hostile)
	done := *run.Hosts[0]
	done.Result, done.State, done.Answer = "complete", "complete", "disk is fine\nmore"
	v.Changed(done)
	s := out.String()
	if strings.Count(s, "[thinking]") != 1 {
		t.Errorf("a state seen twice printed twice:\n%s", s)
	}
	if !strings.Contains(s, "| hello ") || strings.Contains(s, "\x1b") {
		t.Errorf("the chat line is missing or not made safe:\n%q", s)
	}
	if !strings.Contains(s, "[complete in ") || !strings.Contains(s, "] disk is fine\n") || strings.Contains(s, "more") {
		t.Errorf("the end of a host should print its result and the answer's first line:\n%s", s)
	}
	// A prompt on the terminal holds the lines back, then they come.
	out.Reset()
	v.Pause()
	v.Output("web1", "during the prompt")
	if out.Len() != 0 {
		t.Errorf("a line was printed over a prompt: %q", out.String())
	}
	v.Resume()
	if !strings.Contains(out.String(), "| during the prompt") {
		t.Errorf("the line held during the prompt was lost: %q", out.String())
	}
	out.Reset()
	quiet := &Lines{Out: &out}
	quiet.Output("web1", "chat")
	if out.Len() != 0 {
		t.Errorf("without Chat a chat line was printed: %q", out.String())
	}
}

// TestResults: the table has a row per host with the answer's first line
// or the error, the notes below; the JSON an object per host; the exit
// code is 1 while any host did not finish.
func TestResults(t *testing.T) {
	run := testRun()
	run.Hosts[0].Result, run.Hosts[0].Answer, run.Hosts[0].Steps, run.Hosts[0].ToolCalls, run.Hosts[0].Tokens = "complete", "cleaned 2 GB\ndetails", 3, 2, 1234
	run.Hosts[1].Result, run.Hosts[1].Detail = "lost", "unreachable for 2m"
	run.Hosts[1].Notes = []string{"degraded: ssh host ollie needs .local/bin/ollie " + hostile}
	var table bytes.Buffer
	WriteTable(&table, run)
	s := table.String()
	if strings.Contains(s, "\x1b") {
		t.Errorf("the table carries a host's escapes:\n%q", s)
	}
	for _, want := range []string{"HOST", "ANSWER OR ERROR", "web1", "complete", "1234", "cleaned 2 GB", "lost", "unreachable for 2m", "web2: degraded: ssh host ollie needs .local/bin/ollie"} {
		if !strings.Contains(s, want) {
			t.Errorf("the table has no %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "details") {
		t.Errorf("the table shows more than the answer's first line:\n%s", s)
	}
	var js bytes.Buffer
	WriteJSON(&js, run)
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSON lines for 3 hosts:\n%s", len(lines), js.String())
	}
	var j JSONHost
	if err := json.Unmarshal([]byte(lines[1]), &j); err != nil || j.Host != "web2" || j.Result != "lost" || j.Error != "unreachable for 2m" || len(j.Notes) != 1 {
		t.Errorf("web2's JSON: %+v %v", j, err)
	}
	if ExitCode(run) != 1 {
		t.Error("a run with a lost host exits 0")
	}
	for _, h := range run.Hosts {
		h.Result = "done"
	}
	if ExitCode(run) != 0 {
		t.Error("a run where every host is done does not exit 0")
	}
}

// TestStore: runs are kept, listed newest first, found by a prefix of
// their ID, and a bad ID names what is wrong.
func TestStore(t *testing.T) {
	s := Store{Dir: t.TempDir() + "/runs"}
	a := NewRun("first", []string{"web*"}, []*Host{{Name: "web1"}})
	b := NewRun("second", []string{"db1"}, []*Host{{Name: "db1"}})
	b.Created = a.Created.Add(time.Second)
	for _, r := range []*Run{a, b} {
		if err := s.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := s.List()
	if err != nil || len(runs) != 2 || runs[0].ID != b.ID {
		t.Fatalf("List = %v, %v; want both, newest first", runs, err)
	}
	got, err := s.Load(a.ID[:6])
	if err != nil && strings.Contains(err.Error(), "ambiguous") {
		got, err = s.Load(a.ID)
	}
	if err != nil || got.Goal != "first" || got.Hosts[0].Name != "web1" || got.Session != "fleet-"+a.ID {
		t.Errorf("Load(%s) = %+v, %v", a.ID[:6], got, err)
	}
	if _, err := s.Load("../../etc/passwd"); err == nil {
		t.Error("a path was taken for a run ID")
	}
	if _, err := s.Load("rzzzzzzzz"); err == nil || !strings.Contains(err.Error(), "fleet ls") {
		t.Errorf("an unknown run: %v", err)
	}
}
