package backend

import (
	"fmt"
	"os"
	"strings"

	"ollie/agent/backend/config"
)

// Config is one backend, as the backends file states it; package config
// reads the file and the environment without linking a model client.
type Config = config.Config

// The backend types and defaults, as package config declares them.
const (
	TypeOpenAI       = config.TypeOpenAI
	TypeOllama       = config.TypeOllama
	DefaultOpenAIURL = config.DefaultOpenAIURL
	DefaultOllamaURL = config.DefaultOllamaURL
	SourceDefault    = config.SourceDefault
	DesktopFile      = config.DesktopFile
)

// A Registry holds the configured backends (config.Set), each with the
// client that reaches it.
type Registry struct {
	*config.Set
	backends map[string]*OpenAI
}

// Load reads the backends file and the environment (config.Load) and
// makes a client for each backend.
func Load() (*Registry, error) { return LoadEnv(os.LookupEnv) }

// LoadEnv is Load with the environment read through lookup.
func LoadEnv(lookup func(string) (string, bool)) (*Registry, error) {
	set, err := config.LoadEnv(lookup)
	if err != nil {
		return nil, err
	}
	r := &Registry{Set: set, backends: map[string]*OpenAI{}}
	for _, name := range set.Names() {
		c, _ := set.Config(name)
		b, err := NewOpenAI(c, set.Key(name))
		if err != nil {
			return nil, err
		}
		r.backends[name] = b
	}
	return r, nil
}

// Get returns the backend called name.
func (r *Registry) Get(name string) (Backend, error) {
	b, ok := r.backends[name]
	if !ok {
		return nil, fmt.Errorf("backend: no backend named %q (have %s)", name, strings.Join(r.Names(), ", "))
	}
	return b, nil
}

// Default returns the default backend (config.Set.DefaultName). It is
// never nil.
func (r *Registry) Default() Backend { return r.backends[r.DefaultName()] }
