package sandbox

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Limits bound what one tool call may use. A zero field takes the value of
// [DefaultLimits]; [Unlimited] lifts the limit. Memory, OpenFiles and
// FileSize bound each process of the call; Processes bounds the call as a
// whole.
//
// The zero Limits is DefaultLimits, so a policy built by hand is bounded
// like one read from a profile that says nothing.
type Limits struct {
	// Memory is the data each process may map: heap and private writable
	// mappings (RLIMIT_DATA). Not the address space (RLIMIT_AS): runtimes
	// reserve far more of it than they use (the JVM's heap, V8's pointer
	// cage, Go's arenas) and would not start under a limit sized for use.
	Memory uint64 `json:"memory,omitempty"`
	// Processes is how many processes and threads the call may have at
	// once. Applied as RLIMIT_NPROC on top of what the user already runs
	// or, for root (whom the kernel exempts from RLIMIT_NPROC), as pids.max
	// of a cgroup per call where one is writable.
	Processes uint64 `json:"processes,omitempty"`
	// OpenFiles is the descriptors each process may hold (RLIMIT_NOFILE).
	OpenFiles uint64 `json:"open_files,omitempty"`
	// FileSize is the largest file a process may write (RLIMIT_FSIZE).
	FileSize uint64 `json:"file_size,omitempty"`
}

// Unlimited, as a field of [Limits], lifts that limit.
const Unlimited = math.MaxUint64

// DefaultLimits stop a fork bomb and a runaway allocation while leaving
// room for compilers, linkers and parallel test suites. OpenFiles and
// FileSize are inherited from the server unless a profile sets them.
var DefaultLimits = Limits{Memory: 1536 << 20, Processes: 512, OpenFiles: Unlimited, FileSize: Unlimited}

// effective returns l with its zero fields replaced by DefaultLimits.
func (l Limits) effective() Limits {
	pick := func(v, def uint64) uint64 {
		if v == 0 {
			return def
		}
		return v
	}
	return Limits{
		Memory:    pick(l.Memory, DefaultLimits.Memory),
		Processes: pick(l.Processes, DefaultLimits.Processes),
		OpenFiles: pick(l.OpenFiles, DefaultLimits.OpenFiles),
		FileSize:  pick(l.FileSize, DefaultLimits.FileSize),
	}
}

func (l Limits) String() string {
	e := l.effective()
	return fmt.Sprintf("memory %s, processes %s, open_files %s, file_size %s",
		formatSize(e.Memory), formatCount(e.Processes), formatCount(e.OpenFiles), formatSize(e.FileSize))
}

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// parseSize reads a size such as 1GiB, 1.5GiB, 512MiB or 4096 (bytes), or
// unlimited.
func parseSize(s string) (uint64, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	hint := fmt.Errorf("%q is not a size: write a number with B, KiB, MiB, GiB or TiB (e.g. 1GiB), or unlimited", s)
	num, shift := s, uint(0)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	num = strings.TrimSpace(num)
	if strings.HasSuffix(num, "G") || strings.HasSuffix(num, "M") || strings.HasSuffix(num, "K") || strings.HasSuffix(num, "T") {
		return 0, fmt.Errorf("%q is ambiguous: write %siB for powers of 1024", s, strings.TrimSuffix(s, "B"))
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, hint
	}
	b := f * float64(uint64(1)<<shift)
	switch {
	case b < 1:
		return 0, fmt.Errorf("%q: a limit must be at least 1 byte; write unlimited to lift it", s)
	case b >= float64(math.MaxUint64):
		return 0, fmt.Errorf("%q is too large; write unlimited to lift the limit", s)
	}
	return uint64(b), nil
}

// parseCount reads a positive whole number, or unlimited.
func parseCount(s string) (uint64, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n == Unlimited {
		return 0, fmt.Errorf("%q is not a count: write a whole number of at least 1, or unlimited", s)
	}
	return n, nil
}

func formatSize(n uint64) string {
	if n == Unlimited {
		return "unlimited"
	}
	// The largest unit of which n is a whole number of quarters: 1.5GiB,
	// not 1536MiB.
	for _, u := range sizeUnits {
		if unit := uint64(1) << u.shift; u.shift >= 2 && n >= unit && n%(unit/4) == 0 {
			return strconv.FormatFloat(float64(n)/float64(unit), 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}

func formatCount(n uint64) string {
	if n == Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(n, 10)
}

// limitFields are the fields of a profile's limits section.
var limitFields = []struct {
	name string
	kind fieldKind
}{{"memory", kindSize}, {"processes", kindCount}, {"open_files", kindCount}, {"file_size", kindSize}}

// fileLimits is the YAML shape of a profile's limits section.
type fileLimits struct {
	Memory    string `yaml:"memory"`
	Processes string `yaml:"processes"`
	OpenFiles string `yaml:"open_files"`
	FileSize  string `yaml:"file_size"`
}

func (fl fileLimits) parse() (Limits, error) {
	var l Limits
	for _, f := range []struct {
		name, val string
		dst       *uint64
		parse     func(string) (uint64, error)
	}{
		{"memory", fl.Memory, &l.Memory, parseSize},
		{"processes", fl.Processes, &l.Processes, parseCount},
		{"open_files", fl.OpenFiles, &l.OpenFiles, parseCount},
		{"file_size", fl.FileSize, &l.FileSize, parseSize},
	} {
		if f.val == "" {
			continue // absent: the default
		}
		v, err := f.parse(f.val)
		if err != nil {
			return Limits{}, &limitError{f.name, err}
		}
		*f.dst = v
	}
	return l, nil
}

type limitError struct {
	field string
	err   error
}

func (e *limitError) Error() string { return e.err.Error() }
func (e *limitError) Unwrap() error { return e.err }

var errLimitsMapping = errors.New("expected a mapping with memory, processes, open_files and file_size")
