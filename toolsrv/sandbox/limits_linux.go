package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// limitsEnforcement says how each of l's limits is applied on this host,
// and which cannot be.
func limitsEnforcement(l Limits) (applied, missing []string) {
	for _, r := range []struct {
		name, how string
		v         uint64
		size      bool
	}{
		{"open_files", "per process (RLIMIT_NOFILE)", l.OpenFiles, false},
		{"file_size", "per file (RLIMIT_FSIZE)", l.FileSize, true},
	} {
		v := formatCount(r.v)
		if r.size {
			v = formatSize(r.v)
		}
		if r.v == Unlimited {
			applied = append(applied, fmt.Sprintf("%s: unlimited", r.name))
		} else {
			applied = append(applied, fmt.Sprintf("%s: %s %s", r.name, v, r.how))
		}
	}
	switch m := formatSize(l.Memory); {
	case l.Memory == Unlimited:
		applied = append(applied, "memory: unlimited")
	default:
		if dir, err := memoryCgroupParent(); err == nil {
			applied = append(applied, fmt.Sprintf("memory: %s per call (the memory limit of a cgroup per call in %s) and per process (RLIMIT_DATA)", m, dir))
		} else {
			applied = append(applied, fmt.Sprintf("memory: %s per process (RLIMIT_DATA)", m))
			missing = append(missing, fmt.Sprintf("memory: %s per call cannot be applied, only per process: %v (delegate a cgroup v2 with the memory controller to the user, or run olliesrv as root)", m, err))
		}
	}
	switch n := formatCount(l.Processes); {
	case l.Processes == Unlimited:
		applied = append(applied, "processes: unlimited")
	case !nprocExempt():
		applied = append(applied, fmt.Sprintf("processes: %s per call (RLIMIT_NPROC above what the user already runs)", n))
	default:
		if dir, err := pidsCgroupParent(); err == nil {
			applied = append(applied, fmt.Sprintf("processes: %s per call (pids.max of a cgroup per call in %s)", n, dir))
		} else {
			missing = append(missing, fmt.Sprintf("processes: %s per call cannot be applied: tools run as root, whom the kernel exempts from RLIMIT_NPROC, and %v", n, err))
		}
	}
	return applied, missing
}

// nprocExempt reports whether the kernel ignores RLIMIT_NPROC for this
// process: it does for real uid 0.
func nprocExempt() bool { return os.Getuid() == 0 }

// setLimits applies l's per-process limits, and for a user the kernel does
// not exempt, RLIMIT_NPROC, to this process and so to the tool it execs.
// Soft and hard limits are both set, so the tool cannot raise them; a hard
// limit already lower than l is kept.
func setLimits(l Limits) error {
	set := func(res int, name string, v uint64) error {
		if v == Unlimited {
			return nil
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err != nil {
			return fmt.Errorf("sandbox: reading %s: %w", name, err)
		}
		v = min(v, cur.Max)
		// syscall.Setrlimit, not x/sys/unix: for RLIMIT_NOFILE it also stops
		// Go from restoring its original limit in the exec'd tool.
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("sandbox: setting %s to %d: %w", name, v, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_DATA, "RLIMIT_DATA (limits.memory)", l.Memory); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_NOFILE, "RLIMIT_NOFILE (limits.open_files)", l.OpenFiles); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_FSIZE, "RLIMIT_FSIZE (limits.file_size)", l.FileSize); err != nil {
		return err
	}
	if l.Processes == Unlimited || nprocExempt() {
		return nil // root: the helper's cgroup, if any, does it
	}
	// RLIMIT_NPROC counts every task of the real uid, not those of the call:
	// the call gets its number on top of what the user runs now.
	n, err := userTasks(os.Getuid())
	if err != nil {
		return fmt.Errorf("sandbox: counting the user's processes for limits.processes: %w", err)
	}
	total := uint64(n) + l.Processes
	if total < l.Processes {
		total = math.MaxUint64
	}
	return set(unix.RLIMIT_NPROC, "RLIMIT_NPROC (limits.processes)", total)
}

