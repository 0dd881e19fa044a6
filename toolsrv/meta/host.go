package meta

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// Check is one match condition evaluated on a host.
type Check struct {
	Condition
	OK     bool
	Detail string // what was found, e.g. `binary "journalctl" found at /usr/bin/journalctl`
}

// On evaluates the condition on h: what variants and skills (package
// skills) both ask of a host.
func (c Condition) On(h Host) Check {
	ck := Check{Condition: c}
	switch c.Key {
	case "binary":
		if filepath.IsAbs(c.Value) {
			ck.OK = Executable(h, c.Value)
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
	default: // NewCondition admits no other key
		ck.Detail = fmt.Sprintf("unknown condition %s", c)
	}
	return ck
}

// Executable reports whether path is, on h, a regular file with an execute
// bit: what a "binary" condition with an absolute path asks, and what
// toolsrv asks of a tool's executable.
func Executable(h Host, path string) bool {
	fi, err := h.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
