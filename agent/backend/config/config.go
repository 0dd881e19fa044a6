// Package config is which model backends a host (or a desktop) has: the
// backends file, the desktop's file beside it, and the environment
// variables that add to them, read strictly with located errors. It
// builds no client, so a program that only needs to know the backends
// (ollie-remote choosing a desktop model for a host) links no model
// client; package backend turns each Config into one.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"ollie/internal/paths"
)

// Where backends come from. The backends file names any number; the
// standard environment variables add two more, unless the file already
// uses their names:
//
//	OPENAI_API_KEY, OPENAI_BASE_URL   backend "openai" (either one suffices), at
//	                                  OPENAI_BASE_URL or DefaultOpenAIURL, with
//	                                  model OPENAI_MODEL
//	OLLAMA_HOST                       backend "ollama" at that address (Ollama's
//	                                  own syntax: "host", "host:port", a URL), with
//	                                  model OLLAMA_MODEL
//
// Without OLLAMA_HOST, backend "ollama" is still listed, at
// DefaultOllamaURL, where Ollama listens by default (its Source is
// SourceDefault). Nothing is probed when loading: a backend that is not
// there fails its first request, with an error naming its address.
const (
	TypeOpenAI = "openai" // any OpenAI-compatible server: OpenAI, OpenRouter, vLLM, llama.cpp
	TypeOllama = "ollama" // Ollama: everything through its native API and official client

	DefaultOpenAIURL = "https://api.openai.com/v1"
	DefaultOllamaURL = "http://127.0.0.1:11434"
)

// Config is one backend, as the backends file states it.
type Config struct {
	Name string `json:"-"`
	// Type is TypeOpenAI or TypeOllama.
	Type string `json:"type"`
	// URL is the API base for TypeOpenAI (".../v1"); for TypeOllama the
	// server's root (a trailing /v1 is accepted).
	URL string `json:"url"`
	// KeyEnv names the environment variable holding the API key. Keys are
	// never written in the file. For TypeOpenAI at OpenAI's own URL it
	// defaults to OPENAI_API_KEY; otherwise no key is sent unless named.
	KeyEnv string `json:"key_env,omitempty"`
	// Model is the default model; may be empty.
	Model string `json:"model,omitempty"`
	// Context is the model's context window in tokens, 0 if not stated.
	// For Ollama it is the window the server runs models with (see
	// ollama.go).
	Context int `json:"context,omitempty"`
	// Socket, when set, is a Unix socket every request goes to, whatever
	// URL's host says: the desktop's model, forwarded to this host over
	// its SSH connection (ollie-remote up -model-via desktop).
	Socket string `json:"socket,omitempty"`
	// Source says where the backend was configured: the file's path, an
	// environment variable, or SourceDefault.
	Source string `json:"-"`
}

// SourceDefault is the Source of the backend "ollama" that no one
// configured: neither OLLAMA_HOST nor a backends file names it.
const SourceDefault = "default"

// Implicit reports whether the backend is the "ollama" assumed at
// Ollama's default address without anyone configuring it. A person who
// never set it up should not see it as a broken backend of theirs.
func (c Config) Implicit() bool { return c.Source == SourceDefault }

// DesktopFile is the backend configuration ollie-remote writes on a host
// beside backends.json: the desktop's model through the tunnel. The
// host's own file wins on a name, and on the default.
const DesktopFile = "backends.desktop.json"

// A Set is the configured backends, each with the API key its
// environment gives it.
type Set struct {
	path     string
	def      string
	configs  map[string]Config
	keys     map[string]string
	warnings []string
}

// Load reads the backends file and the environment. The file is
// $XDG_CONFIG_HOME/ollie/backends.json, or ~/.config/ollie/backends.json;
// a missing file is no error. An invalid file is, naming the file and the
// field.
func Load() (*Set, error) { return LoadEnv(os.LookupEnv) }

