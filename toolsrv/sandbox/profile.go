package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"ollie/internal/paths"
)

// A Profile is a sandbox profile as written: paths may still hold
// templates. The YAML fields are:
//
//	read:        [paths]   read files, list directories
//	write:       [paths]   read, write, create, remove, rename beneath
//	exec:        [paths]   read and execute
//	net:
//	  bind:      [ports]   TCP ports the tool may bind; [any] for all
//	  connect:   [ports]   TCP ports the tool may connect to; [any] for all
//	env:         [names]   environment variables passed on; NAME or PREFIX*
//	limits:
//	  memory:     size     data each process may map (RLIMIT_DATA), e.g. 1.5GiB
//	  processes:  count    processes and threads of the call at once
//	  open_files: count    descriptors each process may hold (RLIMIT_NOFILE)
//	  file_size:  size     largest file a process may write (RLIMIT_FSIZE)
//	best_effort: bool      run with what the kernel can enforce (see [Policy.Check])
//
// An absent list is an empty one: no net section denies every TCP bind and
// connect, no env passes no variable. An absent limit is the one in
// [DefaultLimits]; unlimited lifts it. Sizes take B, KiB, MiB, GiB or TiB. A path is absolute or begins with one
// template: {CWD}, {HOME}, {TMPDIR}, {XDG_CONFIG_HOME}, {XDG_CACHE_HOME},
// {XDG_DATA_HOME}, {XDG_STATE_HOME}, {XDG_RUNTIME_DIR}, {OLLIE_TOOLS_PATH}
// (one path per element of the list), {OLLIE_BIN} (the directory of the
// running olliesrv, where the ollie client is deployed) or {env:NAME}.
type Profile struct {
	Name string // the name it was loaded by, e.g. "default"
	File string // the file it came from

	Read, Write, Exec []string
	Bind, Connect     Ports
	Env               []string
	Limits            Limits
	BestEffort        bool
}

// Ports is a list of TCP ports, or any port.
type Ports struct {
	Any   bool     `json:"any,omitempty"`
	Ports []uint16 `json:"ports,omitempty"`
}

func (p Ports) String() string {
	switch {
	case p.Any:
		return "any"
	case len(p.Ports) == 0:
		return "none"
	}
	s := make([]string, len(p.Ports))
	for i, n := range p.Ports {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, " ")
}

// A ProfileError is a mistake in a profile file. Field is the dotted path
// of the offending field, with an index for list items ("net.connect[1]").
type ProfileError = paths.FileError

// fileProfile is the YAML shape, decoded strictly once the node walk in
// checkNode has named any mistake precisely.
type fileProfile struct {
	Read  []string `yaml:"read"`
	Write []string `yaml:"write"`
	Exec  []string `yaml:"exec"`
	Net   struct {
		Bind    []string `yaml:"bind"`
		Connect []string `yaml:"connect"`
	} `yaml:"net"`
	Env        []string   `yaml:"env"`
	Limits     fileLimits `yaml:"limits"`
	BestEffort bool       `yaml:"best_effort"`
}

// fieldKind is what checkNode expects of a field.
type fieldKind int

const (
	kindPaths fieldKind = iota
	kindPorts
	kindEnv
	kindBool
	kindNet
	kindLimits
	kindSize
	kindCount
)

var topFields = []struct {
	name string
	kind fieldKind
}{
	{"read", kindPaths}, {"write", kindPaths}, {"exec", kindPaths},
	{"net", kindNet}, {"env", kindEnv}, {"limits", kindLimits}, {"best_effort", kindBool},
}

var netFields = []struct {
	name string
	kind fieldKind
}{{"bind", kindPorts}, {"connect", kindPorts}}

