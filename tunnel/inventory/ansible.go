package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"ollie/internal/termsafe"
)

// maxListOutput bounds what ansible-inventory --list may print: a dynamic
// inventory of a large cloud account is megabytes, not gigabytes.
const maxListOutput = 256 << 20

// AnsibleError is ansible-inventory failing to list an inventory.
type AnsibleError struct {
	Cmd    string // the command line, for people
	Err    error  // how it ended
	Stderr string // the end of what it said, terminal-safe
}

func (e *AnsibleError) Error() string {
	msg := fmt.Sprintf("inventory: %s: %v", e.Cmd, e.Err)
	if e.Stderr != "" {
		msg += ":\n" + e.Stderr
	}
	return msg
}

func (e *AnsibleError) Unwrap() error { return e.Err }

// readAnsible has ansible-inventory list the inventory, so that whatever
// Ansible reads (dynamic inventory plugins and scripts, group_vars/,
// host_vars/, vars plugins) is read as Ansible reads it.
func readAnsible(ctx context.Context, bin, name string) (*inventory, error) {
	vctx, stop := context.WithCancel(ctx)
	defer stop() // a failed listing ends the version's run too
	version := make(chan string, 1)
	go func() { version <- ansibleVersion(vctx, bin) }()

	cmdline := fmt.Sprintf("%s -i %s --list", bin, name)
	cmd := exec.CommandContext(ctx, bin, "-i", name, "--list")
	// An inventory source Ansible cannot parse is an error, not a warning
	// followed by an inventory without its hosts.
	cmd.Env = append(os.Environ(),
		"ANSIBLE_INVENTORY_UNPARSED_FAILED=True",
		"ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED=True",
		"ANSIBLE_NOCOLOR=True",
		"ANSIBLE_FORCE_COLOR=False",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	stderr := &tail{max: 4 << 10}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, &AnsibleError{Cmd: cmdline, Err: err}
	}
	if err := cmd.Start(); err != nil {
		return nil, &AnsibleError{Cmd: cmdline, Err: err}
	}
	b, rerr := io.ReadAll(io.LimitReader(out, maxListOutput+1))
	if len(b) > maxListOutput {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return nil, &AnsibleError{Cmd: cmdline, Err: fmt.Errorf("more than %d MiB of output", maxListOutput>>20)}
	}
	err = cmd.Wait()
	if err == nil {
		err = rerr
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return nil, &AnsibleError{Cmd: cmdline, Err: err, Stderr: stderr.text()}
	}
	inv, err := parseList(b)
	if err != nil {
		return nil, &AnsibleError{Cmd: cmdline, Err: fmt.Errorf("its output: %w", err)}
	}
	inv.name = name
	inv.source = "ansible-inventory -i " + name + " --list"
	if v := <-version; v != "" {
		inv.source += " (" + v + ")"
	}
	return inv, nil
}

var coreVersion = regexp.MustCompile(`\[core ([0-9][0-9A-Za-z.+-]*)\]`)

// versions remembers ansibleVersion's answers by program file: asking
// costs as much as a listing (a second of Python starting).
var versions sync.Map // versionKey → string

type versionKey struct {
	path  string
	size  int64
	mtime time.Time
}

// ansibleVersion is "ansible-core 2.14.18", or "" when it cannot tell.
func ansibleVersion(ctx context.Context, bin string) string {
	var key versionKey
	if st, err := os.Stat(bin); err == nil {
		key = versionKey{bin, st.Size(), st.ModTime()}
		if v, ok := versions.Load(key); ok {
			return v.(string)
		}
	}
	v := askVersion(ctx, bin)
	if v != "" && key.path != "" {
		versions.Store(key, v)
	}
	return v
}

func askVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if m := coreVersion.FindStringSubmatch(first); m != nil {
		return "ansible-core " + m[1]
	}
	return ""
}

// parseList reads ansible-inventory --list's JSON: _meta.hostvars holds
// each host's vars with its groups' applied; every other key is a group
// with its hosts and children. A group with neither is left out of the
// JSON, so a group named as a child but not listed is an empty one.
func parseList(b []byte) (*inventory, error) {
	var top map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&top); err != nil {
		return nil, err
	}
	inv := &inventory{groups: map[string]*group{}, vars: map[string]map[string]any{}}
	for name, raw := range top {
		if name == "_meta" {
			var meta struct {
				Hostvars map[string]map[string]any `json:"hostvars"`
			}
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			if err := d.Decode(&meta); err != nil {
				return nil, fmt.Errorf("_meta: %w", err)
			}
			for h, v := range meta.Hostvars {
				if v == nil {
					v = map[string]any{}
				}
				inv.vars[h] = v
			}
			continue
		}
		var g struct {
			Hosts    []string `json:"hosts"`
			Children []string `json:"children"`
		}
		if err := json.Unmarshal(raw, &g); err != nil {
			return nil, fmt.Errorf("group %s: %w", name, err)
		}
		inv.groups[name] = &group{hosts: g.Hosts, children: g.Children}
	}
	for _, g := range inv.groups {
		for _, c := range g.children {
			if inv.groups[c] == nil {
				inv.groups[c] = &group{}
			}
		}
		for _, h := range g.hosts {
			if inv.vars[h] == nil {
				inv.vars[h] = map[string]any{}
			}
		}
	}
	if inv.groups["all"] == nil {
		return nil, errors.New("no group all")
	}
	return inv, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// text is the last lines kept, safe to print.
func (t *tail) text() string {
	s := strings.TrimSpace(string(t.buf))
	lines := strings.Split(s, "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return termsafe.Text(strings.Join(lines, "\n"))
}