// userTasks counts the tasks (threads: RLIMIT_NPROC counts those) whose
// real uid is uid.
func userTasks(uid int) (int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, err
	}
	want := strconv.Itoa(uid)
	n := 0
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + name + "/status")
		if err != nil {
			continue // exited since the listing
		}
		var ruid string
		threads := 0
		for line := range bytes.Lines(data) {
			if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
				if f := strings.Fields(string(v)); len(f) > 0 {
					ruid = f[0]
				}
			} else if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(string(v)))
				break // Uid comes before Threads
			}
		}
		if ruid == want {
			n += max(threads, 1)
		}
	}
	return n, nil
}

// callCgroupPrefix names the cgroups the helper makes, one per call.
const callCgroupPrefix = "ollie-call-"

// pidsCgroupParent returns the directory of this process's cgroup in a
// hierarchy with the pids controller where a cgroup per call can be made:
// the v1 pids hierarchy, or a v2 cgroup whose subtree has pids enabled.
func pidsCgroupParent() (string, error) { return cgroupParent("pids") }

// memoryCgroupParent is pidsCgroupParent for the memory controller: for a
// user, a v2 cgroup delegated to it (systemd's Delegate=, a container's).
func memoryCgroupParent() (string, error) { return cgroupParent("memory") }

// cgroupParent returns the directory of this process's cgroup in a
// hierarchy with controller where a cgroup per call can be made: the v1
// hierarchy of the controller, or a v2 cgroup whose subtree has it
// enabled, writable by this process.
func cgroupParent(controller string) (string, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("no %s cgroup: %w", controller, err)
	}
	var v1, v2 string // mount points
	for line := range strings.Lines(string(mounts)) {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup" && v1 == "" && hasWord(g[2], controller, ","):
			v1 = f[4]
		case g[0] == "cgroup2" && v2 == "":
			v2 = f[4]
		}
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("no %s cgroup: %w", controller, err)
	}
	var tried []string
	for line := range strings.Lines(string(own)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case v1 != "" && hasWord(parts[1], controller, ","):
			dir = filepath.Join(v1, parts[2])
		case v2 != "" && parts[0] == "0" && parts[1] == "":
			dir = filepath.Join(v2, parts[2])
			ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			if err != nil || !hasWord(strings.TrimSpace(string(ctl)), controller, " ") {
				tried = append(tried, dir+" (cgroup v2 without "+controller+" in cgroup.subtree_control)")
				continue
			}
		default:
			continue
		}
		if err := unix.Access(dir, unix.W_OK); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", dir, err))
			continue
		}
		return dir, nil
	}
	if len(tried) == 0 {
		return "", errors.New("no " + controller + " cgroup is mounted")
	}
	return "", fmt.Errorf("no writable %s cgroup: tried %s", controller, strings.Join(tried, ", "))
}

func hasWord(list, word, sep string) bool {
	for w := range strings.SplitSeq(list, sep) {
		if w == word {
			return true
		}
	}
	return false
}

// A callCgroup holds one call's processes: a cgroup per hierarchy, under
// a pids.max (for root, whom RLIMIT_NPROC does not bound) and a memory
// limit for the whole call (RLIMIT_DATA bounds a process, not the call).
type callCgroup struct{ dirs []string }

// callCgroupParents are the cgroups in which this helper makes its
// call's: for root the pids hierarchy's, and the memory hierarchy's,
// each where one is writable (the same directory, once, on cgroup v2).
func callCgroupParents() []string {
	var parents []string
	if nprocExempt() {
		if dir, err := pidsCgroupParent(); err == nil {
			parents = append(parents, dir)
		}
	}
	if dir, err := memoryCgroupParent(); err == nil && !slices.Contains(parents, dir) {
		parents = append(parents, dir)
	}
	return parents
}