// ParseProfile parses the YAML of a profile. name and file are recorded in
// the profile and in errors.
func ParseProfile(name, file string, data []byte) (*Profile, error) {
	perr := func(line int, field string, err error) error {
		return &ProfileError{Kind: "sandbox", File: file, Line: line, Field: field, Err: err}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, perr(0, "", err)
	}
	p := &Profile{Name: name, File: file}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return p, nil // empty file: the zero profile, which allows nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, perr(root.Line, "", errors.New("expected a mapping of fields (read, write, exec, net, env, limits, best_effort)"))
	}
	if err := checkMapping(root, "", topFields, perr); err != nil {
		return nil, err
	}

	// The walk above has vetted every key and kind; strict decoding is the
	// second line and catches what a hand walk might miss.
	var fp fileProfile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fp); err != nil {
		return nil, perr(0, "", err)
	}

	p.Read, p.Write, p.Exec, p.Env, p.BestEffort = fp.Read, fp.Write, fp.Exec, fp.Env, fp.BestEffort
	var err error
	if p.Bind, err = parsePorts(fp.Net.Bind); err != nil {
		return nil, perr(0, "net.bind", err)
	}
	if p.Connect, err = parsePorts(fp.Net.Connect); err != nil {
		return nil, perr(0, "net.connect", err)
	}
	if p.Limits, err = fp.Limits.parse(); err != nil {
		var le *limitError
		errors.As(err, &le)
		return nil, perr(0, "limits."+le.field, le.err)
	}
	return p, nil
}

