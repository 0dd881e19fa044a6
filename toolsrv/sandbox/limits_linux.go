package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
		{"memory", "per process (RLIMIT_DATA)", l.Memory, true},
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
func pidsCgroupParent() (string, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("no pids cgroup: %w", err)
	}
	var v1, v2 string // mount points
	for line := range strings.Lines(string(mounts)) {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup" && v1 == "" && hasWord(g[2], "pids", ","):
			v1 = f[4]
		case g[0] == "cgroup2" && v2 == "":
			v2 = f[4]
		}
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("no pids cgroup: %w", err)
	}
	var tried []string
	for line := range strings.Lines(string(own)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case v1 != "" && hasWord(parts[1], "pids", ","):
			dir = filepath.Join(v1, parts[2])
		case v2 != "" && parts[0] == "0" && parts[1] == "":
			dir = filepath.Join(v2, parts[2])
			ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			if err != nil || !hasWord(strings.TrimSpace(string(ctl)), "pids", " ") {
				tried = append(tried, dir+" (cgroup v2 without pids in cgroup.subtree_control)")
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
		return "", errors.New("no pids cgroup is mounted")
	}
	return "", fmt.Errorf("no writable pids cgroup: tried %s", strings.Join(tried, ", "))
}

func hasWord(list, word, sep string) bool {
	for w := range strings.SplitSeq(list, sep) {
		if w == word {
			return true
		}
	}
	return false
}

// A callCgroup holds one call's processes under a pids.max.
type callCgroup struct{ dir string }

// newCallCgroup makes the cgroup for this helper's call in parent, after
// clearing out those of helpers that died without removing theirs.
func newCallCgroup(parent string, max uint64) (*callCgroup, error) {
	c, err := makeCallCgroup(parent)
	if err != nil {
		return nil, err
	}
	if err := c.setMax(max); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// makeCallCgroup makes the cgroup for this helper's call in parent, with
// no pids.max yet, after clearing out those of helpers that died without
// removing theirs.
func makeCallCgroup(parent string) (*callCgroup, error) {
	removeStaleCgroups(parent)
	c := &callCgroup{filepath.Join(parent, callCgroupPrefix+strconv.Itoa(os.Getpid()))}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: cgroup for limits.processes: %w", err)
	}
	return c, nil
}

// setMax sets c's pids.max; Unlimited lifts it.
func (c *callCgroup) setMax(max uint64) error {
	v := "max"
	if max != Unlimited {
		v = strconv.FormatUint(max, 10)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "pids.max"), []byte(v), 0); err != nil {
		return fmt.Errorf("sandbox: cgroup for limits.processes: %w", err)
	}
	return nil
}

// add moves the process pid, and so all it will start, into c.
func (c *callCgroup) add(pid int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("sandbox: moving the tool into %s: %w", c.dir, err)
	}
	return nil
}

// kill sends SIGKILL to every process in c.
func (c *callCgroup) kill() {
	data, _ := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if pid, err := strconv.Atoi(sc.Text()); err == nil && pid > 0 {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// remove deletes c once the processes in it are gone: it waits briefly for
// the kernel to let go of those just reaped.
func (c *callCgroup) remove() error {
	var err error
	for range 50 {
		if err = unix.Rmdir(c.dir); err != unix.EBUSY {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err != nil && err != unix.ENOENT {
		return fmt.Errorf("sandbox: removing %s: %w", c.dir, err)
	}
	return nil
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
		c := &callCgroup{filepath.Join(parent, name)}
		c.kill()
		c.remove()
	}
}
