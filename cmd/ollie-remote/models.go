package main

import (
	"cmp"
	"fmt"
	"os"
	"strings"

	"ollie/agent/backend/config"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

// choose decides a host's model from this command's flags, its
// inventory groups and variables, and the desktop's models.yaml.
func (c *common) choose(host string, groups []string, vars map[string]string, rules []models.Rule) models.Choice {
	flags := models.Choice{Via: c.modelVia, Model: c.model, Concurrent: c.modelConcurrent, RunTokens: c.runTokens}
	return models.Choose(host, groups, vars, flags, rules, models.RulesFile())
}

// route is the desktop's model a choice gives a host: a backend of this
// desktop's own configuration (backends.json and the environment), with
// its API key read here, where it stays. nil for the host's own.
func route(m models.Choice) (*keeper.ModelsRoute, error) {
	if m.Via == "" || m.Via == "host" {
		return nil, nil
	}
	via, name, _ := strings.Cut(m.Via, ":")
	if via != "desktop" {
		return nil, fmt.Errorf("%s: model via %q: want host, desktop, or desktop:BACKEND (a backend of this desktop's backends.json)", m.Why, m.Via)
	}
	reg, err := config.Load()
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = reg.DefaultName()
	}
	cfg, ok := reg.Config(name)
	if !ok {
		return nil, fmt.Errorf("%s: model via %s: this desktop has no backend %q (it has %s; see %s)", m.Why, m.Via, name, strings.Join(reg.Names(), ", "), reg.Path())
	}
	if cfg.Socket != "" {
		return nil, fmt.Errorf("%s: model via %s: backend %s is itself another desktop's model", m.Why, m.Via, name)
	}
	url := strings.TrimRight(cfg.URL, "/")
	if cfg.Type == config.TypeOllama {
		url = strings.TrimSuffix(url, "/v1") + "/v1"
	}
	key := ""
	if cfg.KeyEnv != "" {
		if key = strings.TrimSpace(os.Getenv(cfg.KeyEnv)); key == "" {
			return nil, fmt.Errorf("%s: model via %s: backend %s takes its API key from %s, which is not set here", m.Why, m.Via, name, cfg.KeyEnv)
		}
	}
	model := cmp.Or(m.Model, cfg.Model)
	return &keeper.ModelsRoute{Upstream: models.Upstream{Name: name, URL: url, Key: key}, Model: model,
		Limits: models.Limits{Concurrent: m.Concurrent, RunTokens: m.RunTokens}}, nil
}

// routes resolves the choices of many hosts, each distinct one once.
type routes map[models.Choice]*keeper.ModelsRoute

func (rs routes) get(m models.Choice) (*keeper.ModelsRoute, error) {
	key := m
	key.Why = ""
	if r, ok := rs[key]; ok {
		return r, nil
	}
	r, err := route(m)
	if err != nil {
		return nil, err
	}
	rs[key] = r
	return r, nil
}
