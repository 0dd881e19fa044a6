package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"ollie/agent/backend"
)

// fakeSkills offers skills from a map of name to text.
type fakeSkills map[string]string

func (f fakeSkills) Offered() []SkillInfo {
	var out []SkillInfo
	for _, n := range []string{"apt", "systemd"} {
		if _, ok := f[n]; ok {
			out = append(out, SkillInfo{Name: n, Description: "about " + n})
		}
	}
	return out
}

func (f fakeSkills) Text(name string) (string, error) {
	if t, ok := f[name]; ok {
		return t, nil
	}
	return "", fmt.Errorf("skills: no such skill %q", name)
}

func (f fakeSkills) File(name, file string) (string, error) {
	if file == "x.sh" {
		return "echo x", nil
	}
	return "", fmt.Errorf("no file %q", file)
}

// skillJournal records the skills entries.
type skillJournal struct {
	journal
	skills [][]string
}

func (j *skillJournal) Entry(kind string, v any) error {
	if kind == "skills" {
		j.skills = append(j.skills, v.([]string))
	}
	return j.journal.Entry(kind, v)
}

func contentOf(msgs []backend.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role + ": " + m.Content + "\n")
	}
	return b.String()
}

// A scripted model loads a skill: its body reaches the next request, it
// survives a compaction, and an agent restored with it loaded lists it
// and offers it again without sending its body again.
func TestLoadSkill(t *testing.T) {
	const body = "APT-BODY: run apt-get update first."
	var history []backend.Message
	for i := range 20 {
		history = append(history, backend.Message{Role: backend.RoleUser, Content: fmt.Sprint("old question ", i)},
			backend.Message{Role: backend.RoleAssistant, Content: fmt.Sprint("old answer ", i)})
	}
	be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
		calls(call("1", LoadSkillTool, `{"name":"apt"}`)), text("loaded"),
		calls(call("2", LoadSkillTool, `{"name":"nope"}`)), text("no such"),
		calls(call("3", LoadSkillTool, `{"name":"apt","file":"x.sh"}`)), text("read"),
	}}
	j := &skillJournal{}
	a := New(Config{ID: "a", Backend: be, System: "SYSTEM", Skills: fakeSkills{"apt": body, "systemd": "S"}, Journal: j})
	runPrompt(t, a, "install curl")
	first := be.requests[0][0].Content
	if !strings.HasPrefix(first, "SYSTEM\n\n<skills>") || !strings.Contains(first, "- apt: about apt\n- systemd: about systemd\n") {
		t.Fatalf("system prompt:\n%s", first)
	}
	next := be.requests[1]
	last := next[len(next)-1]
	if last.Role != backend.RoleTool || !strings.Contains(last.Content, `<skill name="apt">`) || !strings.Contains(last.Content, body) {
		t.Fatalf("the next request ends with %+v", last)
	}
	if !strings.Contains(next[0].Content, "- apt: about apt (loaded)") {
		t.Errorf("system prompt after the load:\n%s", next[0].Content)
	}
	if got := a.LoadedSkills(); len(got) != 1 || got[0] != "apt" || len(j.skills) != 1 || j.skills[0][0] != "apt" {
		t.Fatalf("loaded %q, recorded %q", got, j.skills)
	}
	runPrompt(t, a, "load nope")
	if r := be.requests[3]; !strings.Contains(r[len(r)-1].Content, `error: skills: no such skill "nope"`) {
		t.Errorf("unknown skill: %+v", r[len(r)-1])
	}
	runPrompt(t, a, "read the file")
	if r := be.requests[5]; r[len(r)-1].Content != "echo x" {
		t.Errorf("side file: %+v", r[len(r)-1])
	}
	a.Close()

	// The history the load is buried in: compaction carries the body.
	restored := append(append([]backend.Message(nil), a.History()...), history...)
	be2 := &halfFull{script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){
		text("busy"), text("after"),
	}}}
	b := New(Config{ID: "b", Backend: be2, Skills: fakeSkills{"apt": body}, History: restored, LoadedSkills: []string{"apt"}})
	defer b.Close()
	runPrompt(t, b, "go on")
	sys := be2.requests[0][0].Content
	if !strings.Contains(sys, "- apt: about apt (loaded before olliesrv restarted") {
		t.Errorf("a restored skill is not offered again as loaded:\n%s", sys)
	}
	if n := strings.Count(contentOf(be2.requests[0]), body); n != 1 {
		t.Errorf("the body is in the first request after the restart %d times, want once (the old load, not sent again)", n)
	}
	h := b.History()
	if !strings.Contains(h[0].Content, "earlier messages were removed") || !strings.Contains(h[0].Content, body) {
		t.Fatalf("the compaction note does not carry the skill:\n%s", h[0].Content)
	}
	runPrompt(t, b, "after the compaction")
	if n := strings.Count(contentOf(be2.requests[1]), body); n != 1 {
		t.Errorf("the body is in the request after the compaction %d times, want once", n)
	}
}

// ctl's skill_load injects the text, skill_unload says it no longer
// applies, and compaction stops carrying an unloaded one.
func TestLoadSkillCtl(t *testing.T) {
	be := &script{replies: []func(context.Context, []backend.Message) (*backend.Reply, error){text("ok")}, repeat: true}
	a := New(Config{ID: "a", Backend: be, Skills: fakeSkills{"apt": "APT-BODY"}})
	defer a.Close()
	if err := a.LoadSkill("nope"); err == nil || !strings.Contains(err.Error(), `no such skill "nope"`) {
		t.Errorf("load nope: %v", err)
	}
	if err := a.LoadSkill("apt"); err != nil {
		t.Fatal(err)
	}
	h := a.History()
	if len(h) != 1 || !strings.Contains(h[0].Content, "<skill name=\"apt\">\nAPT-BODY\n</skill>") {
		t.Fatalf("history %+v", h)
	}
	if err := a.UnloadSkill("systemd"); err == nil || !strings.Contains(err.Error(), `"systemd" is not loaded (loaded: apt)`) {
		t.Errorf("unload systemd: %v", err)
	}
	if err := a.UnloadSkill("apt"); err != nil {
		t.Fatal(err)
	}
	if got := a.LoadedSkills(); len(got) != 0 {
		t.Errorf("still loaded: %q", got)
	}
	for range 10 {
		runPrompt(t, a, "q")
	}
	if _, err := a.Compact(); err != nil {
		t.Fatal(err)
	}
	if c := contentOf(a.History()); strings.Contains(c, "APT-BODY") {
		t.Errorf("an unloaded skill was carried through compaction:\n%s", c)
	}
}

// TestSystemShowsSkills: what ctl systemprompt shows is what the next
// turn sends: the profile's prompt and the skills on offer, before any
// turn has run.
func TestSystemShowsSkills(t *testing.T) {
	a := New(Config{ID: "a", System: "SYSTEM", Skills: fakeSkills{"apt": "APT-BODY", "systemd": "S"}})
	got := a.System()
	if !strings.HasPrefix(got, "SYSTEM") || !strings.Contains(got, "apt") || !strings.Contains(got, "systemd") || !strings.Contains(got, LoadSkillTool) {
		t.Errorf("System() = %q, want the profile's prompt and the skills on offer", got)
	}
	if strings.Contains(got, "APT-BODY") {
		t.Errorf("System() sends a skill's body before it is loaded: %q", got)
	}
}
