package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Access is what a policy lets a tool do beneath a path.
type Access uint8

const (
	Read  Access = 1 << iota // open files for reading, list directories
	Write                    // write, truncate, create, remove, rename, link; connect to Unix sockets (ABI 9); ioctl (devices only, ABI 5)
	Exec                     // execute files
)

func (a Access) String() string {
	b := []byte("---")
	if a&Read != 0 {
		b[0] = 'r'
	}
	if a&Write != 0 {
		b[1] = 'w'
	}
	if a&Exec != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// A PathRule grants Access to a path and everything beneath it. The path
// is canonical (no symbolic link in it, /proc/self aside): the confining
// stage opens it without following links, so a path that became a link
// after the policy was resolved is refused rather than followed.
type PathRule struct {
	Path   string `json:"path"`
	Access Access `json:"access"`
	// ID, when set, is the file the path must still name when the call
	// starts: a session's directory, resolved when the session was made.
	// A directory moved away or swapped for another since is refused.
	ID *FileID `json:"id,omitempty"`
	// PerCall marks a rule for a path made for one call (its scratch
	// directory, {TMPDIR} when Vars.TmpDir is set): a pre-started helper
	// prepares the rest of the policy before the call comes, and adds
	// these when it does.
	PerCall bool `json:"per_call,omitempty"`
}

// A FileID names a file as the kernel does: its device and inode.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Skipped records a profile path that Resolve left out, and why.
type Skipped struct {
	Field  string `json:"field"`  // e.g. "read[3]"
	Entry  string `json:"entry"`  // as written in the profile
	Path   string `json:"path"`   // after templates, "" if none
	Reason string `json:"reason"` // e.g. "does not exist"
}

// A Policy is a resolved profile: concrete, existing paths. It is what
// crosses the pipe to the helper, as JSON.
//
// The zero Policy allows nothing: no path, no TCP bind or connect, no
// environment variable, and no best effort; its limits are [DefaultLimits].
type Policy struct {
	Profile    string     `json:"profile,omitempty"`
	File       string     `json:"file,omitempty"`
	Paths      []PathRule `json:"paths,omitempty"` // sorted by path, one rule per path
	Bind       Ports      `json:"bind"`
	Connect    Ports      `json:"connect"`
	Env        []string   `json:"env,omitempty"` // allowlist: NAME, PREFIX* or *
	Limits     Limits     `json:"limits"`
	BestEffort bool       `json:"best_effort,omitempty"`
	Skipped    []Skipped  `json:"skipped,omitempty"`
	// Protect lists what no tool may change, whatever the paths above
	// allow: what decides a tool's power (see [ProtectedPaths]). Where a
	// writable directory holds one, the call runs in a mount namespace of
	// its own in which they are read-only, or is refused where the host
	// cannot make one; a writable directory inside one is always refused.
	Protect []string `json:"protect,omitempty"`
}

// Vars are the values of a profile's templates. Empty fields fall back to
// the environment as documented on each.
type Vars struct {
	CWD       string   // {CWD}: the session's working directory; required when used
	Home      string   // {HOME}: "" means $HOME
	TmpDir    string   // {TMPDIR}: a per-call scratch directory; "" means $TMPDIR, then /tmp
	ToolsPath []string // {OLLIE_TOOLS_PATH}: nil means $OLLIE_TOOLS_PATH split on ':'

	// Getenv looks up {env:NAME}, the XDG variables and the fallbacks
	// above; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
}

func (v Vars) getenv(name string) string {
	look := v.Getenv
	if look == nil {
		look = os.LookupEnv
	}
	s, _ := look(name)
	return s
}

// expand returns the values of a template. A template with no value is
// reported by reason (the entry is skipped) or err (the profile cannot be
// resolved: {CWD} and {HOME} are never optional).
func (v Vars) expand(tmpl string) (vals []string, reason string, err error) {
	home := v.Home
	if home == "" {
		home = v.getenv("HOME")
	}
	xdg := func(name, def string) (string, string, error) {
		// The XDG spec says relative values are invalid and to be ignored.
		if s := v.getenv(name); filepath.IsAbs(s) {
			return s, "", nil
		}
		if home == "" {
			return "", "", fmt.Errorf("{%s} has no value: neither $%s nor $HOME is set", name, name)
		}
		return filepath.Join(home, def), "", nil
	}
	var s string
	switch tmpl {
	case "":
		return []string{""}, "", nil
	case "CWD":
		if v.CWD == "" {
			return nil, "", fmt.Errorf("{CWD} has no value: the caller gave no working directory")
		}
		s = v.CWD
	case "HOME":
		if home == "" {
			return nil, "", fmt.Errorf("{HOME} has no value: $HOME is not set")
		}
		s = home
	case "TMPDIR":
		s = v.TmpDir
		if s == "" {
			s = v.getenv("TMPDIR")
		}
		if s == "" {
			s = "/tmp"
		}
	case "XDG_CONFIG_HOME":
		s, reason, err = xdg(tmpl, ".config")
	case "XDG_CACHE_HOME":
		s, reason, err = xdg(tmpl, ".cache")
	case "XDG_DATA_HOME":
		s, reason, err = xdg(tmpl, ".local/share")
	case "XDG_STATE_HOME":
		s, reason, err = xdg(tmpl, ".local/state")
	case "XDG_RUNTIME_DIR":
		if s = v.getenv(tmpl); !filepath.IsAbs(s) {
			s = "/run/user/" + strconv.Itoa(os.Getuid())
		}
	case "OLLIE_BIN":
		exe, err := os.Executable()
		if err != nil {
			return nil, "{OLLIE_BIN}: " + err.Error(), nil
		}
		s = filepath.Dir(exe)
	case "OLLIE_TOOLS_PATH":
		list := v.ToolsPath
		if list == nil {
			list = filepath.SplitList(v.getenv(tmpl))
		}
		for _, d := range list {
			if filepath.IsAbs(d) {
				vals = append(vals, d)
			}
		}
		if len(vals) == 0 {
			return nil, "{OLLIE_TOOLS_PATH} names no absolute directory", nil
		}
		return vals, "", nil
	default:
		name := strings.TrimPrefix(tmpl, "env:")
		s = v.getenv(name)
		if s == "" {
			return nil, "$" + name + " is not set", nil
		}
	}
	if err != nil || reason != "" {
		return nil, reason, err
	}
	if !filepath.IsAbs(s) {
		if tmpl == "CWD" || tmpl == "HOME" {
			return nil, "", fmt.Errorf("{%s} is %q, not an absolute path", tmpl, s)
		}
		return nil, fmt.Sprintf("{%s} is %q, not an absolute path", tmpl, s), nil
	}
	return []string{s}, "", nil
}

// Canonical returns path with every symbolic link in it resolved, as the
// confining stage must find it. /proc/self and /proc/thread-self stay as
// they are: they name the process that opens them, which is the tool.
func Canonical(path string) (string, error) {
	if path == "/proc/self" || strings.HasPrefix(path, "/proc/self/") ||
		path == "/proc/thread-self" || strings.HasPrefix(path, "/proc/thread-self/") {
		_, err := os.Stat(path)
		return path, err
	}
	return filepath.EvalSymlinks(path)
}

// netRestricted reports whether the policy asks Landlock to restrict any
// TCP operation.
func (p *Policy) netRestricted() bool { return !p.Bind.Any || !p.Connect.Any }

// RequiredABI is the oldest Landlock ABI that enforces all of p: ABI 3 for
// filesystem rules (before it a read-only file could still be truncated),
// ABI 4 when TCP bind or connect is restricted.
func (p *Policy) RequiredABI() int {
	if p.netRestricted() {
		return 4
	}
	return 3
}

// Level says how much of a policy the kernel enforces.
type Level int

const (
	Unenforced Level = iota // nothing: no Landlock
	Partial                 // some of what the profile asks is not enforced
	Full                    // everything the profile asks
)

func (l Level) String() string {
	switch l {
	case Full:
		return "sandboxed"
	case Partial:
		return "PARTIALLY SANDBOXED"
	}
	return "UNSANDBOXED"
}

// Enforcement describes what a kernel enforces of a policy.
type Enforcement struct {
	ABI     int      // the kernel's Landlock ABI, 0 for none
	Level   Level    // of what the profile asks
	Missing []string // what the profile asks that is not enforced, and why
	Extra   []string // hardening beyond the profile that this ABI lacks

	// Limits says how each resource limit is applied on this host, and
	// Unlimited which limits of the profile this host cannot apply, and
	// why. They do not change Level: Level is about Landlock.
	Limits, Unlimited []string
}

func (e Enforcement) String() string {
	s := fmt.Sprintf("%s (Landlock ABI %d)", e.Level, e.ABI)
	if e.ABI == 0 {
		s = fmt.Sprintf("%s (no Landlock)", e.Level)
	}
	if len(e.Missing) > 0 {
		s += ": " + strings.Join(e.Missing, "; ")
	}
	if len(e.Unlimited) > 0 {
		s += "; LIMITS NOT ENFORCED: " + strings.Join(e.Unlimited, "; ")
	}
	return s
}

// enforcement computes what a kernel with Landlock ABI abi enforces of p.
func enforcement(abi int, p *Policy) Enforcement {
	e := Enforcement{ABI: abi, Level: Full}
	if abi <= 0 {
		e.ABI = 0
		e.Level = Unenforced
		e.Missing = []string{"the kernel has no Landlock: tools run with the user's full rights"}
		return e
	}
	if abi < 3 {
		e.Missing = append(e.Missing, fmt.Sprintf("truncating files is not restricted (needs ABI 3, kernel has %d)", abi))
	}
	if p.netRestricted() && abi < 4 {
		e.Missing = append(e.Missing, fmt.Sprintf("TCP bind and connect are not restricted (needs ABI 4, kernel has %d)", abi))
	}
	if len(e.Missing) > 0 {
		e.Level = Partial
	}
	if abi < 2 {
		e.Extra = append(e.Extra, "renaming or linking between directories is always denied (refer needs ABI 2)")
	}
	if abi < 5 {
		e.Extra = append(e.Extra, "ioctl on device files is not restricted (needs ABI 5)")
	}
	if abi < 6 {
		e.Extra = append(e.Extra, "abstract Unix sockets and signals reach outside the sandbox (scoping needs ABI 6)")
	}
	if abi < 9 {
		e.Extra = append(e.Extra, "connecting to pathname Unix sockets is not restricted (needs ABI 9)")
	}
	return e
}

// check returns nil if a kernel with Landlock ABI abi enforces all of p, or
// p is best effort; otherwise an error wrapping ErrNoLandlock or
// ErrABITooOld that says what is missing and how to proceed.
func check(abi int, p *Policy) error {
	e := enforcement(abi, p)
	if e.Level == Full || p.BestEffort {
		return nil
	}
	name := p.Profile
	if name == "" {
		name = "(unnamed)"
	}
	hint := fmt.Sprintf("use a kernel with Landlock ABI %d or newer, or set best_effort: true in profile %s to run tools %s", p.RequiredABI(), name, map[bool]string{true: "unsandboxed", false: "partially sandboxed"}[abi <= 0])
	if abi <= 0 {
		return fmt.Errorf("sandbox: refusing to run tools: %w (%s)", ErrNoLandlock, hint)
	}
	return fmt.Errorf("sandbox: refusing to run tools: %w: %s (%s)", ErrABITooOld, strings.Join(e.Missing, "; "), hint)
}

// Enforcement reports what the running kernel enforces of p, its limits
// included.
func (p *Policy) Enforcement() Enforcement {
	e := enforcement(Status().ABI, p)
	e.Limits, e.Unlimited = limitsEnforcement(p.Limits.effective())
	return e
}

// Check returns nil if tools may run under p on this kernel: the kernel
// enforces all of p, or p is best effort (see [Policy.Enforcement] for how
// much is then enforced).
func (p *Policy) Check() error { return check(Status().ABI, p) }

// Explain describes the policy for people: its enforcement on this kernel
// (loudly, when tools run unsandboxed or partly so), every path with its
// rights, what was skipped and why, network and environment.
func (p *Policy) Explain() string {
	var b strings.Builder
	name := p.Profile
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(&b, "sandbox profile %s", name)
	if p.File != "" {
		fmt.Fprintf(&b, " (%s)", p.File)
	}
	b.WriteString("\n")
	e := p.Enforcement()
	if e.Level != Full {
		fmt.Fprintf(&b, "WARNING: tools run %s\n", e.Level)
	}
	fmt.Fprintf(&b, "landlock: %s\n", e)
	if err := p.Check(); err != nil {
		fmt.Fprintf(&b, "refused: %v\n", err)
	}
	for _, x := range e.Extra {
		fmt.Fprintf(&b, "  not enforced on this kernel: %s\n", x)
	}
	fmt.Fprintf(&b, "protection: %s\n", HostProtection())
	b.WriteString("limits per call:\n")
	for _, l := range e.Limits {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	for _, l := range e.Unlimited {
		fmt.Fprintf(&b, "  NOT ENFORCED: %s\n", l)
	}
	b.WriteString("paths:\n")
	if len(p.Paths) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, r := range p.Paths {
		fmt.Fprintf(&b, "  %s %s\n", r.Access, r.Path)
	}
	if len(p.Skipped) > 0 {
		b.WriteString("skipped:\n")
		for _, s := range p.Skipped {
			path := s.Entry
			if s.Path != "" && s.Path != s.Entry {
				path += " = " + s.Path
			}
			fmt.Fprintf(&b, "  %s %s: %s\n", s.Field, path, s.Reason)
		}
	}
	fmt.Fprintf(&b, "tcp bind: %s\ntcp connect: %s\n", p.Bind, p.Connect)
	env := "(none)"
	if len(p.Env) > 0 {
		env = strings.Join(p.Env, " ")
	}
	fmt.Fprintf(&b, "env: %s\n", env)
	return b.String()
}
