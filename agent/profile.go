package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"ollie/internal/jsonx"
	"ollie/internal/paths"
)

// A Profile is an agent profile: what an agent is told, which tools it
// loads, which model it talks to and which hooks run around it. Profiles
// are JSON files, NAME.json, with these fields (all optional):
//
//	description  string            one line for the agents listing
//	prompt       [string]          shell commands; their output, in order, is the system prompt
//	tools        [string]          tool names to load; absent loads every tool, [] none
//	model        string            model name; absent means the backend's default
//	backend      string            backend name; absent means the default backend
//	maxSteps     int > 0           model requests per prompt; absent means the loop's default
//	spawn        bool              its tools may create sessions and agents through the namespace
//	skills       [string]          skills loaded when the agent is made, where the host offers them
//	hooks        {name: command}   shell commands run at agentSpawn, preTurn, postTurn,
//	                               preTool, postTool, preCompact, postCompact, turnError
//
// Parsing is strict: an unknown field or hook name, a wrong type, a
// duplicate key or an empty command is a [*ProfileError] naming the file,
// the line and the field. LoadProfile does not check that the tools exist:
// the session's tool server knows that, and its caller reports them.
type Profile struct {
	Name string `json:"-"` // the name it was loaded by, e.g. "coding"
	File string `json:"-"` // the file it came from

	Description string            `json:"description,omitempty"`
	Prompt      []string          `json:"prompt,omitempty"`
	Tools       []string          `json:"tools,omitempty"` // nil: every tool; empty: none
	Model       string            `json:"model,omitempty"`
	Backend     string            `json:"backend,omitempty"`
	MaxSteps    int               `json:"maxSteps,omitempty"` // 0: the loop's default
	Spawn       bool              `json:"spawn,omitempty"`    // its tools may create sessions and agents
	Hooks       map[string]string `json:"hooks,omitempty"`    // hook name → shell command
	Skills      []string          `json:"skills,omitempty"`   // preloaded where offered
}

// ErrUnknownProfile is wrapped by the error for a profile no directory holds.
var ErrUnknownProfile = errors.New("no agent profile")

// A ProfileError is a mistake in a profile file. Field is the path of the
// offending field, with an index for list items ("prompt[1]", "hooks.preTool").
type ProfileError = paths.FileError

// Profiles finds profiles in a list of directories; the first directory
// holding NAME.json wins, whole: a user's file replaces the deployed one,
// it is not merged with it.
type Profiles struct {
	Dirs []string
}

// DataDir is ollie's deployed data directory: $OLLIE_DATA when set,
// otherwise data beside the directory holding the running binary
// (bin/olliesrv → data). Prompt commands and hooks see it as $OLLIE.
func DataDir() string { return paths.DataDir() }

// DefaultProfiles searches the user's directory ($XDG_CONFIG_HOME/ollie/agents,
// by default ~/.config/ollie/agents), then the deployed one, agents in
// [DataDir], as toolsrv/sandbox does for sandbox profiles.
func DefaultProfiles() Profiles { return Profiles{Dirs: paths.Defaults("agents")} }

func (ps Profiles) search() paths.Search { return paths.Search{Dirs: ps.Dirs, Ext: ".json"} }

// ProfileDirs returns the directories [LoadProfile] searches, in order.
func ProfileDirs() []string { return DefaultProfiles().Dirs }

// LoadProfile loads the profile called name from [DefaultProfiles].
func LoadProfile(name string) (*Profile, error) { return DefaultProfiles().Load(name) }

// ProfileNames lists the profiles of [DefaultProfiles].
func ProfileNames() []string { return DefaultProfiles().Names() }

// Load reads and parses the profile called name. A name no directory holds
// is an error wrapping [ErrUnknownProfile] that lists the available names.
func (ps Profiles) Load(name string) (*Profile, error) {
	file, data, err := ps.search().Find(name)
	if err == nil {
		return ParseProfile(name, file, data)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agent: profile %q: %w", name, err)
	}
	avail := "none"
	if names := ps.Names(); len(names) > 0 {
		avail = strings.Join(names, ", ")
	}
	return nil, fmt.Errorf("agent: %w %q (available: %s; searched %s)", ErrUnknownProfile, name, avail, strings.Join(ps.Dirs, ", "))
}

// Names lists the profiles found in any directory, sorted, each once.
func (ps Profiles) Names() []string { return ps.search().Names() }

// Hook names, as profiles spell them.
const (
	HookAgentSpawn  = "agentSpawn"
	HookPreTurn     = "preTurn"
	HookPostTurn    = "postTurn"
	HookPreTool     = "preTool"
	HookPostTool    = "postTool"
	HookPreCompact  = "preCompact"
	HookPostCompact = "postCompact"
	HookTurnError   = "turnError"
)

