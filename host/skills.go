package host

import (
	"context"
	"fmt"
	"strings"

	"ollie/agent"
	"ollie/ns"
	"ollie/skills"
)

// hostSkills is an agent's way to this host's skills (agent.Skills), read
// again at each use, so that a deploy or an edit of ~/.config/ollie/skills
// shows at the next turn without a restart.
type hostSkills struct{ cat skills.Catalog }

func (h hostSkills) Offered() []agent.SkillInfo {
	var out []agent.SkillInfo
	for _, s := range h.cat.Offered() {
		out = append(out, agent.SkillInfo{Name: s.Name, Description: s.Description})
	}
	return out
}

func (h hostSkills) Text(name string) (string, error) {
	s, err := h.cat.Lookup(name)
	if err != nil {
		return "", err
	}
	return s.Text(), nil
}

func (h hostSkills) File(name, file string) (string, error) {
	s, err := h.cat.Lookup(name)
	if err != nil {
		return "", err
	}
	return s.ReadFile(file)
}

// skillsOf is the skills an agent of this namespace is offered.
func (n *namespace) skillsOf() agent.Skills { return hostSkills{skills.Local()} }

// hostSkillList is the root skills file: every skill found on this host,
// whether it is offered and why, as `olliesrv tools` explains variants.
func (n *namespace) hostSkillList(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, e := range skills.Local().Resolve() {
		desc := "-"
		if e.Skill != nil {
			desc = e.Skill.Description
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", e.Name, e.Status, oneField(e.Reason()), oneField(desc))
	}
	return []byte(b.String()), nil
}

// oneField keeps a value on its line and in its column.
func oneField(s string) string {
	return strings.NewReplacer("\t", " ", "\n", "; ").Replace(s)
}

// agentSkills is an agent's skills file: the skills it has loaded.
func agentSkills(e *agentEntry) string {
	var b strings.Builder
	for _, name := range e.LoadedSkills() {
		b.WriteString(name + "\n")
	}
	return b.String()
}

// skillCtl is ctl's skill_load and skill_unload.
func skillCtl(c *ns.Call, e *agentEntry, verb, name string) ([]byte, error) {
	if name == "" {
		return nil, fmt.Errorf("%s: %s needs a skill name (the host's are in /skills)", c.Path(), verb)
	}
	var err error
	if verb == "skill_load" {
		err = e.LoadSkill(name)
	} else {
		err = e.UnloadSkill(name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.Path(), verb, err)
	}
	return []byte(agentSkills(e)), nil
}

// preloadSkills loads the skills the agent's profile names, once the agent
// is recorded; one the host does not offer is noted in the chat, not an
// error, since one profile serves hosts that differ.
func preloadSkills(e *agentEntry, names []string) {
	for _, name := range names {
		if err := e.LoadSkill(name); err != nil {
			e.Note(fmt.Sprintf("the profile's skill %s was not loaded: %v", name, err))
		}
	}
}