// LoadEnv is Load with the environment read through lookup.
func LoadEnv(lookup func(string) (string, bool)) (*Set, error) {
	env := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	r := &Set{path: configPath(env), configs: map[string]Config{}, keys: map[string]string{}}

	ollamaURL, ollamaSource := DefaultOllamaURL, SourceDefault
	if h := env("OLLAMA_HOST"); h != "" {
		u, err := ollamaHost(h)
		if err != nil {
			return nil, fmt.Errorf("backend: OLLAMA_HOST: %v", err)
		}
		ollamaURL, ollamaSource = u, "OLLAMA_HOST"
	}

	var file *fileConfig
	if r.path != "" {
		data, err := os.ReadFile(r.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("backend: %v", err)
		default:
			if file, err = parseFile(r.path, data); err != nil {
				return nil, err
			}
			for _, c := range file.backends {
				if c.URL == "" {
					c.URL = ollamaURL // an Ollama backend without a url
				}
				r.configs[c.Name] = c
			}
		}
	}

	var desk *fileConfig
	if r.path != "" {
		dpath := filepath.Join(filepath.Dir(r.path), DesktopFile)
		data, err := os.ReadFile(dpath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("backend: %v", err)
		default:
			if desk, err = parseFile(dpath, data); err != nil {
				return nil, err
			}
			for _, c := range desk.backends {
				if _, mine := r.configs[c.Name]; !mine {
					r.configs[c.Name] = c
				}
			}
		}
	}

	if _, ok := r.configs["openai"]; !ok && (env("OPENAI_API_KEY") != "" || env("OPENAI_BASE_URL") != "") {
		c := Config{Name: "openai", Type: TypeOpenAI, URL: DefaultOpenAIURL, KeyEnv: "OPENAI_API_KEY", Model: env("OPENAI_MODEL"), Source: "OPENAI_API_KEY"}
		if u := env("OPENAI_BASE_URL"); u != "" {
			if err := CheckURL(u); err != nil {
				return nil, fmt.Errorf("backend: OPENAI_BASE_URL: %v", err)
			}
			c.URL, c.Source = u, "OPENAI_BASE_URL"
		}
		r.configs[c.Name] = c
	}
	if _, ok := r.configs["ollama"]; !ok {
		r.configs["ollama"] = Config{Name: "ollama", Type: TypeOllama, URL: ollamaURL, Model: env("OLLAMA_MODEL"), Source: ollamaSource}
	}

	for name, c := range r.configs {
		key := ""
		if c.KeyEnv != "" {
			key = env(c.KeyEnv)
			if key == "" && c.Source == r.path {
				r.warnings = append(r.warnings, fmt.Sprintf("%s: backends.%s.key_env: %s is not set; requests go without an API key", r.path, name, c.KeyEnv))
			}
		}
		r.keys[name] = key
	}
	sort.Strings(r.warnings)

	switch {
	case file != nil && file.def != "":
		if _, ok := r.configs[file.def]; !ok {
			return nil, fmt.Errorf("backend: %s: default: no backend named %q (have %s)", r.path, file.def, strings.Join(r.Names(), ", "))
		}
		r.def = file.def
	case file != nil && len(file.backends) > 1:
		return nil, fmt.Errorf("backend: %s: default: missing; the file names %d backends, so say which one is the default", r.path, len(file.backends))
	case file != nil && len(file.backends) == 1:
		r.def = file.backends[0].Name
	case desk != nil && len(desk.backends) > 0:
		// A host with no backends of its own uses the desktop's.
		r.def = desk.backends[0].Name
		if desk.def != "" {
			r.def = desk.def
		}
	case r.configs["openai"].Source != "" && r.configs["openai"].Source != r.path:
		r.def = "openai"
	default:
		r.def = "ollama"
	}
	return r, nil
}

// Path is the backends file consulted, whether or not it exists; "" when
// neither XDG_CONFIG_HOME nor HOME is set.
func (r *Set) Path() string { return r.path }

