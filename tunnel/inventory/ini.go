package inventory

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	iniSection   = regexp.MustCompile(`^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$`)
	iniGroupName = regexp.MustCompile(`^([^:\]\s]+)\s*(?:#.*)?$`)
)

// readINI reads an INI inventory as Ansible's ini plugin does: host lines
// ("web1 ansible_host=10.0.0.1", ranges as web[01:03]) before any section
// are ungrouped; [g] holds hosts, [g:children] groups and [g:vars]
// key=value lines. A group may be named as a child before it is declared,
// but in the end every one must be.
func (s *static) readINI(name string, b []byte) error {
	waiting := map[string]*iniPending{}
	var order []string // of waiting, for the first error
	group, state := "ungrouped", "hosts"
	for n, line := range strings.Split(string(b), "\n") {
		lineno := n + 1
		fail := func(format string, args ...any) error {
			return &SyntaxError{File: name, Line: lineno, Msg: fmt.Sprintf(format, args...)}
		}
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if m := iniSection.FindStringSubmatch(line); m != nil {
			group, state = m[1], m[2]
			if state == "" {
				state = "hosts"
			}
			if state != "hosts" && state != "children" && state != "vars" {
				return fail("section [%s:%s] has unknown type %s", m[1], m[2], m[2])
			}
			if s.groups[group] == nil {
				// [g:vars] alone does not declare g.
				if state == "vars" && waiting[group] == nil {
					waiting[group] = &iniPending{line: lineno, state: state}
					order = append(order, group)
				}
				s.group(group)
			}
			if p := waiting[group]; p != nil && state != "vars" {
				if p.state == "children" {
					if err := s.adoptWaiting(group, waiting); err != nil {
						return fail("%v", err)
					}
				} else {
					delete(waiting, group)
				}
			}
			continue
		}
		if line[0] == '[' && line[len(line)-1] == ']' {
			return fail("invalid section %s: no spaces or other characters may follow the group name", line)
		}
		switch state {
		case "hosts":
			words, err := splitWords(line, true)
			if err != nil {
				return fail("host line %s: %v", line, err)
			}
			if len(words) == 0 {
				continue
			}
			hosts, port, err := expandHostPattern(words[0])
			if err != nil {
				return fail("%v", err)
			}
			vars := map[string]any{}
			for _, w := range words[1:] {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					return fail("expected key=value host variable assignment, got: %s", w)
				}
				vars[k] = pythonValue(v)
			}
			for _, h := range hosts {
				s.addHost(h, group, port)
				merge(s.hosts[h], vars)
			}
		case "vars":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return fail("expected key=value, got: %s", line)
			}
			s.setGroupVar(group, strings.TrimSpace(k), pythonValue(strings.TrimSpace(v)))
		case "children":
			m := iniGroupName.FindStringSubmatch(line)
			if m == nil {
				return fail("expected a group name, got: %s", line)
			}
			child := m[1]
			if s.groups[child] != nil {
				if err := s.addChild(group, child); err != nil {
					return fail("%v", err)
				}
				continue
			}
			if p := waiting[child]; p != nil {
				p.parents = append(p.parents, group)
			} else {
				waiting[child] = &iniPending{line: lineno, state: "children", parents: []string{group}}
				order = append(order, child)
			}
		}
	}
	for _, g := range order {
		p := waiting[g]
		if p == nil {
			continue
		}
		if p.state == "vars" {
			return &SyntaxError{File: name, Line: p.line, Msg: fmt.Sprintf("section [%s:vars] is for a group that is never declared", g)}
		}
		return &SyntaxError{File: name, Line: p.line, Msg: fmt.Sprintf("section [%s:children] names group %s, which is never declared", p.parents[len(p.parents)-1], g)}
	}
	return nil
}

// iniPending is a group named before it is declared: as a child (state
// "children", with the groups that named it) or by its [g:vars].
type iniPending struct {
	line    int
	state   string
	parents []string
}

// adoptWaiting makes a group declared at last the child of the groups
// that named it, and so on up for those waiting themselves.
func (s *static) adoptWaiting(group string, waiting map[string]*iniPending) error {
	p := waiting[group]
	for _, parent := range p.parents {
		if err := s.addChild(parent, group); err != nil {
			return err
		}
		if pp := waiting[parent]; pp != nil && pp.state == "children" && parent != group {
			if err := s.adoptWaiting(parent, waiting); err != nil {
				return err
			}
		}
	}
	delete(waiting, group)
	return nil
}

// pythonValue is what Python's ast.literal_eval makes of an INI value,
// as far as it matters here: numbers, quoted strings, True, False and
// None; anything else stays the string it is.
func pythonValue(v string) any {
	switch v {
	case "True":
		return true
	case "False":
		return false
	case "None":
		return nil
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(v, "+")); err == nil && v != "" {
		return n
	}
	if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
		if s, ok := pythonString(v[1:len(v)-1], v[0]); ok {
			return s
		}
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && strings.ContainsAny(v, ".eE") && !strings.ContainsAny(v, "xXnN_") {
		return f
	}
	return v
}

// pythonString undoes the escapes of a Python string literal's body.
func pythonString(body string, quote byte) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == quote {
			return "", false // the literal ended early: not one string
		}
		if c != '\\' || i+1 == len(body) {
			b.WriteByte(c)
			continue
		}
		i++
		switch body[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '\\', '\'', '"':
			b.WriteByte(body[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(body[i])
		}
	}
	return b.String(), true
}
