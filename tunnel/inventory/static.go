package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// static is an inventory read from its files without Ansible, built the
// way Ansible's InventoryData is, so that both give the same hosts,
// groups and vars.
type static struct {
	groups map[string]*sgroup
	gorder []string                  // groups in the order they were made
	hosts  map[string]map[string]any // each host's own vars
	horder []string
}

type sgroup struct {
	name     string
	hosts    []string
	children []string
	parents  []string
	vars     map[string]any
	priority int
	depth    int // -1 until computed
}

func newStatic() *static {
	s := &static{groups: map[string]*sgroup{}, hosts: map[string]map[string]any{}}
	s.group("all")
	s.group("ungrouped")
	s.addChild("all", "ungrouped")
	return s
}

// group returns the group of that name, making it if need be.
func (s *static) group(name string) *sgroup {
	g := s.groups[name]
	if g == nil {
		g = &sgroup{name: name, vars: map[string]any{}, priority: 1, depth: -1}
		s.groups[name] = g
		s.gorder = append(s.gorder, name)
	}
	return g
}

// addHost adds a host to a group. A port given with the host's name
// (web1:2222) is its ansible_port, set when the host is first seen.
func (s *static) addHost(host, group string, port int) {
	if _, ok := s.hosts[host]; !ok {
		s.hosts[host] = map[string]any{}
		s.horder = append(s.horder, host)
		if port > 0 {
			s.hosts[host]["ansible_port"] = port
		}
	}
	g := s.group(group)
	if !slices.Contains(g.hosts, host) {
		g.hosts = append(g.hosts, host)
	}
}

func (s *static) ancestors(name string, into map[string]bool) {
	for _, p := range s.groups[name].parents {
		if !into[p] {
			into[p] = true
			s.ancestors(p, into)
		}
	}
}

// addChild makes child a child of parent, refusing a loop as Ansible does.
func (s *static) addChild(parent, child string) error {
	p, c := s.group(parent), s.group(child)
	if parent == child {
		return fmt.Errorf("group %s cannot be a child of itself", child)
	}
	if slices.Contains(p.children, child) {
		return nil
	}
	up := map[string]bool{}
	s.ancestors(parent, up)
	if up[child] {
		return fmt.Errorf("group %s as a child of %s makes a loop", child, parent)
	}
	p.children = append(p.children, child)
	c.parents = append(c.parents, parent)
	return nil
}

func (s *static) setGroupVar(group, key string, v any) {
	g := s.group(group)
	if key == "ansible_group_priority" {
		if s, err := stringVar(v); err == nil {
			if n, err := strconv.Atoi(s); err == nil {
				g.priority = n
			}
		}
		return
	}
	g.vars[key] = v
}

// finish does what Ansible does once every source is read (groups with no
// parent are children of all; a host in no group is in ungrouped), then
// applies group vars and group_vars/ and host_vars/ beside the inventory.
func (s *static) finish(varsDir string) (*inventory, error) {
	for _, name := range s.gorder {
		if name != "all" && len(s.groups[name].parents) == 0 {
			s.addChild("all", name)
		}
	}
	direct := map[string][]string{} // host → groups holding it directly
	for _, name := range s.gorder {
		for _, h := range s.groups[name].hosts {
			direct[h] = append(direct[h], name)
		}
	}
	ungrouped := s.groups["ungrouped"]
	for _, h := range s.horder {
		other := slices.ContainsFunc(direct[h], func(g string) bool { return g != "all" && g != "ungrouped" })
		if other {
			ungrouped.hosts = slices.DeleteFunc(ungrouped.hosts, func(x string) bool { return x == h })
		} else if !slices.Contains(ungrouped.hosts, h) {
			ungrouped.hosts = append(ungrouped.hosts, h)
		}
	}
	s.groups["all"].hosts = nil // they are all in ungrouped now

	groupFiles, hostFiles := map[string]map[string]any{}, map[string]map[string]any{}
	for _, name := range s.gorder {
		v, err := varsFiles(filepath.Join(varsDir, "group_vars"), name)
		if err != nil {
			return nil, err
		}
		groupFiles[name] = v
	}
	for _, h := range s.horder {
		v, err := varsFiles(filepath.Join(varsDir, "host_vars"), h)
		if err != nil {
			return nil, err
		}
		hostFiles[h] = v
	}

	inv := &inventory{groups: map[string]*group{}, vars: map[string]map[string]any{}}
	for _, name := range s.gorder {
		g := s.groups[name]
		inv.groups[name] = &group{hosts: g.hosts, children: g.children}
	}
	for _, h := range s.horder {
		in := map[string]bool{}
		for _, g := range direct[h] {
			in[g] = true
			s.ancestors(g, in)
		}
		delete(in, "all")
		groups := make([]*sgroup, 0, len(in))
		for g := range in {
			groups = append(groups, s.groups[g])
		}
		sort.Slice(groups, func(i, j int) bool {
			a, b := groups[i], groups[j]
			if da, db := s.depth(a), s.depth(b); da != db {
				return da < db
			}
			if a.priority != b.priority {
				return a.priority < b.priority
			}
			return a.name < b.name
		})
		// Ansible's order: all's vars, then the other groups', then the
		// same from group_vars/; then the host's, then host_vars/.
		vars := map[string]any{}
		merge(vars, s.groups["all"].vars)
		for _, g := range groups {
			merge(vars, g.vars)
		}
		merge(vars, groupFiles["all"])
		for _, g := range groups {
			merge(vars, groupFiles[g.name])
		}
		merge(vars, s.hosts[h])
		merge(vars, hostFiles[h])
		inv.vars[h] = vars
	}
	return inv, nil
}

