package toolsrv

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"ollie/toolsrv/meta"
)

// Status is whether a declared tool is offered on this host.
type Status int

const (
	Available Status = iota // a definition applies and its executable resolves
	Hidden                  // no variant matches this host
	Broken                  // a definition applies but no executable resolves
)

func (s Status) String() string {
	switch s {
	case Available:
		return "available"
	case Hidden:
		return "hidden"
	case Broken:
		return "broken"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Skip is a variant that did not match, with the conditions that failed.
type Skip struct {
	Variant int
	Failed  []meta.Check
}

// Explanation says how a tool was resolved on a host: which variant was
// chosen and why, why each earlier variant was skipped, and which executable
// resolved. Its String is what `olliesrv tools` prints.
type Explanation struct {
	Name    string
	File    string // the .meta
	Status  Status
	Variant int          // the chosen variant; -1 when the .meta has none, or none matched
	Chosen  []meta.Check // the chosen variant's conditions, all held
	Skipped []Skip       // the variants before the chosen one; all of them when Hidden

	Executable string // "" unless Available
	Via        string // how Executable was found
	Err        error  // why no executable resolved, when Broken
}

func (e *Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): ", e.Name, e.File)
	switch {
	case e.Status == Hidden:
		b.WriteString("hidden: no variant matches this host")
	case e.Variant < 0:
		b.WriteString("no variants")
	case len(e.Chosen) == 0:
		fmt.Fprintf(&b, "variants[%d] (match {} always holds)", e.Variant)
	default:
		details := make([]string, len(e.Chosen))
		for i, c := range e.Chosen {
			details[i] = c.Detail
		}
		fmt.Fprintf(&b, "variants[%d] (%s)", e.Variant, strings.Join(details, ", "))
	}
	for _, s := range e.Skipped {
		details := make([]string, len(s.Failed))
		for i, c := range s.Failed {
			details[i] = c.Detail
		}
		fmt.Fprintf(&b, "\n  variants[%d] skipped: %s", s.Variant, strings.Join(details, ", "))
	}
	switch e.Status {
	case Available:
		fmt.Fprintf(&b, "\n  executable: %s (%s)", e.Executable, e.Via)
	case Broken:
		fmt.Fprintf(&b, "\n  executable: none: %v", e.Err)
	}
	return b.String()
}

// Resolve resolves m, found in the tools dir dir, against host h: the first
// variant whose conditions all hold supplies the fields the top level does
// not, and the executable is looked up (see resolveExecutable). The Tool is
// nil when the explanation's Status is Hidden or Broken.
func Resolve(m *meta.Meta, dir string, h meta.Host) (*Tool, *Explanation) {
	ex := &Explanation{Name: m.Name, File: m.File, Variant: -1}
	f := m.Fields
	fromVariant := meta.Fields{}
	if m.Variants != nil {
		chosen := -1
		for i, v := range m.Variants {
			var failed []meta.Check
			checks := make([]meta.Check, len(v.Match))
			for j, c := range v.Match {
				checks[j] = c.On(h)
				if !checks[j].OK {
					failed = append(failed, checks[j])
				}
			}
			if len(failed) == 0 {
				chosen, ex.Chosen = i, checks
				break
			}
			ex.Skipped = append(ex.Skipped, Skip{Variant: i, Failed: failed})
		}
		if chosen < 0 {
			ex.Status = Hidden
			return nil, ex
		}
		ex.Variant = chosen
		fromVariant = m.Variants[chosen].Fields
		f = meta.Merge(m.Fields, fromVariant)
	}
	t := newTool(m, dir, ex.Variant, f)
	path, via, err := resolveExecutable(t.Name, dir, t.Cmd, h)
	if err != nil {
		field := ""
		if t.Cmd != "" {
			field = "cmd"
			if fromVariant.Cmd != nil {
				field = fmt.Sprintf("variants[%d].cmd", ex.Variant)
			}
		}
		ex.Status, ex.Err = Broken, &meta.Error{File: m.File, Field: field, Msg: err.Error(), Err: ErrNoExecutable}
		return nil, ex
	}
	t.Path, ex.Executable, ex.Via = path, path, via
	return t, ex
}

// ErrNoExecutable is wrapped by the *meta.Error of a tool whose executable
// does not resolve.
var ErrNoExecutable = errors.New("no executable")

// resolveExecutable finds a tool's executable in the seed's order:
//
//  1. an executable named after the tool in its tools dir, so that a wrapper
//     there shadows everything else;
//  2. cmd, when set: an absolute path as is (it must be an executable file),
//     a bare name first in the tools dir, then in PATH. A cmd that does not
//     resolve is an error; the tool name is not tried instead, since that
//     would run something the .meta did not ask for;
//  3. the tool's name in PATH.
func resolveExecutable(name, dir, cmd string, h meta.Host) (path, via string, err error) {
	if p := filepath.Join(dir, name); meta.Executable(h, p) {
		return p, "named after the tool, in its tools dir", nil
	}
	switch {
	case cmd == "":
	case filepath.IsAbs(cmd):
		if !meta.Executable(h, cmd) {
			return "", "", fmt.Errorf("cmd %q is not an executable file", cmd)
		}
		return cmd, fmt.Sprintf("cmd %q", cmd), nil
	default:
		if p := filepath.Join(dir, cmd); meta.Executable(h, p) {
			return p, fmt.Sprintf("cmd %q, in the tools dir", cmd), nil
		}
		if p, err := h.LookPath(cmd); err == nil {
			return p, fmt.Sprintf("cmd %q, in PATH", cmd), nil
		}
		return "", "", fmt.Errorf("cmd %q is neither in the tools dir %s nor in PATH", cmd, dir)
	}
	if p, err := h.LookPath(name); err == nil {
		return p, "named after the tool, in PATH", nil
	}
	return "", "", fmt.Errorf("no cmd, and no executable named %q in the tools dir %s nor in PATH", name, dir)
}