// HookNames lists every hook, in the order they happen in an agent's life.
var HookNames = []string{HookAgentSpawn, HookPreTurn, HookPreTool, HookPostTool,
	HookPostTurn, HookPreCompact, HookPostCompact, HookTurnError}

var profileFields = []string{"description", "prompt", "tools", "model", "backend", "maxSteps", "spawn", "hooks", "skills"}

// skillNameRE is package skills' rule for skill names.
var skillNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// toolNameRE is toolsrv's rule for tool names.
var toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// ParseProfile parses the JSON of a profile. name and file are recorded in
// the profile and in errors.
func ParseProfile(name, file string, data []byte) (*Profile, error) {
	pp := &parser{file: file, data: data}
	p := &Profile{Name: name, File: file}
	fields, err := pp.object(data, 0, "", "a JSON object of fields ("+strings.Join(profileFields, ", ")+")")
	if err != nil {
		return nil, err
	}
	for _, f := range fields {
		if !slices.Contains(profileFields, f.key) {
			return nil, pp.errorf(f.off, "", "unknown field %q%s (fields are %s)", f.key, didYouMean(f.key, profileFields), strings.Join(profileFields, ", "))
		}
		if f.val[0] == 'n' {
			return nil, pp.errorf(f.off, f.key, "null is not allowed: leave the field out for the default")
		}
		switch f.key {
		case "description":
			p.Description, err = pp.str(f)
		case "model":
			if p.Model, err = pp.str(f); err == nil && p.Model != "" {
				if cerr := CheckModel(p.Model); cerr != nil {
					err = pp.errorf(f.off, f.key, "%w", cerr)
				}
			}
		case "backend":
			p.Backend, err = pp.str(f)
		case "maxSteps":
			p.MaxSteps, err = pp.steps(f)
		case "spawn":
			switch string(f.val) {
			case "true":
				p.Spawn = true
			case "false":
			default:
				err = pp.errorf(f.off, f.key, "must be true or false")
			}
		case "prompt":
			if f.val[0] == '"' {
				return nil, pp.errorf(f.off, f.key, `must be an array of shell commands, not a string (one command is written ["command"])`)
			}
			p.Prompt, err = pp.strs(f, "a shell command", func(s string) error {
				if strings.TrimSpace(s) == "" {
					return errors.New("empty command")
				}
				return nil
			})
		case "tools":
			var seen []string
			p.Tools, err = pp.strs(f, "a tool name", func(s string) error {
				if !toolNameRE.MatchString(s) {
					return fmt.Errorf("%q is not a tool name (lower-case letters, digits and _, starting with a letter)", s)
				}
				if slices.Contains(seen, s) {
					return fmt.Errorf("%q is listed twice", s)
				}
				seen = append(seen, s)
				return nil
			})
		case "hooks":
			p.Hooks, err = pp.hooks(f)
		case "skills":
			var seen []string
			p.Skills, err = pp.strs(f, "a skill name", func(s string) error {
				if !skillNameRE.MatchString(s) {
					return fmt.Errorf("%q is not a skill name (lower-case letters, digits, - and _, starting with a letter)", s)
				}
				if slices.Contains(seen, s) {
					return fmt.Errorf("%q is listed twice", s)
				}
				seen = append(seen, s)
				return nil
			})
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// parser keeps what errors need: the file and its text, for line numbers.
type parser struct {
	file string
	data []byte
}

func (pp *parser) errorf(off int64, field, format string, args ...any) error {
	return &ProfileError{Kind: "agent", File: pp.file, Line: pp.line(off), Field: field, Err: fmt.Errorf(format, args...)}
}

// line is the 1-based line of byte offset off.
func (pp *parser) line(off int64) int {
	off = min(max(off, 0), int64(len(pp.data)))
	return bytes.Count(pp.data[:off], []byte("\n")) + 1
}

// A jsonField is one member of an object or one element of an array: its
// key (or "field[i]"), the offsets of the key (off) and of the value
// (start) in the file, and the value.
type jsonField struct {
	key   string
	off   int64
	start int64
	val   json.RawMessage
}

// object splits the object in data, which begins at offset base of the
// file, into its members in order. It refuses duplicate keys, which
// encoding/json would silently resolve to the last.
func (pp *parser) object(data []byte, base int64, field, want string) ([]jsonField, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, pp.syntax(base, err, field)
	}
	if tok != json.Delim('{') {
		return nil, pp.errorf(base+dec.InputOffset(), field, "must be %s", want)
	}
	var fields []jsonField
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, pp.syntax(base, err, field)
		}
		key := tok.(string) // the decoder returns object keys as strings
		off := base + dec.InputOffset()
		for _, f := range fields {
			if f.key == key {
				return nil, pp.errorf(off, join(field, key), "given twice (first on line %d)", pp.line(f.off))
			}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, pp.syntax(base, err, join(field, key))
		}
		end := base + dec.InputOffset()
		fields = append(fields, jsonField{key: key, off: off, start: end - int64(len(raw)), val: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, pp.syntax(base, err, field)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, pp.errorf(base+dec.InputOffset(), field, "unexpected text after the closing brace")
	}
	return fields, nil
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func (pp *parser) syntax(base int64, err error, field string) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return pp.errorf(base+se.Offset, field, "invalid JSON: %w", err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return pp.errorf(int64(len(pp.data)), field, "invalid JSON: the text ends early")
	}
	return pp.errorf(base, field, "invalid JSON: %w", err)
}

func (pp *parser) str(f jsonField) (string, error) {
	if f.val[0] != '"' {
		return "", pp.errorf(f.off, f.key, "must be a string, not %s", kindOf(f.val))
	}
	var s string
	if err := json.Unmarshal(f.val, &s); err != nil {
		return "", pp.errorf(f.off, f.key, "%w", err)
	}
	return s, nil
}

// strs decodes an array of strings, checking each with ok. A present,
// empty array is an empty, non-nil slice.
func (pp *parser) strs(f jsonField, what string, ok func(string) error) ([]string, error) {
	if f.val[0] != '[' {
		return nil, pp.errorf(f.off, f.key, "must be an array of strings, not %s", kindOf(f.val))
	}
	dec := json.NewDecoder(bytes.NewReader(f.val))
	dec.Token() // [, already known to be there
	list := []string{}
	for i := 0; dec.More(); i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, pp.syntax(f.start, err, f.key)
		}
		el := jsonField{key: fmt.Sprintf("%s[%d]", f.key, i), off: f.start + dec.InputOffset() - int64(len(raw)), val: raw}
		if raw[0] != '"' {
			return nil, pp.errorf(el.off, el.key, "must be %s (a string), not %s", what, kindOf(raw))
		}
		s, err := pp.str(el)
		if err != nil {
			return nil, err
		}
		if err := ok(s); err != nil {
			return nil, pp.errorf(el.off, el.key, "%w", err)
		}
		list = append(list, s)
	}
	return list, nil
}