// Names lists the backends, sorted.
func (r *Set) Names() []string {
	var names []string
	for n := range r.configs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// DefaultName is the default backend's name: the file's "default", else
// its only backend, else the desktop file's, else "openai" from the
// environment, else "ollama".
func (r *Set) DefaultName() string { return r.def }

// Config returns the configuration of the backend called name.
func (r *Set) Config(name string) (Config, bool) {
	c, ok := r.configs[name]
	return c, ok
}

// Key is the API key backend name's key_env gives it here, "" when none.
func (r *Set) Key(name string) string { return r.keys[name] }

// Warnings are problems found while loading that do not stop a backend
// from being used, e.g. a key_env variable that is not set.
func (r *Set) Warnings() []string { return r.warnings }

func configPath(env func(string) string) string {
	if dir := paths.ConfigDirFrom(env); dir != "" {
		return filepath.Join(dir, "backends.json")
	}
	return ""
}

// ollamaHost reads OLLAMA_HOST as Ollama does: an optional scheme (http
// by default), a host (127.0.0.1 by default) and a port (11434 by
// default, 80 or 443 for a URL with that scheme and no port).
func ollamaHost(s string) (string, error) {
	scheme, hostport, ok := strings.Cut(s, "://")
	if !ok {
		scheme, hostport = "http", s
	}
	if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("%q: want http or https", s)
	}
	hostport, path, _ := strings.Cut(hostport, "/")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "11434"
		if ok {
			port = map[string]string{"http": "80", "https": "443"}[scheme]
		}
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // a listening address, not one to dial
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: bad port %q", s, port)
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}
	if path = strings.Trim(path, "/"); path != "" {
		u.Path = "/" + path
	}
	return u.String(), nil
}

// fileConfig is a parsed backends file.
type fileConfig struct {
	def      string
	backends []Config // in file order
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// parseFile reads a backends file strictly: unknown or duplicate fields,
// wrong types and bad values are errors naming the file, the line and the
// field.
//
//	{"default": "local",
//	 "backends": {
//	   "local":      {"type": "ollama", "url": "http://127.0.0.1:11434", "model": "qwen3:8b", "context": 32768},
//	   "openrouter": {"type": "openai", "url": "https://openrouter.ai/api/v1", "key_env": "OPENROUTER_API_KEY", "model": "..."}}}
func parseFile(path string, data []byte) (*fileConfig, error) {
	p := &fileParser{path: path, data: data}
	fc := &fileConfig{}
	top, err := p.object(data, 0, "")
	if err != nil {
		return nil, err
	}
	for _, f := range top {
		switch f.key {
		case "default":
			if fc.def, err = p.str(f); err != nil {
				return nil, err
			}
		case "backends":
			entries, err := p.object(f.raw, f.voff, "backends")
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				c, err := p.backend(e)
				if err != nil {
					return nil, err
				}
				fc.backends = append(fc.backends, c)
			}
		default:
			return nil, p.errorf(f.off, f.key, "unknown field (want default, backends)")
		}
	}
	return fc, nil
}

type fileParser struct {
	path string
	data []byte
}

// field is one member of an object, at offset off in the file.
type field struct {
	key  string
	raw  json.RawMessage
	off  int    // the key's offset
	voff int    // the value's offset
	path string // e.g. backends.local.url
}

// skip returns the offset of the first byte at or after i that is not
// JSON white space or one of seps.
func skip(raw []byte, i int, seps string) int {
	for i < len(raw) && strings.IndexByte(" \t\r\n"+seps, raw[i]) >= 0 {
		i++
	}
	return i
}

func (p *fileParser) errorf(off int, path, format string, args ...any) error {
	line := 1 + bytes.Count(p.data[:min(off, len(p.data))], []byte("\n"))
	where := fmt.Sprintf("backend: %s:%d", p.path, line)
	if path != "" {
		where += ": " + path
	}
	return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
}

// object reads raw, found at offset base, as a JSON object, in order.
func (p *fileParser) object(raw []byte, base int, path string) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, p.syntax(base, path, dec, err)
	}
	if tok != json.Delim('{') {
		return nil, p.errorf(base, path, "want an object")
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		off := base + skip(raw, int(dec.InputOffset()), ",")
		tok, err := dec.Token()
		if err != nil {
			return nil, p.syntax(base, path, dec, err)
		}
		key := tok.(string)
		fpath := key
		if path != "" {
			fpath = path + "." + key
		}
		if seen[key] {
			return nil, p.errorf(off, fpath, "given twice")
		}
		seen[key] = true
		voff := base + skip(raw, int(dec.InputOffset()), ":")
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, p.syntax(base, fpath, dec, err)
		}
		out = append(out, field{key: key, raw: v, off: off, voff: voff, path: fpath})
	}
	if _, err := dec.Token(); err != nil {
		return nil, p.syntax(base, path, dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, p.errorf(base+int(dec.InputOffset()), path, "unexpected data after the object")
	}
	return out, nil
}