// newCallCgroup makes the cgroups for this helper's call with l's limits,
// after clearing out those of helpers that died without removing theirs.
// It returns nil where no cgroup can be made.
func newCallCgroup(l Limits) (*callCgroup, error) {
	c, err := makeCallCgroup()
	if c == nil || err != nil {
		return nil, err
	}
	if err := c.setLimits(l); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// makeCallCgroup makes the cgroups for this helper's call, with no limits
// yet, after clearing out those of helpers that died without removing
// theirs. It returns nil where no cgroup can be made.
func makeCallCgroup() (*callCgroup, error) {
	parents := callCgroupParents()
	if len(parents) == 0 {
		return nil, nil
	}
	c := &callCgroup{}
	for _, parent := range parents {
		removeStaleCgroups(parent)
		dir := filepath.Join(parent, callCgroupPrefix+strconv.Itoa(os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.remove()
			return nil, fmt.Errorf("sandbox: cgroup for the call's limits: %w", err)
		}
		c.dirs = append(c.dirs, dir)
	}
	return c, nil
}

// String is c's directories, for the confining stage's argument.
func (c *callCgroup) String() string {
	if c == nil || len(c.dirs) == 0 {
		return "-"
	}
	return strings.Join(c.dirs, ":")
}

// parseCallCgroup is String's inverse.
func parseCallCgroup(s string) *callCgroup {
	if s == "-" || s == "" {
		return nil
	}
	return &callCgroup{strings.Split(s, ":")}
}

// setLimits sets, in each of c's cgroups that has the controller, pids.max
// (root only: a user's RLIMIT_NPROC does it) and the call's memory limit
// (memory.max and no swap on v2, memory.limit_in_bytes on v1); Unlimited
// lifts one.
func (c *callCgroup) setLimits(l Limits) error {
	value := func(v uint64) string {
		if v == Unlimited {
			return "max"
		}
		return strconv.FormatUint(v, 10)
	}
	for _, dir := range c.dirs {
		write := func(file, v string) (bool, error) {
			p := filepath.Join(dir, file)
			if _, err := os.Stat(p); err != nil {
				return false, nil // not this hierarchy's controller
			}
			if err := os.WriteFile(p, []byte(v), 0); err != nil {
				return true, fmt.Errorf("sandbox: cgroup for the call's limits: %w", err)
			}
			return true, nil
		}
		if nprocExempt() {
			if _, err := write("pids.max", value(l.Processes)); err != nil {
				return err
			}
		}
		if ok, err := write("memory.max", value(l.Memory)); err != nil {
			return err
		} else if ok {
			write("memory.swap.max", map[bool]string{true: "max", false: "0"}[l.Memory == Unlimited])
			continue
		}
		v1 := value(l.Memory)
		if l.Memory == Unlimited {
			v1 = "-1"
		}
		if _, err := write("memory.limit_in_bytes", v1); err != nil {
			return err
		}
	}
	return nil
}

// add moves the process pid, and so all it will start, into c.
func (c *callCgroup) add(pid int) error {
	for _, dir := range c.dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("sandbox: moving the tool into %s: %w", dir, err)
		}
	}
	return nil
}

// kill sends SIGKILL to every process in c.
func (c *callCgroup) kill() {
	for _, dir := range c.dirs {
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if pid, err := strconv.Atoi(sc.Text()); err == nil && pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}

// remove deletes c once the processes in it are gone: it waits briefly for
// the kernel to let go of those just reaped.
func (c *callCgroup) remove() error {
	var errs []error
	for _, dir := range c.dirs {
		var err error
		for range 50 {
			if err = unix.Rmdir(dir); err != unix.EBUSY {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err != nil && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("sandbox: removing %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// removeStaleCgroups removes the cgroups of helpers that no longer run,
// killing whatever is left in them: a helper killed outright (SIGKILL, or
// its parent's death) cannot reap the call, so this is where what escaped
// it ends.
func removeStaleCgroups(parent string) {
	d, err := os.Open(parent)
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, name := range names {
		pid, err := strconv.Atoi(strings.TrimPrefix(name, callCgroupPrefix))
		if !strings.HasPrefix(name, callCgroupPrefix) || err != nil || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); err != unix.ESRCH {
			continue // its helper still runs (or the pid was reused: left for later)
		}
		c := &callCgroup{[]string{filepath.Join(parent, name)}}
		c.kill()
		c.remove()
	}
}