// depth is the longest way down from all, which orders group vars: a
// child's win over its parent's.
func (s *static) depth(g *sgroup) int {
	if g.depth >= 0 {
		return g.depth
	}
	d := 0
	for _, p := range g.parents {
		d = max(d, s.depth(s.groups[p])+1)
	}
	g.depth = d
	return d
}

func merge(into, from map[string]any) {
	for k, v := range from {
		into[k] = v
	}
}

// varsExts are the names Ansible reads in group_vars/ and host_vars/.
var varsExts = []string{"", ".yml", ".yaml", ".json"}

// varsFiles reads dir/NAME, NAME.yml, NAME.yaml, NAME.json, or the files
// of a directory dir/NAME/, as Ansible's host_group_vars plugin does.
func varsFiles(dir, name string) (map[string]any, error) {
	var files []string
	for _, ext := range varsExts {
		p := filepath.Join(dir, name+ext)
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") && f != p {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.IsDir() && slices.Contains(varsExts, filepath.Ext(f)) {
				files = append(files, f)
			}
			return nil
		})
		if err != nil {
			return nil, &SyntaxError{File: p, Msg: err.Error()}
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	vars := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, &SyntaxError{File: f, Msg: err.Error()}
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return nil, &SyntaxError{File: f, Msg: "not a YAML or JSON mapping of vars: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		merge(vars, v)
	}
	return vars, nil
}

// ignoredInDir are the names Ansible skips in an inventory directory
// (INVENTORY_IGNORE_EXTS and its IGNORED_ALWAYS): .ini files among them.
var ignoredInDir = regexp.MustCompile(`^\.|^host_vars$|^group_vars$|^vars_plugins$|(\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|\.rst|\.orig|\.ini|\.cfg|\.retry)$`)

// readStatic reads an inventory file, or a directory of them, itself.
func readStatic(name string) (*inventory, error) {
	st, err := os.Stat(name)
	if err != nil {
		return nil, &SyntaxError{File: name, Msg: "cannot read the inventory: " + errText(err)}
	}
	s := newStatic()
	if !st.IsDir() {
		kind, err := s.readFile(name)
		if err != nil {
			return nil, err
		}
		inv, err := s.finish(filepath.Dir(name))
		if err != nil {
			return nil, err
		}
		inv.name, inv.source = name, fmt.Sprintf("static %s inventory %s", kind, name)
		return inv, nil
	}
	if err := s.readDir(name); err != nil {
		return nil, err
	}
	inv, err := s.finish(name)
	if err != nil {
		return nil, err
	}
	inv.name, inv.source = name, "static inventory directory "+name
	return inv, nil
}

func (s *static) readDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return &SyntaxError{File: dir, Msg: errText(err)}
	}
	for _, e := range ents { // sorted by name, as Ansible reads them
		if ignoredInDir.MatchString(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p)
		if err != nil {
			return &SyntaxError{File: p, Msg: errText(err)}
		}
		if st.IsDir() {
			err = s.readDir(p)
		} else {
			_, err = s.readFile(p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readFile reads one inventory file as YAML or INI, chosen as Ansible's
// plugins choose: .yml, .yaml and .json are YAML; a file without an
// extension is YAML if it is a YAML mapping, else INI; anything else is
// INI. It says which it was.
func (s *static) readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", &SyntaxError{File: name, Msg: errText(err)}
	}
	if st, err := os.Stat(name); err == nil && st.Mode()&0o111 != 0 && bytes.HasPrefix(b, []byte("#!")) {
		return "", &SyntaxError{File: name, Msg: "an inventory script: running it takes ansible-inventory, which is not used (install ansible-core)"}
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yml", ".yaml", ".json":
		return "YAML", s.readYAML(name, b, true)
	case "":
		if err := s.readYAML(name, b, false); !errors.Is(err, errNotYAML) {
			return "YAML", err
		}
	}
	return "INI", s.readINI(name, b)
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