func checkMapping(m *yaml.Node, prefix string, known []struct {
	name string
	kind fieldKind
}, perr func(int, string, error) error) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name := prefix + k.Value
		j := slices.IndexFunc(known, func(f struct {
			name string
			kind fieldKind
		}) bool {
			return f.name == k.Value
		})
		if j < 0 {
			names := make([]string, len(known))
			for n, f := range known {
				names[n] = f.name
			}
			return perr(k.Line, name, fmt.Errorf("%w (known: %s)", ErrUnknownField, strings.Join(names, ", ")))
		}
		if seen[k.Value] {
			return perr(k.Line, name, errors.New("given twice"))
		}
		seen[k.Value] = true
		if err := checkValue(v, name, known[j].kind, perr); err != nil {
			return err
		}
	}
	return nil
}

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	envPatRE  = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*\*?|\*)$`)
)

func checkValue(v *yaml.Node, name string, kind fieldKind, perr func(int, string, error) error) error {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil // "read:" with nothing after it: an empty list
	}
	switch kind {
	case kindBool:
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
			return perr(v.Line, name, fmt.Errorf("expected true or false, got %q", v.Value))
		}
		return nil
	case kindNet:
		if v.Kind != yaml.MappingNode {
			return perr(v.Line, name, errors.New("expected a mapping with bind and connect"))
		}
		return checkMapping(v, name+".", netFields, perr)
	case kindLimits:
		if v.Kind != yaml.MappingNode {
			return perr(v.Line, name, errLimitsMapping)
		}
		return checkMapping(v, name+".", limitFields, perr)
	case kindSize, kindCount:
		if v.Kind != yaml.ScalarNode {
			return perr(v.Line, name, errors.New("expected a single value, not a list or mapping"))
		}
		parse := parseSize
		if kind == kindCount {
			parse = parseCount
		}
		if _, err := parse(v.Value); err != nil {
			return perr(v.Line, name, err)
		}
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		return perr(v.Line, name, errors.New("expected a list"))
	}
	for i, item := range v.Content {
		iname := fmt.Sprintf("%s[%d]", name, i)
		if item.Kind != yaml.ScalarNode {
			return perr(item.Line, iname, errors.New("expected a single value, not a list or mapping"))
		}
		var err error
		switch kind {
		case kindPaths:
			_, _, err = splitTemplate(item.Value)
		case kindEnv:
			if !envPatRE.MatchString(item.Value) {
				err = fmt.Errorf("%q is not a variable name or NAME* pattern", item.Value)
			}
		case kindPorts:
			_, err = parsePorts([]string{item.Value})
		}
		if err != nil {
			return perr(item.Line, iname, err)
		}
	}
	return nil
}

func parsePorts(items []string) (Ports, error) {
	var p Ports
	for _, s := range items {
		if s == "any" {
			p.Any = true
			continue
		}
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return Ports{}, fmt.Errorf("%q is not a TCP port (0-65535) or any", s)
		}
		p.Ports = append(p.Ports, uint16(n))
	}
	if p.Any && len(p.Ports) > 0 {
		return Ports{}, errors.New("any cannot be combined with port numbers")
	}
	return p, nil
}

// Templates known to profiles, in the order error messages list them.
var templates = []string{
	"CWD", "HOME", "TMPDIR",
	"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
	"OLLIE_TOOLS_PATH", "OLLIE_BIN", "env:NAME",
}

// splitTemplate splits a profile path into its leading template name (""
// for none) and the rest, and checks both.
func splitTemplate(s string) (tmpl, rest string, err error) {
	if s == "" {
		return "", "", errors.New("empty path")
	}
	rest = s
	if s[0] == '{' {
		end := strings.IndexByte(s, '}')
		if end < 0 {
			return "", "", fmt.Errorf("%q: unclosed template", s)
		}
		tmpl, rest = s[1:end], s[end+1:]
		known := slices.Contains(templates, tmpl) && tmpl != "env:NAME"
		if name, ok := strings.CutPrefix(tmpl, "env:"); ok {
			known = envNameRE.MatchString(name)
		}
		if !known {
			return "", "", fmt.Errorf("%q: %w {%s} (known: {%s})", s, ErrUnknownTemplate, tmpl, strings.Join(templates, "}, {"))
		}
		if rest != "" && rest[0] != '/' {
			return "", "", fmt.Errorf("%q: a template must be followed by / or end the path", s)
		}
	} else if s[0] != '/' {
		return "", "", fmt.Errorf("%q is not absolute: start it with / or a template such as {HOME}", s)
	}
	if strings.ContainsAny(rest, "{}") {
		return "", "", fmt.Errorf("%q: a template may only begin a path", s)
	}
	return tmpl, rest, nil
}

// Profiles finds profiles by name in an ordered list of directories: the
// first directory holding NAME.yaml wins, so a user directory listed before
// the deployed one overrides a deployed profile of the same name.
type Profiles struct {
	Dirs []string
}

// DefaultProfiles returns the user's directory ($XDG_CONFIG_HOME/ollie/sandbox,
// by default ~/.config/ollie/sandbox) followed by the deployed one:
// $OLLIE_DATA/sandbox when OLLIE_DATA is set, otherwise data/sandbox beside
// the directory holding the running binary (bin/olliesrv → data/sandbox).
func DefaultProfiles() Profiles { return Profiles{Dirs: paths.Defaults("sandbox")} }

func (ps Profiles) search() paths.Search { return paths.Search{Dirs: ps.Dirs, Ext: ".yaml"} }

// Load reads and parses the profile called name. A name no directory holds
// is an error wrapping [ErrUnknownProfile] that lists the available names.
func (ps Profiles) Load(name string) (*Profile, error) {
	file, data, err := ps.search().Find(name)
	if err == nil {
		return parsed.load(name, file, data)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox: profile %q: %w", name, err)
	}
	avail := "none"
	if names := ps.Names(); len(names) > 0 {
		avail = strings.Join(names, ", ")
	}
	return nil, fmt.Errorf("sandbox: %w %q (available: %s; searched %s)", ErrUnknownProfile, name, avail, strings.Join(ps.Dirs, ", "))
}

// Names lists the profiles found in any directory, sorted, each once.
func (ps Profiles) Names() []string { return ps.search().Names() }

// parsed holds the profiles parsed so far, by file: every tool call loads
// its profile, and parsing the YAML costs more than a millisecond of CPU
// on a small machine, as much as the fork/exec of the tool. The file is
// still read on every load, and a profile is parsed again whenever its
// bytes differ from those parsed, so an edit takes effect at the next
// call as before.
var parsed profileCache

type profileCache struct {
	mu    sync.Mutex
	files map[string]parsedProfile
}

type parsedProfile struct {
	name string
	data []byte
	prof *Profile
}

func (c *profileCache) load(name, file string, data []byte) (*Profile, error) {
	c.mu.Lock()
	e, ok := c.files[file]
	c.mu.Unlock()
	if ok && e.name == name && bytes.Equal(e.data, data) {
		return e.prof.clone(), nil
	}
	p, err := ParseProfile(name, file, data)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.files == nil {
		c.files = map[string]parsedProfile{}
	}
	c.files[file] = parsedProfile{name: name, data: bytes.Clone(data), prof: p.clone()}
	c.mu.Unlock()
	return p, nil
}

// clone is a copy of p that shares nothing with it: callers may change
// what Load returns.
func (p *Profile) clone() *Profile {
	q := *p
	q.Read, q.Write, q.Exec, q.Env = slices.Clone(p.Read), slices.Clone(p.Write), slices.Clone(p.Exec), slices.Clone(p.Env)
	q.Bind.Ports, q.Connect.Ports = slices.Clone(p.Bind.Ports), slices.Clone(p.Connect.Ports)
	return &q
}
