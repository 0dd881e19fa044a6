package models

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"ollie/internal/paths"
)

// A Rule says where the agents of some hosts get their model, in the
// desktop's models.yaml (RulesFile): the first rule a host matches wins.
type Rule struct {
	Hosts      string `yaml:"hosts"` // a host name or pattern, as -H takes it
	Group      string `yaml:"group"` // or an inventory group (fleet run -i)
	Via        string `yaml:"via"`   // host, desktop or desktop:BACKEND
	Model      string `yaml:"model"`
	Concurrent int    `yaml:"concurrent"`
	RunTokens  int    `yaml:"run_tokens"`
	Line       int    `yaml:"-"` // where in the file, for messages
}

// RulesFile is the desktop's rules file, ~/.config/ollie/models.yaml;
// "" when there is no home to find it in.
func RulesFile() string {
	dir, ok := paths.UserDir("")
	if !ok {
		return ""
	}
	return filepath.Join(dir, "models.yaml")
}

// LoadRules reads the rules in file; none when it does not exist. It is
// strict, since the file decides where a host's prompts go: an unknown
// key is a mistake, not a comment, and each error names the file's line.
func LoadRules(file string) ([]Rule, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	if doc.Content[0].Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: want a list of rules (- hosts: PATTERN, via: desktop:BACKEND, …)", file, doc.Content[0].Line)
	}
	var rules []Rule
	for _, n := range doc.Content[0].Content {
		r, err := parseRule(n)
		if err != nil {
			return nil, fmt.Errorf("%s:%w", file, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// parseRule reads one rule; its errors begin with the rule's line.
func parseRule(n *yaml.Node) (Rule, error) {
	var r Rule
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i].Value; k {
		case "hosts", "group", "via", "model", "concurrent", "run_tokens":
		default:
			return r, fmt.Errorf("%d: unknown key %q (hosts, group, via, model, concurrent, run_tokens)", n.Content[i].Line, k)
		}
	}
	if err := n.Decode(&r); err != nil {
		return r, fmt.Errorf("%d: %v", n.Line, err)
	}
	r.Line = n.Line
	switch {
	case (r.Hosts == "") == (r.Group == ""):
		return r, fmt.Errorf("%d: a rule names hosts: or group:, one of them", r.Line)
	case r.Via != "host" && r.Via != "desktop" && !strings.HasPrefix(r.Via, "desktop:"):
		return r, fmt.Errorf("%d: via %q: want host, desktop or desktop:BACKEND", r.Line, r.Via)
	case r.Concurrent < 0 || r.RunTokens < 0:
		return r, fmt.Errorf("%d: concurrent and run_tokens are counts, not negative", r.Line)
	}
	if r.Hosts != "" {
		if _, err := filepath.Match(r.Hosts, ""); err != nil {
			return r, fmt.Errorf("%d: hosts %q: %v", r.Line, r.Hosts, err)
		}
	}
	return r, nil
}

// A Choice is where one host's agents get their model.
type Choice struct {
	Via        string // "" or host: the host's own; desktop[:BACKEND]
	Model      string
	Concurrent int
	RunTokens  int
	Why        string // what chose it, for messages
}

// Choose decides a host's model: the command line's choice (flags, when
// its Via is set; its other fields are used whatever decides), then the
// host's inventory variable ollie_model_via (and ollie_model), then the
// first rule it matches (file names the rules' file in Why); else the
// host's own backends (the zero Choice).
func Choose(host string, groups []string, vars map[string]string, flags Choice, rules []Rule, file string) Choice {
	if flags.Via != "" {
		flags.Why = "-model-via"
		return flags
	}
	if v := vars["ollie_model_via"]; v != "" {
		return Choice{Via: v, Model: cmp.Or(flags.Model, vars["ollie_model"]), Concurrent: flags.Concurrent, RunTokens: flags.RunTokens,
			Why: "inventory var ollie_model_via"}
	}
	for _, r := range rules {
		match := r.Group != "" && slices.Contains(groups, r.Group)
		if r.Hosts != "" {
			match, _ = filepath.Match(r.Hosts, host)
		}
		if match {
			return Choice{Via: r.Via, Model: cmp.Or(flags.Model, r.Model), Concurrent: cmp.Or(flags.Concurrent, r.Concurrent),
				RunTokens: cmp.Or(flags.RunTokens, r.RunTokens), Why: fmt.Sprintf("%s:%d", file, r.Line)}
		}
	}
	return Choice{}
}
