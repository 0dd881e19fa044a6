package agent

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// deployedData points OLLIE_DATA at the repository's data directory and
// the user's configuration at an empty directory, which it returns.
func deployedData(t *testing.T) (data, config string) {
	t.Helper()
	data, err := filepath.Abs("../data")
	if err != nil {
		t.Fatal(err)
	}
	config = t.TempDir()
	t.Setenv("OLLIE_DATA", data)
	t.Setenv("XDG_CONFIG_HOME", config)
	return data, config
}

func putFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestProfileDeployed(t *testing.T) {
	data, config := deployedData(t)
	if got, want := ProfileDirs(), []string{filepath.Join(config, "ollie", "agents"), filepath.Join(data, "agents")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ProfileDirs() = %q, want %q", got, want)
	}
	names := ProfileNames()
	for _, want := range []string{"default", "coding", "ops", "orchestrator", "worker"} {
		if !slices.Contains(names, want) {
			t.Errorf("ProfileNames() = %q: no %s", names, want)
		}
	}
	for _, name := range names {
		p, err := LoadProfile(name)
		if err != nil {
			t.Errorf("LoadProfile(%q): %v", name, err)
			continue
		}
		if p.Name != name || p.File != filepath.Join(data, "agents", name+".json") {
			t.Errorf("%s: Name %q, File %q", name, p.Name, p.File)
		}
		if p.Description == "" || len(p.Prompt) == 0 {
			t.Errorf("%s: no description or no prompt", name)
		}
		// Every tool a deployed profile names is a deployed tool.
		for _, tool := range p.Tools {
			if _, err := os.Stat(filepath.Join(data, "tools", tool+".meta")); err != nil {
				t.Errorf("%s: tool %q: %v", name, tool, err)
			}
		}
	}
	if p, _ := LoadProfile("default"); p.Tools != nil {
		t.Errorf("default: tools %q, want every tool (nil)", p.Tools)
	}
}

func TestProfileOverride(t *testing.T) {
	data, config := deployedData(t)
	user := filepath.Join(config, "ollie", "agents")
	putFile(t, filepath.Join(user, "coding.json"), `{"description": "mine", "prompt": ["echo mine"], "tools": []}`)
	putFile(t, filepath.Join(user, "extra.json"), `{}`)

	p, err := LoadProfile("coding")
	if err != nil {
		t.Fatal(err)
	}
	want := &Profile{Name: "coding", File: filepath.Join(user, "coding.json"), Description: "mine",
		Prompt: []string{"echo mine"}, Tools: []string{}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("LoadProfile(coding) = %+v, want the user's file whole: %+v", p, want)
	}
	if p, err := LoadProfile("ops"); err != nil || p.File != filepath.Join(data, "agents", "ops.json") {
		t.Errorf("LoadProfile(ops) = %v, %v: want the deployed file", p, err)
	}
	names := ProfileNames()
	if !slices.Contains(names, "extra") || len(slices.Compact(slices.Clone(names))) != len(names) || !slices.IsSorted(names) {
		t.Errorf("ProfileNames() = %q: want sorted, each once, with extra", names)
	}

	// A broken file of the user's is an error, not a fallback.
	putFile(t, filepath.Join(user, "coding.json"), `{"tools": "shell"}`)
	if _, err := LoadProfile("coding"); err == nil || !strings.Contains(err.Error(), filepath.Join(user, "coding.json")) {
		t.Errorf("broken override: err = %v", err)
	}
}

func TestProfileUnknown(t *testing.T) {
	deployedData(t)
	for _, name := range []string{"nope", "../agents/coding", ""} {
		_, err := LoadProfile(name)
		if !errors.Is(err, ErrUnknownProfile) {
			t.Fatalf("LoadProfile(%q) = %v, want ErrUnknownProfile", name, err)
		}
		if !strings.Contains(err.Error(), "available: coding, default, ops, orchestrator, worker") {
			t.Errorf("error does not list the profiles: %v", err)
		}
	}
}

