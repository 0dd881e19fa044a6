package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/nstest"
)

func writeSkill(t *testing.T, file, name, when, body string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(file), 0o755)
	text := "---\nname: " + name + "\ndescription: About " + name + ".\n" + when + "---\n" + body + "\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The host's skills in the namespace: the root file says what is offered
// and why, an agent's ctl loads and unloads them, its skills file lists
// them, and a profile preloads them.
func TestSkillsInNamespace(t *testing.T) {
	real, _ := filepath.Abs("../data")
	data, conf := t.TempDir(), t.TempDir()
	os.Symlink(filepath.Join(real, "agents"), filepath.Join(data, "agents"))
	writeSkill(t, filepath.Join(data, "skills", "shellwork.md"), "shellwork", "when:\n  binary: sh\n", "SHELLWORK-BODY")
	writeSkill(t, filepath.Join(data, "skills", "exotic", "SKILL.md"), "exotic", "when:\n  binary: ollie-no-such-binary\n", "EXOTIC-BODY")
	writeSkill(t, filepath.Join(data, "skills", "mine.md"), "mine", "", "DEPLOYED-MINE")
	writeSkill(t, filepath.Join(conf, "ollie", "skills", "mine.md"), "mine", "", "HOST-MINE")
	os.WriteFile(filepath.Join(data, "skills", "broken.md"), []byte("---\nname: broken\ncolour: red\n---\nx\n"), 0o644)
	os.MkdirAll(filepath.Join(conf, "ollie", "agents"), 0o755)
	os.WriteFile(filepath.Join(conf, "ollie", "agents", "pre.json"), []byte(`{"tools": [], "skills": ["mine", "exotic"]}`), 0o644)
	t.Setenv("OLLIE_DATA", data)
	t.Setenv("XDG_CONFIG_HOME", conf)
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())

	_, fs := modelDaemon(t, &twoStep{})
	root := nstest.ReadFile(t, fs, "skills")
	for _, want := range []string{
		"broken\tbroken\tskills: " + filepath.Join(data, "skills", "broken.md") + `:3: unknown field "colour"`,
		"exotic\tskipped\tbinary \"ollie-no-such-binary\" not found in PATH\tAbout exotic.\n",
		"mine\toffered\tno conditions\tAbout mine.\n",
		"mine\tshadowed\tshadowed by " + filepath.Join(conf, "ollie", "skills", "mine.md") + "\t-\n",
		"shellwork\toffered\tbinary \"sh\" found at ",
	} {
		if !strings.Contains(root, want) {
			t.Errorf("/skills lacks %q:\n%s", want, root)
		}
	}

	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	ctl := "session/s/agent/a/ctl"
	if got, err := nstest.RdWr(fs, ctl, "skill_load shellwork"); err != nil || got != "shellwork\n" {
		t.Fatalf("skill_load shellwork: %q %v", got, err)
	}
	if got := nstest.ReadFile(t, fs, "session/s/agent/a/skills"); got != "shellwork\n" {
		t.Errorf("skills = %q", got)
	}
	if log := nstest.ReadFile(t, fs, "session/s/agent/a/log"); !strings.Contains(log, "SHELLWORK-BODY") {
		t.Errorf("the loaded skill's text is not in the conversation:\n%s", log)
	}
	for req, want := range map[string]string{
		"skill_load nosuch":    `skill_load: skills: no such skill "nosuch" (offered: mine, shellwork)`,
		"skill_load exotic":    `skill_load: skills: "exotic" is not offered on this host (skipped: binary "ollie-no-such-binary" not found in PATH`,
		"skill_load broken":    `"broken" is not offered on this host (broken: skills:`,
		"skill_load":           "skill_load needs a skill name",
		"skill_unload mine":    `skill_unload: agent: the skill "mine" is not loaded (loaded: shellwork)`,
		"skill_unload nothing": `the skill "nothing" is not loaded`,
	} {
		if _, err := nstest.RdWr(fs, ctl, req); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant %q", req, err, want)
		}
	}
	if got, err := nstest.RdWr(fs, ctl, "skill_load mine"); err != nil || got != "shellwork\nmine\n" {
		t.Fatalf("skill_load mine: %q %v", got, err)
	}
	if log := nstest.ReadFile(t, fs, "session/s/agent/a/log"); !strings.Contains(log, "HOST-MINE") || strings.Contains(log, "DEPLOYED-MINE") {
		t.Errorf("the host's own skill did not win:\n%s", log)
	}
	if got, err := nstest.RdWr(fs, ctl, "skill_unload shellwork"); err != nil || got != "mine\n" {
		t.Errorf("skill_unload: %q %v", got, err)
	}

	// A profile's preloads: the one on offer is loaded, the other noted.
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=p profile=pre"); err != nil {
		t.Fatal(err)
	}
	if got := nstest.ReadFile(t, fs, "session/s/agent/p/skills"); got != "mine\n" {
		t.Errorf("preloaded: %q", got)
	}
	if chat := nstest.ReadFile(t, fs, "session/s/agent/p/log"); !strings.Contains(chat, "HOST-MINE") {
		t.Errorf("the preloaded skill's text is not in the conversation:\n%s", chat)
	}
	// Switching to that profile loads its skills beside the agent's own;
	// ctl systemprompt shows the skills on offer, as the model sees them.
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=q profile=default"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/q/ctl", "skill_load shellwork"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/q/ctl", "agent pre"); err != nil {
		t.Fatal(err)
	}
	if got := nstest.ReadFile(t, fs, "session/s/agent/q/skills"); got != "shellwork\nmine\n" {
		t.Errorf("after ctl agent pre: skills %q, want shellwork then the profile's mine", got)
	}
	if sys, err := nstest.RdWr(fs, "session/s/agent/q/ctl", "systemprompt"); err != nil || !strings.Contains(sys, "shellwork") || !strings.Contains(sys, "load_skill") {
		t.Errorf("ctl systemprompt does not show the skills on offer: %v\n%s", err, sys)
	}
}