func (p *fileParser) syntax(base int, path string, dec *json.Decoder, err error) error {
	off := base + int(dec.InputOffset())
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = base + int(se.Offset)
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("unexpected end of file")
	}
	return p.errorf(off, path, "invalid JSON: %v", err)
}

func (p *fileParser) str(f field) (string, error) {
	var s string
	if err := json.Unmarshal(f.raw, &s); err != nil {
		return "", p.errorf(f.off, f.path, "want a string, got %s", clip(string(f.raw), 40))
	}
	return s, nil
}

func (p *fileParser) backend(e field) (Config, error) {
	c := Config{Name: e.key, Source: p.path}
	if !nameRE.MatchString(e.key) {
		return c, p.errorf(e.off, e.path, "bad backend name: use letters, digits, '.', '_' and '-', at most 64")
	}
	fields, err := p.object(e.raw, e.voff, e.path)
	if err != nil {
		return c, err
	}
	for _, f := range fields {
		switch f.key {
		case "type":
			if c.Type, err = p.str(f); err != nil {
				return c, err
			}
			if c.Type != TypeOpenAI && c.Type != TypeOllama {
				return c, p.errorf(f.off, f.path, "unknown type %q (want %q or %q)", c.Type, TypeOpenAI, TypeOllama)
			}
		case "url":
			if c.URL, err = p.str(f); err != nil {
				return c, err
			}
			if err := CheckURL(c.URL); err != nil {
				return c, p.errorf(f.off, f.path, "%v", err)
			}
		case "key_env":
			if c.KeyEnv, err = p.str(f); err != nil {
				return c, err
			}
			if !envRE.MatchString(c.KeyEnv) {
				return c, p.errorf(f.off, f.path, "%q is not an environment variable's name", c.KeyEnv)
			}
		case "model":
			if c.Model, err = p.str(f); err != nil {
				return c, err
			}
		case "context":
			var n json.Number
			d := json.NewDecoder(bytes.NewReader(f.raw))
			d.UseNumber()
			n64, perr := int64(0), d.Decode(&n)
			if perr == nil {
				n64, perr = n.Int64()
			}
			if perr != nil || n64 <= 0 || n64 > 100_000_000 {
				return c, p.errorf(f.off, f.path, "want a positive whole number of tokens, got %s", clip(string(f.raw), 40))
			}
			c.Context = int(n64)
		case "socket":
			if c.Socket, err = p.str(f); err != nil {
				return c, err
			}
			if !filepath.IsAbs(c.Socket) {
				return c, p.errorf(f.off, f.path, "%q is not an absolute path", c.Socket)
			}
		case "key", "api_key", "apikey":
			return c, p.errorf(f.off, f.path, "API keys are not kept in this file: put the key in an environment variable and name the variable in \"key_env\"")
		default:
			return c, p.errorf(f.off, f.path, "unknown field (want type, url, key_env, model, context, socket)")
		}
	}
	if c.Type == "" {
		return c, p.errorf(e.off, e.path+".type", "missing (want %q or %q)", TypeOpenAI, TypeOllama)
	}
	if c.URL == "" && c.Type == TypeOpenAI {
		c.URL = DefaultOpenAIURL
	}
	if c.KeyEnv == "" && c.Type == TypeOpenAI {
		if u, err := url.Parse(c.URL); err == nil && u.Hostname() == "api.openai.com" {
			c.KeyEnv = "OPENAI_API_KEY"
		}
	}
	return c, nil
}

// CheckURL accepts an http or https URL with a host: what a backend's url
// must be.
func CheckURL(s string) error {
	if s == "" {
		return errors.New("missing")
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	return nil
}

// clip bounds a value quoted in an error.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
