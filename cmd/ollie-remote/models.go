package main

import (
	"fmt"
	"os"
	"strings"

	"ollie/agent/backend"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

// modelsRoute is the desktop's model that -model-via gives the hosts: a
// backend of this desktop's own configuration (backends.json and the
// environment), with its API key read here, where it stays. nil without
// -model-via.
func (c *common) modelsRoute() (*keeper.ModelsRoute, error) {
	if c.modelVia == "" {
		return nil, nil
	}
	via, name, _ := strings.Cut(c.modelVia, ":")
	if via != "desktop" {
		return nil, fmt.Errorf("-model-via %q: want desktop, or desktop:BACKEND (a backend of this desktop's backends.json)", c.modelVia)
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
		return nil, fmt.Errorf("-model-via %s: this desktop has no backend %q (it has %s; see %s)", c.modelVia, name, strings.Join(reg.Names(), ", "), reg.Path())
	}
	if cfg.Socket != "" {
		return nil, fmt.Errorf("-model-via %s: backend %s is itself another desktop's model", c.modelVia, name)
	}
	url := strings.TrimRight(cfg.URL, "/")
	if cfg.Type == backend.TypeOllama {
		url = strings.TrimSuffix(url, "/v1") + "/v1"
	}
	key := ""
	if cfg.KeyEnv != "" {
		if key = strings.TrimSpace(os.Getenv(cfg.KeyEnv)); key == "" {
			return nil, fmt.Errorf("-model-via %s: backend %s takes its API key from %s, which is not set here", c.modelVia, name, cfg.KeyEnv)
		}
	}
	model := c.model
	if model == "" {
		model = cfg.Model
	}
	return &keeper.ModelsRoute{Upstream: models.Upstream{Name: name, URL: url, Key: key}, Model: model,
		Limits: models.Limits{Concurrent: c.modelConcurrent, RunTokens: c.runTokens}}, nil
}
