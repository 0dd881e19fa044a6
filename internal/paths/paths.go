// Package paths says where ollie's files live: the user's home and the XDG
// base directories (read here and nowhere else, each by one rule), the
// deployed data directory beside the binary, the user's configuration and
// state, the desktop's sockets, and named files (profiles) found along an
// ordered list of directories.
package paths

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// DataDir is the deployed data directory: $OLLIE_DATA when set, otherwise
// data beside the directory holding the running binary (bin/olliesrv →
// data), following symbolic links to the binary.
func DataDir() string {
	if d := os.Getenv("OLLIE_DATA"); d != "" {
		return d
	}
	exe, err := os.Executable()
	if err != nil {
		return "data"
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), "data")
}

// Home is the user's home directory: $HOME when it is an absolute path,
// else the password database's. It says why when there is none.
func Home() (string, error) {
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return h, nil
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		return u.HomeDir, nil
	}
	return "", fmt.Errorf("no home directory: HOME is %q and the password database has none", os.Getenv("HOME"))
}

// XDG returns the XDG base directory variable name (XDG_CONFIG_HOME,
// XDG_STATE_HOME, XDG_RUNTIME_DIR, ...) when it holds an absolute path,
// else "": the specification says a relative one is to be ignored.
func XDG(name string) string {
	if d := os.Getenv(name); filepath.IsAbs(d) {
		return d
	}
	return ""
}

// ConfigDir is ollie's configuration directory: $XDG_CONFIG_HOME/ollie, by
// default ~/.config/ollie; "" when there is neither.
func ConfigDir() string { return ConfigDirFrom(os.Getenv) }

// ConfigDirFrom is ConfigDir with the environment read through getenv,
// for a caller that is handed an environment of its own.
func ConfigDirFrom(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "ollie")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".config", "ollie")
	}
	return ""
}

// CacheDir is ollie's cache directory: $XDG_CACHE_HOME/ollie, by default
// ~/.cache/ollie. With neither it is an error, never a shared name in /tmp
// that another local user could make first.
func CacheDir() (string, error) {
	if d := XDG("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ollie"), nil
	}
	home, err := Home()
	if err != nil {
		return "", fmt.Errorf("no cache directory: XDG_CACHE_HOME is not an absolute path and %v", err)
	}
	return filepath.Join(home, ".cache", "ollie"), nil
}

// UserDir is the user's directory for sub: $XDG_CONFIG_HOME/ollie/sub, by
// default ~/.config/ollie/sub. It reports false when there is no home.
func UserDir(sub string) (string, bool) {
	dir := ConfigDir()
	if dir == "" {
		return "", false
	}
	return filepath.Join(dir, sub), true
}

// Defaults returns the user's directory for sub followed by the deployed
// one, the order in which a user's file overrides a deployed one.
func Defaults(sub string) []string {
	var dirs []string
	if d, ok := UserDir(sub); ok {
		dirs = append(dirs, d)
	}
	return append(dirs, filepath.Join(DataDir(), sub))
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// Search finds NAME+Ext files along Dirs: the first directory holding one
// wins.
type Search struct {
	Dirs []string
	Ext  string // e.g. ".yaml"
}

// Find reads the file called name. When no directory holds it, or name is
// not a plain file name, the error wraps fs.ErrNotExist.
func (s Search) Find(name string) (file string, data []byte, err error) {
	if validName.MatchString(name) {
		for _, dir := range s.Dirs {
			file := filepath.Join(dir, name+s.Ext)
			data, err := os.ReadFile(file)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return file, data, err
		}
	}
	return "", nil, fs.ErrNotExist
}

// Names lists the names found in any directory, sorted, each once.
func (s Search) Names() []string {
	var names []string
	for _, dir := range s.Dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*"+s.Ext))
		for _, f := range files {
			n := strings.TrimSuffix(filepath.Base(f), s.Ext)
			if validName.MatchString(n) && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

// StateDir is where ollie keeps what must outlive its processes, on a host
// and on the desktop alike (session files, the daemon's log, histories,
// the listener's keys, fleet runs): $XDG_STATE_HOME/ollie, by default
// ~/.local/state/ollie. A relative XDG_STATE_HOME is ignored, as the XDG
// base directory specification says. With neither, there is no place of
// the user's own, and it says so: a shared fallback such as /tmp would be
// a directory another local user could make first.
func StateDir() (string, error) {
	if d := XDG("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "ollie"), nil
	}
	home, err := Home()
	if err != nil {
		return "", fmt.Errorf("no state directory: XDG_STATE_HOME is not an absolute path and %v", err)
	}
	return filepath.Join(home, ".local", "state", "ollie"), nil
}