func TestProfileParse(t *testing.T) {
	p, err := ParseProfile("full", "full.json", []byte(`{
  "description": "everything",
  "prompt": ["echo a", "cat x.md"],
  "tools": ["shell", "file_read"],
  "model": "m1",
  "backend": "ollama",
  "maxSteps": 7,
  "spawn": true,
  "hooks": {"preTool": "guard", "postTurn": "log"}
}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Profile{Name: "full", File: "full.json", Description: "everything", Prompt: []string{"echo a", "cat x.md"},
		Tools: []string{"shell", "file_read"}, Model: "m1", Backend: "ollama", MaxSteps: 7, Spawn: true,
		Hooks: map[string]string{"preTool": "guard", "postTurn": "log"}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	p, err = ParseProfile("empty", "empty.json", []byte(" {}\n"))
	if err != nil || p.Tools != nil || p.Prompt != nil || p.Hooks != nil || p.Spawn {
		t.Errorf("{} = %+v, %v: want every field absent", p, err)
	}
}

func TestProfileStrict(t *testing.T) {
	for _, tc := range []struct {
		json  string
		line  int
		field string
		msg   string
	}{
		{`{"descripton": "x"}`, 1, "", `unknown field "descripton"`},
		{"{\n  \"maxsteps\": 3\n}", 2, "", `unknown field "maxsteps" (did you mean "maxSteps"?)`},
		{`{"model": "a", "model": "b"}`, 1, "model", "given twice (first on line 1)"},
		{`{"model": null}`, 1, "model", "null is not allowed"},
		{`{"model": 3}`, 1, "model", "must be a string, not a number"},
		{`{"model": "../../etc/passwd"}`, 1, "model", `invalid model name "../../etc/passwd": it has a .. element`},
		{`{"description": ["x"]}`, 1, "description", "must be a string, not an array"},
		{`{"prompt": "cat base.md"}`, 1, "prompt", `must be an array of shell commands, not a string`},
		{"{\n\"prompt\": [\n  \"echo a\",\n  3\n]}", 4, "prompt[1]", "must be a shell command (a string), not a number"},
		{`{"prompt": ["echo", "  "]}`, 1, "prompt[1]", "empty command"},
		{`{"tools": {"shell": true}}`, 1, "tools", "must be an array of strings, not an object"},
		{`{"tools": ["File-Read"]}`, 1, "tools[0]", `"File-Read" is not a tool name`},
		{`{"tools": ["shell", "file_read", "shell"]}`, 1, "tools[2]", `"shell" is listed twice`},
		{`{"skills": ["Apt"]}`, 1, "skills[0]", `"Apt" is not a skill name`},
		{`{"skills": ["apt", "apt"]}`, 1, "skills[1]", `"apt" is listed twice`},
		{`{"maxSteps": 0}`, 1, "maxSteps", "0 is not a whole number of model requests from 1 to 1000000"},
		{`{"maxSteps": -5}`, 1, "maxSteps", "-5 is not a whole number"},
		{`{"maxSteps": 1.5}`, 1, "maxSteps", "1.5 is not a whole number"},
		{`{"maxSteps": "10"}`, 1, "maxSteps", "must be a number, not a string"},
		{`{"hooks": ["preTool"]}`, 1, "hooks", "must be an object of hook name → shell command, not an array"},
		{"{\"hooks\": {\n  \"pretool\": \"guard\"}}", 2, "hooks", `unknown hook "pretool" (did you mean "preTool"?)`},
		{`{"hooks": {"onExit": "x"}}`, 1, "hooks", `unknown hook "onExit" (hooks are agentSpawn, preTurn, preTool, postTool, postTurn, preCompact, postCompact, turnError)`},
		{`{"hooks": {"preTool": true}}`, 1, "hooks.preTool", "must be a shell command (a string), not a boolean"},
		{`{"hooks": {"preTool": " "}}`, 1, "hooks.preTool", "empty command"},
		{`{"hooks": {"preTool": "a", "preTool": "b"}}`, 1, "hooks.preTool", "given twice"},
		{`[]`, 1, "", "must be a JSON object of fields (description, prompt, tools, model, backend, maxSteps, spawn, hooks, skills)"},
		{`{"spawn": "yes"}`, 1, "spawn", "must be true or false"},
		{`{"spawn": 1}`, 1, "spawn", "must be true or false"},
		{"{\n\"model\": \n}", 2, "model", "invalid JSON"},
		{`{"model": "m"`, 1, "", "invalid JSON: the text ends early"},
		{``, 1, "", "invalid JSON: the text ends early"},
		{`{} {}`, 1, "", "unexpected text after the closing brace"},
	} {
		_, err := ParseProfile("p", "/etc/p.json", []byte(tc.json))
		var pe *ProfileError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want a *ProfileError", tc.json, err)
			continue
		}
		if pe.File != "/etc/p.json" || pe.Line != tc.line || pe.Field != tc.field || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s:\n got %q (line %d, field %q)\nwant line %d, field %q, %q", tc.json, err, pe.Line, pe.Field, tc.line, tc.field, tc.msg)
		}
		if !strings.HasPrefix(err.Error(), "agent: /etc/p.json:") {
			t.Errorf("%s: %q does not begin with the file", tc.json, err)
		}
	}
}
