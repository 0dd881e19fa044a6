package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"ollie/agent/backend"
	"ollie/toolsrv/tool"
)

// LoadSkillTool is the one tool the loop answers itself rather than
// through Tools: reading a skill is reading the agent's own instructions,
// not work on the host, and its effect (the skill loaded) is the agent's
// state, recorded as such.
const LoadSkillTool = "load_skill"

// SkillInfo is a skill as the system prompt offers it.
type SkillInfo struct {
	Name        string
	Description string
}

// Skills is how an agent reaches the skills its host offers; host
// hands it one over package skills, which the loop does not link.
type Skills interface {
	// Offered lists the skills on offer on the host now.
	Offered() []SkillInfo
	// Text is what the model reads of a skill on offer: its body and the
	// files beside it; the error of one not on offer says why.
	Text(name string) (string, error)
	// File is one file beside a skill, by the path Text lists.
	File(name, file string) (string, error)
}

// loadedSkill is a skill the agent loaded. Its text is empty for one
// restored from the session file: after a restart a skill is listed as
// loaded and offered again, not sent again.
type loadedSkill struct {
	name, text string
}

var loadSkillParams = json.RawMessage(`{"type":"object","properties":{` +
	`"name":{"type":"string","description":"The skill's name, as the system prompt lists it."},` +
	`"file":{"type":"string","description":"Optional: a file beside the skill, by the path the skill lists, to read instead of the skill."}},` +
	`"required":["name"],"additionalProperties":false}`)

func loadSkillDecl() tool.FunctionDecl {
	return tool.FunctionDecl{Name: LoadSkillTool, Scope: "read", Tier: tool.TierHot, Parameters: loadSkillParams,
		Description: "Read a skill: instructions for a kind of work on this host (the system prompt lists those on offer). Load one before work it covers; its text stays with you until it is unloaded."}
}

// skillBlock is a loaded skill's text as the model sees it. Compaction
// looks for its first line to tell whether the text is still in the
// history.
func skillBlock(name, text string) string {
	return skillHead(name) + strings.TrimSpace(text) + "\n</skill>"
}

func skillHead(name string) string { return fmt.Sprintf("<skill name=%q>\n", name) }

// LoadedSkills lists the skills the agent has loaded, oldest first.
func (a *Agent) LoadedSkills() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.skillNames()
}

// skillNames is LoadedSkills with a.mu held.
func (a *Agent) skillNames() []string {
	names := make([]string, len(a.skills))
	for i, s := range a.skills {
		names[i] = s.name
	}
	return names
}

// setSkills records the list of loaded skills, then makes it the agent's;
// a.mu is held.
func (a *Agent) setSkills(list []loadedSkill) error {
	names := make([]string, len(list))
	for i, s := range list {
		names[i] = s.name
	}
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Entry("skills", names); err != nil {
			return fmt.Errorf("agent: the skills were not changed: %w", err)
		}
	}
	a.skills = list
	return nil
}

// LoadSkill loads a skill on offer for the agent, outside any turn (ctl
// skill_load, a profile's preloads): its text joins the history as a user
// message, recorded, as inject does. It is refused while a turn runs, so
// that no message comes between a tool call and its result.
func (a *Agent) LoadSkill(name string) error {
	if a.cfg.Skills == nil {
		return fmt.Errorf("agent: no skills are offered to this agent")
	}
	text, err := a.cfg.Skills.Text(name)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		return ErrBusy
	}
	list := slices.DeleteFunc(slices.Clone(a.skills), func(s loadedSkill) bool { return s.name == name })
	if err := a.setSkills(append(list, loadedSkill{name: name, text: text})); err != nil {
		return err
	}
	m := backend.Message{Role: backend.RoleUser, Content: "The skill " + name + " was loaded for you:\n" + skillBlock(name, text)}
	if a.cfg.Journal != nil {
		if err := a.cfg.Journal.Entry("message", m); err != nil {
			return fmt.Errorf("agent: the skill was listed as loaded but its text is not recorded: %w", err)
		}
	}
	a.history = append(a.history, m)
	return nil
}

