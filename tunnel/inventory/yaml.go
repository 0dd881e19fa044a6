package inventory

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// errNotYAML is a file without an extension that is no YAML mapping:
// Ansible's INI plugin has it next.
var errNotYAML = errors.New("not a YAML inventory")

// readYAML reads a YAML inventory: top-level keys are groups (usually
// just all), each with hosts (a mapping of host patterns to their vars),
// children (a mapping of groups) and vars. Unless strict, a file that is
// not a YAML mapping is errNotYAML.
func (s *static) readYAML(name string, b []byte, strict bool) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		if !strict {
			return errNotYAML
		}
		return &SyntaxError{File: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		if !strict {
			return errNotYAML
		}
		return &SyntaxError{File: name, Msg: "a YAML inventory is a mapping of groups"}
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "plugin" {
			return &SyntaxError{File: name, Line: top.Content[i].Line, Msg: fmt.Sprintf("the configuration of inventory plugin %s: running it takes ansible-inventory, which is not used (install ansible-core)", top.Content[i+1].Value)}
		}
	}
	y := yamlReader{s: s, file: name}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if _, err := y.group(top.Content[i], top.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

type yamlReader struct {
	s    *static
	file string
}

func (y yamlReader) err(n *yaml.Node, format string, args ...any) error {
	return &SyntaxError{File: y.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// group reads one group's definition. Like Ansible, it skips what is not
// a mapping rather than failing on it.
func (y yamlReader) group(key, val *yaml.Node) (string, error) {
	key, val = deref(key), deref(val)
	if key.Kind != yaml.ScalarNode {
		return "", y.err(key, "a group name must be a string")
	}
	name := key.Value
	if !isNull(val) && val.Kind != yaml.MappingNode {
		return "", nil // Ansible warns and skips it
	}
	y.s.group(name)
	if isNull(val) {
		return name, nil
	}
	for i := 0; i+1 < len(val.Content); i += 2 {
		section, body := deref(val.Content[i]), deref(val.Content[i+1])
		if isNull(body) {
			continue
		}
		// A bare string stands for a mapping of that one key.
		if body.Kind == yaml.ScalarNode && body.Tag == "!!str" && (section.Value == "hosts" || section.Value == "children" || section.Value == "vars") {
			body = &yaml.Node{Kind: yaml.MappingNode, Line: body.Line, Content: []*yaml.Node{body, {Kind: yaml.ScalarNode, Tag: "!!null"}}}
		}
		if body.Kind != yaml.MappingNode {
			if section.Value == "hosts" || section.Value == "children" || section.Value == "vars" {
				return "", y.err(body, "%q of group %s must be a mapping", section.Value, name)
			}
			continue
		}
		switch section.Value {
		case "vars":
			var vars map[string]any
			if err := body.Decode(&vars); err != nil {
				return "", y.err(body, "vars of group %s: %v", name, strings.TrimPrefix(err.Error(), "yaml: "))
			}
			for k, v := range vars {
				y.s.setGroupVar(name, k, v)
			}
		case "children":
			for j := 0; j+1 < len(body.Content); j += 2 {
				child, err := y.group(body.Content[j], body.Content[j+1])
				if err != nil {
					return "", err
				}
				if child == "" {
					continue
				}
				if err := y.s.addChild(name, child); err != nil {
					return "", y.err(body.Content[j], "%v", err)
				}
			}
		case "hosts":
			for j := 0; j+1 < len(body.Content); j += 2 {
				hk, hv := deref(body.Content[j]), deref(body.Content[j+1])
				if hk.Kind != yaml.ScalarNode || hk.Tag != "!!str" {
					return "", y.err(hk, "host pattern %s must be a string: enclose numbers in quotes", hk.Value)
				}
				hosts, port, err := expandHostPattern(hk.Value)
				if err != nil {
					return "", y.err(hk, "%v", err)
				}
				var vars map[string]any
				if !isNull(hv) {
					if hv.Kind != yaml.MappingNode {
						return "", y.err(hv, "vars of host %s must be a mapping", hk.Value)
					}
					if err := hv.Decode(&vars); err != nil {
						return "", y.err(hv, "vars of host %s: %v", hk.Value, strings.TrimPrefix(err.Error(), "yaml: "))
					}
				}
				for _, h := range hosts {
					y.s.addHost(h, name, port)
					merge(y.s.hosts[h], vars)
				}
			}
		}
	}
	return name, nil
}
