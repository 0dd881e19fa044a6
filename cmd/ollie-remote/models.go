package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"ollie/agent/backend"
	"ollie/internal/paths"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

// A modelRule says where the agents of some hosts get their model, in
// ~/.config/ollie/models.yaml: the first rule a host matches wins.
type modelRule struct {
	Hosts      string `yaml:"hosts"` // a host name or pattern, as -H takes it
	Group      string `yaml:"group"` // or an inventory group (fleet run -i)
	Via        string `yaml:"via"`   // host, desktop or desktop:BACKEND
	Model      string `yaml:"model"`
	Concurrent int    `yaml:"concurrent"`
	RunTokens  int    `yaml:"run_tokens"`
	line       int
}

// modelsFile is the desktop's rules file.
func modelsFile() string {
	dir, ok := paths.UserDir("")
	if !ok {
		return ""
	}
	return filepath.Join(dir, "models.yaml")
}

// loadModelRules reads the rules; none when the file does not exist.
// Errors name the file, the line and what is wrong.
func loadModelRules(file string) ([]modelRule, error) {
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
	var nodes []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
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
	nodes = append(nodes, doc.Content[0].Content...)
	var rules []modelRule
	for _, n := range nodes {
		var r modelRule
		// Strict: an unknown key is a mistake, not a comment.
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch k := n.Content[i].Value; k {
			case "hosts", "group", "via", "model", "concurrent", "run_tokens":
			default:
				return nil, fmt.Errorf("%s:%d: unknown key %q (hosts, group, via, model, concurrent, run_tokens)", file, n.Content[i].Line, k)
			}
		}
		if err := n.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, n.Line, err)
		}
		r.line = n.Line
		switch {
		case (r.Hosts == "") == (r.Group == ""):
			return nil, fmt.Errorf("%s:%d: a rule names hosts: or group:, one of them", file, r.line)
		case r.Via != "host" && r.Via != "desktop" && !strings.HasPrefix(r.Via, "desktop:"):
			return nil, fmt.Errorf("%s:%d: via %q: want host, desktop or desktop:BACKEND", file, r.line, r.Via)
		case r.Concurrent < 0 || r.RunTokens < 0:
			return nil, fmt.Errorf("%s:%d: concurrent and run_tokens are counts, not negative", file, r.line)
		}
		if r.Hosts != "" {
			if _, err := filepath.Match(r.Hosts, ""); err != nil {
				return nil, fmt.Errorf("%s:%d: hosts %q: %v", file, r.line, r.Hosts, err)
			}
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// modelChoice is where one host's agents get their model.
type modelChoice struct {
	via, model         string // via: "" or host (the host's own), desktop[:BACKEND]
	concurrent, tokens int
	why                string // what chose it, for messages
}

// choose decides a host's model: -model-via wins, then the host's
// inventory variable ollie_model_via (and ollie_model), then the first
// rule of models.yaml it matches; else the host's own backends.
func (c *common) choose(host string, groups []string, vars map[string]string, rules []modelRule) modelChoice {
	if c.modelVia != "" {
		return modelChoice{via: c.modelVia, model: c.model, concurrent: c.modelConcurrent, tokens: c.runTokens, why: "-model-via"}
	}
	if v := vars["ollie_model_via"]; v != "" {
		return modelChoice{via: v, model: firstOf(c.model, vars["ollie_model"]), concurrent: c.modelConcurrent, tokens: c.runTokens, why: "inventory var ollie_model_via"}
	}
	for _, r := range rules {
		match := r.Group != "" && contains(groups, r.Group)
		if r.Hosts != "" {
			match, _ = filepath.Match(r.Hosts, host)
		}
		if match {
			return modelChoice{via: r.Via, model: firstOf(c.model, r.Model), concurrent: firstInt(c.modelConcurrent, r.Concurrent),
				tokens: firstInt(c.runTokens, r.RunTokens), why: fmt.Sprintf("%s:%d", modelsFile(), r.line)}
		}
	}
	return modelChoice{}
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func firstInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// route is the desktop's model a choice gives a host: a backend of this
// desktop's own configuration (backends.json and the environment), with
// its API key read here, where it stays. nil for the host's own.
func (m modelChoice) route() (*keeper.ModelsRoute, error) {
	if m.via == "" || m.via == "host" {
		return nil, nil
	}
	via, name, _ := strings.Cut(m.via, ":")
	if via != "desktop" {
		return nil, fmt.Errorf("%s: model via %q: want host, desktop, or desktop:BACKEND (a backend of this desktop's backends.json)", m.why, m.via)
	}
	reg, err := backend.Load()
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = reg.DefaultName()
	}
	cfg, ok := reg.Config(name)
	if !ok {
		return nil, fmt.Errorf("%s: model via %s: this desktop has no backend %q (it has %s; see %s)", m.why, m.via, name, strings.Join(reg.Names(), ", "), reg.Path())
	}
	if cfg.Socket != "" {
		return nil, fmt.Errorf("%s: model via %s: backend %s is itself another desktop's model", m.why, m.via, name)
	}
	url := strings.TrimRight(cfg.URL, "/")
	if cfg.Type == backend.TypeOllama {
		url = strings.TrimSuffix(url, "/v1") + "/v1"
	}
	key := ""
	if cfg.KeyEnv != "" {
		if key = strings.TrimSpace(os.Getenv(cfg.KeyEnv)); key == "" {
			return nil, fmt.Errorf("%s: model via %s: backend %s takes its API key from %s, which is not set here", m.why, m.via, name, cfg.KeyEnv)
		}
	}
	model := m.model
	if model == "" {
		model = cfg.Model
	}
	return &keeper.ModelsRoute{Upstream: models.Upstream{Name: name, URL: url, Key: key}, Model: model,
		Limits: models.Limits{Concurrent: m.concurrent, RunTokens: m.tokens}}, nil
}

// routes resolves the choices of many hosts, each distinct one once.
type routes map[modelChoice]*keeper.ModelsRoute

func (rs routes) get(m modelChoice) (*keeper.ModelsRoute, error) {
	key := m
	key.why = ""
	if r, ok := rs[key]; ok {
		return r, nil
	}
	r, err := m.route()
	if err != nil {
		return nil, err
	}
	rs[key] = r
	return r, nil
}