// UnloadSkill unloads a loaded skill: the model is told its instructions
// no longer apply, and compaction stops carrying its text.
func (a *Agent) UnloadSkill(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		return ErrBusy
	}
	if !slices.Contains(a.skillNames(), name) {
		have := "none"
		if len(a.skills) > 0 {
			have = strings.Join(a.skillNames(), ", ")
		}
		return fmt.Errorf("agent: the skill %q is not loaded (loaded: %s)", name, have)
	}
	list := slices.DeleteFunc(slices.Clone(a.skills), func(s loadedSkill) bool { return s.name == name })
	if err := a.setSkills(list); err != nil {
		return err
	}
	m := backend.Message{Role: backend.RoleUser, Content: "[The skill " + name + " was unloaded: its instructions no longer apply.]"}
	if a.cfg.Journal != nil {
		a.cfg.Journal.Entry("message", m)
	}
	a.history = append(a.history, m)
	return nil
}

// refreshOffer takes the skills on offer for the turn about to run, so
// that its requests share one system prompt.
func (a *Agent) refreshOffer() {
	var offered []SkillInfo
	if a.cfg.Skills != nil {
		offered = a.cfg.Skills.Offered()
	}
	a.mu.Lock()
	a.offered = offered
	a.mu.Unlock()
}

// skillPrompt is the system prompt's part on skills; a.mu is held.
func (a *Agent) skillPrompt() string {
	if len(a.offered) == 0 && len(a.skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n<skills>\nSkills on offer on this host: instructions for a kind of work. Before work one covers, call " + LoadSkillTool + " with its name to read it.\n")
	loaded := map[string]loadedSkill{}
	for _, s := range a.skills {
		loaded[s.name] = s
	}
	for _, s := range a.offered {
		fmt.Fprintf(&b, "- %s: %s", s.Name, s.Description)
		if l, ok := loaded[s.Name]; ok && l.text != "" {
			b.WriteString(" (loaded)")
		} else if ok {
			b.WriteString(" (loaded before olliesrv restarted: load it again if its text is no longer in the conversation)")
		}
		b.WriteByte('\n')
	}
	b.WriteString("</skills>")
	return b.String()
}

// loadSkillCall answers a load_skill call of the model's.
func (a *Agent) loadSkillCall(args json.RawMessage) *tool.Result {
	fail := func(format string, v ...any) *tool.Result {
		return &tool.Result{Tool: LoadSkillTool, Failed: true, ExitCode: -1, Output: fmt.Sprintf(format, v...)}
	}
	var req struct {
		Name string `json:"name"`
		File string `json:"file"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Name == "" {
		return fail(`not run: %s takes {"name": SKILL} and optionally "file" (%v)`, LoadSkillTool, err)
	}
	if req.File != "" {
		text, err := a.cfg.Skills.File(req.Name, req.File)
		if err != nil {
			return fail("%v", err)
		}
		return &tool.Result{Tool: LoadSkillTool, Output: text}
	}
	text, err := a.cfg.Skills.Text(req.Name)
	if err != nil {
		return fail("%v", err)
	}
	a.mu.Lock()
	list := slices.DeleteFunc(slices.Clone(a.skills), func(s loadedSkill) bool { return s.name == req.Name })
	err = a.setSkills(append(list, loadedSkill{name: req.Name, text: text}))
	a.mu.Unlock()
	if err != nil {
		return fail("%v", err)
	}
	return &tool.Result{Tool: LoadSkillTool, Output: skillBlock(req.Name, text)}
}

// skillTexts is the text of every loaded skill, for compaction: what the
// agent holds, or for a skill restored after a restart, its text now.
func (a *Agent) skillTexts() []loadedSkill {
	a.mu.Lock()
	list := slices.Clone(a.skills)
	a.mu.Unlock()
	for i, s := range list {
		if s.text == "" && a.cfg.Skills != nil {
			list[i].text, _ = a.cfg.Skills.Text(s.name)
		}
	}
	return list
}

// keepSkills carries the loaded skills through a compaction: the text of
// each one whose text the kept messages no longer hold joins the note that
// replaced the others. out is what compactHistory made of h.
func keepSkills(h, out []backend.Message, loaded []loadedSkill) []backend.Message {
	if len(out) == len(h) || len(out) == 0 || len(loaded) == 0 {
		return out
	}
	var b strings.Builder
	for _, s := range loaded {
		kept := false
		for _, m := range out[1:] {
			kept = kept || strings.Contains(m.Content, skillHead(s.name))
		}
		if kept || s.text == "" {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nSkills you loaded, kept through the compaction:\n")
		}
		b.WriteString(skillBlock(s.name, s.text) + "\n")
	}
	if b.Len() == 0 {
		return out
	}
	out = slices.Clone(out)
	out[0].Content += b.String()
	return out
}
