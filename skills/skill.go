// Package skills is the skill registry of the architecture seed: domain
// knowledge an agent reads when its work needs it. A skill is a markdown
// file with YAML front matter, NAME.md or NAME/SKILL.md with the files it
// refers to beside it, deployed in data/skills/ or the host's own in
// ~/.config/ollie/skills/. The same files go to every host, and each host
// offers only the skills whose conditions hold there: the conditions are
// toolsrv/meta's, the ones a .meta variant matches on, evaluated by the same code.
//
// The package parses and resolves; it trusts the files on its search path as
// the tools path is trusted (they are the operator's), but bounds their size
// and refuses what it does not understand. Agents reach skills through
// agent.Skills, which host implements over Catalog.
package skills

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"ollie/internal/paths"
	"ollie/toolsrv/meta"
)

// MaxFileSize bounds a skill's markdown file: instructions a model reads
// whole, not a manual.
const MaxFileSize = 256 << 10

// maxDescription bounds the one line every agent's system prompt carries.
const maxDescription = 300

// NameRE is what a skill's name must match; it is also the file's (NAME.md)
// or the folder's (NAME/SKILL.md) name.
var NameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// toolNameRE is toolsrv's rule for tool names.
var toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// fields lists the front matter's fields, in the order errors name them.
var fields = []string{"name", "description", "when", "tools"}

// A Skill is a parsed skill file.
type Skill struct {
	Name        string
	Description string           // one line
	When        []meta.Condition // all must hold on a host for it to be offered; none: always
	Tools       []string         // the tools it expects an agent to have
	File        string           // the markdown file
	Dir         string           // the skill's folder, for NAME/SKILL.md; "" for NAME.md
	Body        string           // the markdown after the front matter
}

// Error is a mistake in a skill file, located as every file error of
// ollie's: "skills: FILE:LINE: FIELD: what was wrong".
type Error = paths.FileError

// ErrSyntax is wrapped by the error of a file whose front matter is not
// YAML or is missing.
var ErrSyntax = errors.New("malformed front matter")

// Parse parses the skill file named file, whose content is data. Its name
// must be the one the file is found by: NAME.md, or NAME/SKILL.md. Parsing is
// strict: an unknown field, a missing or empty name or description, a
// description of more than one line, a condition toolsrv would refuse in a
// .meta, a tool name that is not one, a field given twice and an empty body
// each give an *Error naming the file, the line and the field; all of them
// are returned, joined, and then the Skill is nil.
func Parse(file string, data []byte) (*Skill, error) {
	p := &parser{file: file}
	s := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}

type parser struct {
	file string
	errs []error
	base int // the line before the front matter's first
}

func (p *parser) errorf(line int, field, format string, args ...any) {
	if line > 0 {
		line += p.base
	}
	p.errs = append(p.errs, &Error{Kind: "skills", File: p.file, Line: line, Field: field, Err: fmt.Errorf(format, args...)})
}

// nameOf is the name a skill is found by: NAME.md, or NAME/SKILL.md.
func nameOf(file string) string {
	if filepath.Base(file) == "SKILL.md" {
		return filepath.Base(filepath.Dir(file))
	}
	return strings.TrimSuffix(filepath.Base(file), ".md")
}