func (pp *parser) steps(f jsonField) (int, error) {
	if c := f.val[0]; c != '-' && (c < '0' || c > '9') {
		return 0, pp.errorf(f.off, f.key, "must be a number, not %s", kindOf(f.val))
	}
	n, err := json.Number(f.val).Int64()
	if err != nil || n < 1 || n > 1_000_000 {
		return 0, pp.errorf(f.off, f.key, "%s is not a whole number of model requests from 1 to 1000000 (leave it out for the default)", f.val)
	}
	return int(n), nil
}

func (pp *parser) hooks(f jsonField) (map[string]string, error) {
	if f.val[0] != '{' {
		return nil, pp.errorf(f.off, f.key, "must be an object of hook name → shell command, not %s", kindOf(f.val))
	}
	fields, err := pp.object(f.val, f.start, f.key, "an object of hook name → shell command")
	if err != nil {
		return nil, err
	}
	hooks := make(map[string]string, len(fields))
	for _, h := range fields {
		if !slices.Contains(HookNames, h.key) {
			return nil, pp.errorf(h.off, "hooks", "unknown hook %q%s (hooks are %s)", h.key, didYouMean(h.key, HookNames), strings.Join(HookNames, ", "))
		}
		h.key = "hooks." + h.key
		if h.val[0] != '"' {
			return nil, pp.errorf(h.off, h.key, "must be a shell command (a string), not %s", kindOf(h.val))
		}
		cmd, err := pp.str(h)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(cmd) == "" {
			return nil, pp.errorf(h.off, h.key, "empty command: leave the hook out instead")
		}
		hooks[strings.TrimPrefix(h.key, "hooks.")] = cmd
	}
	return hooks, nil
}

func kindOf(v json.RawMessage) string {
	switch v[0] {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// didYouMean suggests the known name that s differs from only in case.
func didYouMean(s string, known []string) string {
	if k, ok := jsonx.SimilarKey(s, known); ok {
		return fmt.Sprintf(" (did you mean %q?)", k)
	}
	return ""
}
