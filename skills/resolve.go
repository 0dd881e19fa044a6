package skills

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"ollie/internal/paths"
	"ollie/toolsrv/meta"
)

// DefaultDirs is where a host's skills are found: the host's own,
// $XDG_CONFIG_HOME/ollie/skills (by default ~/.config/ollie/skills), then
// the deployed ones, skills in the data directory. The first directory
// holding a name wins, whole, as for agent profiles.
func DefaultDirs() []string { return paths.Defaults("skills") }

// Status is whether a skill found on the search path is offered on a host.
type Status int

const (
	Offered  Status = iota // its conditions hold here
	Skipped                // a condition does not hold here
	Broken                 // its file is wrong (Err)
	Shadowed               // an earlier directory holds the same name
)

func (s Status) String() string {
	switch s {
	case Offered:
		return "offered"
	case Skipped:
		return "skipped"
	case Broken:
		return "broken"
	case Shadowed:
		return "shadowed"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// An Entry is one skill file found on the search path and what became of
// it on the host.
type Entry struct {
	Name   string
	File   string
	Status Status
	Skill  *Skill       // nil when Broken
	Checks []meta.Check // Offered: every condition, held; Skipped: those that failed
	Err    error        // Broken: why
	By     string       // Shadowed: the file that wins
}

// Reason says why the skill is offered or not, in the words `olliesrv
// tools` uses for variants.
func (e *Entry) Reason() string {
	switch e.Status {
	case Offered, Skipped:
		if len(e.Checks) == 0 {
			return "no conditions"
		}
		d := make([]string, len(e.Checks))
		for i, c := range e.Checks {
			d[i] = c.Detail
		}
		return strings.Join(d, ", ")
	case Broken:
		return strings.ReplaceAll(e.Err.Error(), "\n", "; ")
	case Shadowed:
		return "shadowed by " + e.By
	}
	return ""
}

// A Catalog is the skills of one host: the files along Dirs, resolved
// against Host.
type Catalog struct {
	Dirs []string
	Host meta.Host
}

// Local is the catalog of this host, as olliesrv serves it.
func Local() Catalog { return Catalog{Dirs: DefaultDirs(), Host: meta.LocalHost{}} }

// Resolve reads every skill along the catalog's directories and says, for
// each, whether the host offers it and why. Entries are sorted by name, the
// winning file of a name before those it shadows. A directory that does not
// exist holds no skills.
func (c Catalog) Resolve() []Entry {
	var out []Entry
	winner := map[string]string{}
	for _, dir := range c.Dirs {
		for _, f := range find(dir) {
			e := Entry{Name: f.name, File: f.file}
			if by, ok := winner[f.name]; ok {
				e.Status, e.By = Shadowed, by
				out = append(out, e)
				continue
			}
			winner[f.name] = f.file
			e.resolve(f, c.Host)
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (e *Entry) resolve(f found, h meta.Host) {
	if f.err != nil {
		e.Status, e.Err = Broken, f.err
		return
	}
	data, err := os.ReadFile(f.file)
	if err == nil && len(data) > MaxFileSize {
		err = &Error{Kind: "skills", File: f.file, Err: fmt.Errorf("the file is %d bytes (a skill may be at most %d KiB)", len(data), MaxFileSize>>10)}
	}
	if err == nil {
		e.Skill, err = Parse(f.file, data)
	}
	if err != nil {
		e.Status, e.Err = Broken, err
		return
	}
	e.Status = Offered
	var failed []meta.Check
	for _, cond := range e.Skill.When {
		ck := cond.On(h)
		e.Checks = append(e.Checks, ck)
		if !ck.OK {
			failed = append(failed, ck)
		}
	}
	if len(failed) > 0 {
		e.Status, e.Checks = Skipped, failed
	}
}

// found is a candidate skill file in one directory.
type found struct {
	name, file string
	err        error
}

// find lists the skill files of dir: NAME.md, and NAME/SKILL.md. A folder
// without SKILL.md, a name given both ways and a file named against the
// rules are broken entries, not silently ignored ones; other files (not
// .md, or hidden) are not skills.
func find(dir string) []found {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []found
	byName := map[string]int{}
	add := func(f found) {
		if i, ok := byName[f.name]; ok {
			out[i].err = &Error{Kind: "skills", File: f.file, Field: "name", Err: fmt.Errorf("the skill %q is given twice in %s (as %s and %s): keep one", f.name, dir, filepath.Base(out[i].file), filepath.Base(f.file))}
			return
		}
		if !NameRE.MatchString(f.name) && f.err == nil {
			f.err = &Error{Kind: "skills", File: f.file, Field: "name", Err: fmt.Errorf("%q (the file's name) is not a skill name (lower-case letters, digits, - and _, starting with a letter)", f.name)}
		}
		byName[f.name] = len(out)
		out = append(out, f)
	}
	for _, de := range ents {
		n := de.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		p := filepath.Join(dir, n)
		fi, err := os.Stat(p) // a symbolic link counts as what it names
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			f := found{name: n, file: filepath.Join(p, "SKILL.md")}
			if _, err := os.Stat(f.file); err != nil {
				f.err = &Error{Kind: "skills", File: p, Err: errors.New("a folder among the skills has no SKILL.md")}
			}
			add(f)
		case strings.HasSuffix(n, ".md"):
			add(found{name: strings.TrimSuffix(n, ".md"), file: p})
		}
	}
	return out
}

// Offered returns the skills the host offers, by name.
func (c Catalog) Offered() []*Skill {
	var out []*Skill
	for _, e := range c.Resolve() {
		if e.Status == Offered {
			out = append(out, e.Skill)
		}
	}
	return out
}

// ErrUnknown is wrapped by Lookup's error for a name no directory holds.
var ErrUnknown = errors.New("no such skill")

// ErrNotOffered is wrapped by Lookup's error for a skill the host does not
// offer: skipped, broken or shadowed.
var ErrNotOffered = errors.New("not offered on this host")

// Lookup returns the skill called name when the host offers it; otherwise
// the error says why not, and lists the skills on offer.
func (c Catalog) Lookup(name string) (*Skill, error) {
	all := c.Resolve()
	var offered []string
	for _, e := range all {
		if e.Status == Offered {
			offered = append(offered, e.Name)
		}
	}
	list := "none"
	if len(offered) > 0 {
		list = strings.Join(offered, ", ")
	}
	for _, e := range all {
		if e.Name != name || e.Status == Shadowed {
			continue
		}
		if e.Status == Offered {
			return e.Skill, nil
		}
		return nil, fmt.Errorf("skills: %q is %w (%s: %s; offered: %s)", name, ErrNotOffered, e.Status, e.Reason(), list)
	}
	return nil, fmt.Errorf("skills: %w %q (offered: %s)", ErrUnknown, name, list)
}