func (p *parser) parse(data []byte) *Skill {
	if len(data) > MaxFileSize {
		p.errorf(0, "", "the file is %d bytes (a skill may be at most %d KiB)", len(data), MaxFileSize>>10)
		return nil
	}
	front, body, ok := split(data)
	if !ok {
		p.errs = append(p.errs, &Error{Kind: "skills", File: p.file, Line: 1,
			Err: fmt.Errorf("%w: a skill starts with a line \"---\", then its fields (name, description; when, tools), then \"---\", then the markdown", ErrSyntax)})
		return nil
	}
	p.base = 1
	var doc yaml.Node
	if err := yaml.Unmarshal(front, &doc); err != nil {
		p.errs = append(p.errs, &Error{Kind: "skills", File: p.file, Err: fmt.Errorf("%w: %v", ErrSyntax, err)})
		return nil
	}
	s := &Skill{File: p.file, Body: string(body)}
	if filepath.Base(p.file) == "SKILL.md" {
		s.Dir = filepath.Dir(p.file)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		p.errorf(1, "", "the front matter must be a mapping of fields (%s)", strings.Join(fields, ", "))
		return nil
	}
	m := doc.Content[0]
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if first, dup := seen[k.Value]; dup {
			p.errorf(k.Line, k.Value, "given twice (first on line %d)", first+p.base)
			continue
		}
		seen[k.Value] = k.Line
		switch k.Value {
		case "name":
			if n, ok := p.str(k.Value, v); ok {
				want := nameOf(p.file)
				switch {
				case !NameRE.MatchString(n):
					p.errorf(v.Line, "name", "%q is not a skill name (lower-case letters, digits, - and _, starting with a letter, at most 64)", n)
				case n != want:
					p.errorf(v.Line, "name", "%q differs from the name the file is found by, %q (NAME.md or NAME/SKILL.md)", n, want)
				}
				s.Name = n
			}
		case "description":
			if d, ok := p.str(k.Value, v); ok {
				switch {
				case strings.TrimSpace(d) == "":
					p.errorf(v.Line, "description", "empty (expected one line saying when the skill helps)")
				case strings.ContainsAny(strings.TrimRight(d, "\n"), "\n\r"):
					p.errorf(v.Line, "description", "more than one line (it goes in every agent's system prompt: keep it to one)")
				case len(d) > maxDescription:
					p.errorf(v.Line, "description", "%d bytes (at most %d: the body says the rest)", len(d), maxDescription)
				}
				s.Description = strings.TrimSpace(d)
			}
		case "when":
			s.When = p.when(v)
		case "tools":
			s.Tools = p.tools(v)
		default:
			p.errorf(k.Line, "", "unknown field %q (expected %s)", k.Value, strings.Join(fields, ", "))
		}
	}
	if _, ok := seen["name"]; !ok {
		p.errorf(1, "name", "missing (expected the skill's name, %q)", nameOf(p.file))
	}
	if _, ok := seen["description"]; !ok {
		p.errorf(1, "description", "missing (expected one line saying when the skill helps)")
	}
	if strings.TrimSpace(s.Body) == "" {
		p.errs = append(p.errs, &Error{Kind: "skills", File: p.file, Field: "body", Err: errors.New("empty (the markdown after the front matter is what the agent reads)")})
	}
	return s
}

// split separates the front matter from the body.
func split(data []byte) (front, body []byte, ok bool) {
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(data, []byte("---\n"))
	if !ok {
		return nil, nil, false
	}
	if after, ok := bytes.CutPrefix(rest, []byte("---\n")); ok {
		return nil, after, true
	}
	i := bytes.Index(rest, []byte("\n---\n"))
	if i < 0 {
		if bytes.HasSuffix(rest, []byte("\n---")) {
			return rest[:len(rest)-4], nil, true
		}
		return nil, nil, false
	}
	return rest[:i+1], rest[i+5:], true
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "nothing"
	case "!!bool":
		return "a boolean"
	case "!!int", "!!float":
		return "a number"
	}
	return "a string"
}

// str reads a scalar that YAML calls a string: "yes" or 12 would be a
// boolean or a number to other readers, so they are refused, not coerced.
func (p *parser) str(field string, v *yaml.Node) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		p.errorf(v.Line, field, "expected a string, got %s", kindOf(v))
		return "", false
	}
	return v.Value, true
}

func (p *parser) when(v *yaml.Node) []meta.Condition {
	keys := meta.MatchKeys()
	if v.Kind != yaml.MappingNode {
		p.errorf(v.Line, "when", "expected a mapping of conditions (%s), got %s", strings.Join(keys, ", "), kindOf(v))
		return nil
	}
	var conds []meta.Condition
	seen := map[string]bool{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		at := "when." + k.Value
		if seen[k.Value] {
			p.errorf(k.Line, at, "given twice")
			continue
		}
		seen[k.Value] = true
		if !slices.Contains(keys, k.Value) {
			p.errorf(k.Line, "when", "unknown key %q (expected %s)", k.Value, strings.Join(keys, ", "))
			continue
		}
		s, ok := p.str(at, val)
		if !ok {
			continue
		}
		c, err := meta.NewCondition(k.Value, s)
		if err != nil {
			p.errorf(val.Line, at, "%v", err)
			continue
		}
		conds = append(conds, c)
	}
	return conds
}

func (p *parser) tools(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v.Line, "tools", "expected a list of tool names, got %s", kindOf(v))
		return nil
	}
	var out []string
	for i, item := range v.Content {
		at := fmt.Sprintf("tools[%d]", i)
		s, ok := p.str(at, item)
		if !ok {
			continue
		}
		switch {
		case !toolNameRE.MatchString(s):
			p.errorf(item.Line, at, "%q is not a tool name (lower-case letters, digits and _, starting with a letter)", s)
		case slices.Contains(out, s):
			p.errorf(item.Line, at, "%q is listed twice", s)
		default:
			out = append(out, s)
		}
	}
	return out
}
