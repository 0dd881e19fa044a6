package toolsrv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Host is what variant matching and executable resolution ask of the machine
// the tools run on. LocalHost is the real one; tests use fakes.
type Host interface {
	// LookPath finds an executable in PATH, like exec.LookPath.
	LookPath(file string) (string, error)
	// Stat follows symbolic links, like os.Stat.
	Stat(name string) (fs.FileInfo, error)
	// Getenv returns "" for an unset variable.
	Getenv(key string) string
	GOOS() string
	GOARCH() string
}

// LocalHost is the machine this process runs on.
type LocalHost struct{}

func (LocalHost) LookPath(file string) (string, error)  { return exec.LookPath(file) }
func (LocalHost) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }
func (LocalHost) Getenv(key string) string              { return os.Getenv(key) }
func (LocalHost) GOOS() string                          { return runtime.GOOS }
func (LocalHost) GOARCH() string                        { return runtime.GOARCH }

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

// Check is one match condition evaluated on a host.
type Check struct {
	Condition
	OK     bool
	Detail string // what was found, e.g. `binary "journalctl" found at /usr/bin/journalctl`
}

// Skip is a variant that did not match, with the conditions that failed.
type Skip struct {
	Variant int
	Failed  []Check
}

// Explanation says how a tool was resolved on a host: which variant was
// chosen and why, why each earlier variant was skipped, and which executable
// resolved. Its String is what `olliesrv tools` prints.
type Explanation struct {
	Name    string
	File    string // the .meta
	Status  Status
	Variant int     // the chosen variant; -1 when the .meta has none, or none matched
	Chosen  []Check // the chosen variant's conditions, all held
	Skipped []Skip  // the variants before the chosen one; all of them when Hidden

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

// On evaluates the condition on h: what variants and skills (package
// skills) both ask of a host.
func (c Condition) On(h Host) Check { return check(c, h) }

// check evaluates one condition on h.
func check(c Condition, h Host) Check {
	ck := Check{Condition: c}
	switch c.Key {
	case "binary":
		if filepath.IsAbs(c.Value) {
			ck.OK = isExecutable(h, c.Value)
			ck.Detail = fmt.Sprintf("binary %q is an executable file", c.Value)
			if !ck.OK {
				ck.Detail = fmt.Sprintf("binary %q is not an executable file", c.Value)
			}
			break
		}
		p, err := h.LookPath(c.Value)
		ck.OK = err == nil
		ck.Detail = fmt.Sprintf("binary %q found at %s", c.Value, p)
		if !ck.OK {
			ck.Detail = fmt.Sprintf("binary %q not found in PATH", c.Value)
		}
	case "file":
		_, err := h.Stat(c.Value)
		ck.OK = err == nil
		switch {
		case err == nil:
			ck.Detail = fmt.Sprintf("file %q exists", c.Value)
		case errors.Is(err, fs.ErrNotExist):
			ck.Detail = fmt.Sprintf("file %q does not exist", c.Value)
		default:
			ck.Detail = fmt.Sprintf("file %q: %v", c.Value, err)
		}
	case "os":
		ck.OK = h.GOOS() == c.Value
		ck.Detail = fmt.Sprintf("os is %q", c.Value)
		if !ck.OK {
			ck.Detail = fmt.Sprintf("os is %q, not %q", h.GOOS(), c.Value)
		}
	case "arch":
		ck.OK = h.GOARCH() == c.Value
		ck.Detail = fmt.Sprintf("arch is %q", c.Value)
		if !ck.OK {
			ck.Detail = fmt.Sprintf("arch is %q, not %q", h.GOARCH(), c.Value)
		}
	case "env":
		ck.OK = h.Getenv(c.Value) != ""
		ck.Detail = fmt.Sprintf("env %s is set", c.Value)
		if !ck.OK {
			ck.Detail = fmt.Sprintf("env %s is empty", c.Value)
		}
	case "nenv":
		ck.OK = h.Getenv(c.Value) == ""
		ck.Detail = fmt.Sprintf("nenv %s is empty", c.Value)
		if !ck.OK {
			ck.Detail = fmt.Sprintf("nenv %s is set", c.Value)
		}
	default: // ParseMeta admits no other key
		ck.Detail = fmt.Sprintf("unknown condition %s", c)
	}
	return ck
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(h Host, path string) bool {
	fi, err := h.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Resolve resolves m, found in the tools dir dir, against host h: the first
// variant whose conditions all hold supplies the fields the top level does
// not, and the executable is looked up (see resolveExecutable). The Tool is
// nil when the explanation's Status is Hidden or Broken.
func Resolve(m *Meta, dir string, h Host) (*Tool, *Explanation) {
	ex := &Explanation{Name: m.Name, File: m.File, Variant: -1}
	f := m.Fields
	fromVariant := Fields{}
	if m.Variants != nil {
		chosen := -1
		for i, v := range m.Variants {
			var failed []Check
			checks := make([]Check, len(v.Match))
			for j, c := range v.Match {
				checks[j] = check(c, h)
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
		f = merge(m.Fields, fromVariant)
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
		ex.Status, ex.Err = Broken, &MetaError{File: m.File, Field: field, Msg: err.Error(), Err: ErrNoExecutable}
		return nil, ex
	}
	t.Path, ex.Executable, ex.Via = path, path, via
	return t, ex
}

// ErrNoExecutable is wrapped by the *MetaError of a tool whose executable
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
func resolveExecutable(name, dir, cmd string, h Host) (path, via string, err error) {
	if p := filepath.Join(dir, name); isExecutable(h, p) {
		return p, "named after the tool, in its tools dir", nil
	}
	switch {
	case cmd == "":
	case filepath.IsAbs(cmd):
		if !isExecutable(h, cmd) {
			return "", "", fmt.Errorf("cmd %q is not an executable file", cmd)
		}
		return cmd, fmt.Sprintf("cmd %q", cmd), nil
	default:
		if p := filepath.Join(dir, cmd); isExecutable(h, p) {
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
