package olliesrv

// The ollie.fleet collection (contrib/ansible/ollie/fleet) under the real
// ansible-playbook, against real sshd lab hosts, one of which has no
// Python for Ansible: the deploy role twice (the second run changes
// nothing), ollie_info, and ollie_goal on every host with the scripted
// model: an answer, a tool the play's policy denies, and a sudo tool it
// allows with the play's become password. The goal play keeps its
// remote files and runs at -vvvv; then the password is searched for on
// the hosts, in the controller's Ansible temporary files and in that
// output.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/lab"
	"ollie/internal/sshlab"
)

func TestAnsibleCollection(t *testing.T) {
	lab.Root(t, "real sshd hosts with sudo")
	for _, tool := range []string{"ansible-playbook", "ansible-galaxy"} {
		_, err := exec.LookPath(tool)
		lab.Need(t, err == nil, tool+" (Debian's ansible-core)")
	}
	_, err := exec.LookPath("strace")
	lab.Need(t, err == nil, "strace, to see every file the controller writes")
	a := startAnsibleLab(t)
	a.checkDeploy()
	out2, trace := a.runGoals()
	a.checkGoals(out2)
	a.checkPasswordNowhere(out2, trace)
}

// ansibleLab is the lab hosts, each with a scripted model of its own,
// and the controller's files (ctl): the inventory, the plays and the
// become password in a secret file.
type ansibleLab struct {
	t          *testing.T
	l          *sshlab.Lab
	password   string
	ctl        string
	llms       map[string]*fakellm.Server
	noPython   string
	ansibleEnv []string
}

// startAnsibleLab starts the hosts and writes the controller's files.
func startAnsibleLab(t *testing.T) *ansibleLab {
	pwb := make([]byte, 12)
	rand.Read(pwb)
	password := "Pw-" + hex.EncodeToString(pwb)
	l := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "oans", Password: password, Sudoers: true})
	srv, _ := binaries(t)

	// The controller's files, the password among them, live outside the
	// hosts' homes, /tmp and /var/log: the places searched afterwards.
	ctl, err := os.MkdirTemp("/run", "ollie-ansible-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(ctl, 0700)
	t.Cleanup(func() { os.RemoveAll(ctl) })
	data := ansibleData(t, filepath.Join(ctl, "data"))

	colls := installCollection(t, ctl)

	// Each host's agent has a scripted model of its own.
	llms := map[string]*fakellm.Server{}
	var inv strings.Builder
	inv.WriteString("all:\n  hosts:\n")
	// The last host has no Python for Ansible: any Python module fails
	// there, so the role and the modules must do without.
	noPython := l.Hosts[len(l.Hosts)-1].Name
	for _, h := range l.Hosts {
		llm := fakellm.Start(t)
		llms[h.Name] = llm
		backends := fmt.Sprintf(`{"backends": {"fake": {"type": "openai", "url": %q, "model": "fake-model"}}}`, llm.URL+"/v1")
		fmt.Fprintf(&inv, "    %s:\n      ollie_backends: %s\n", h.Name, backends)
		if h.Name == noPython {
			fmt.Fprintf(&inv, "      ansible_python_interpreter: /nonexistent/python3\n")
		}
		resetHome(t, l, h)
		t.Cleanup(func() { l.SSH(h.Name, ".local/share/ollie/current/olliesrv stop").Run() })
	}
	fmt.Fprintf(&inv, "  vars:\n    ansible_ssh_common_args: -F %s\n    ansible_python_interpreter: /usr/bin/python3\n", l.ConfigFile)
	os.WriteFile(filepath.Join(ctl, "inventory.yml"), []byte(inv.String()), 0600)
	secret, _ := json.Marshal(map[string]string{"ansible_become_password": password})
	os.WriteFile(filepath.Join(ctl, "secret.json"), secret, 0600)
	os.WriteFile(filepath.Join(ctl, "deploy.yml"), []byte(fmt.Sprintf(`- hosts: all
  gather_facts: false
  roles:
    - role: ollie.fleet.deploy
      vars:
        ollie_bin: %s
        ollie_data: %s
`, srv, data)), 0600)
	os.WriteFile(filepath.Join(ctl, "goal.yml"), []byte(ansibleGoalPlay(ctl)), 0600)

	ansibleEnv := append(os.Environ(), "ANSIBLE_COLLECTIONS_PATH="+colls, "ANSIBLE_HOST_KEY_CHECKING=True",
		"ANSIBLE_NOCOLOR=1", "ANSIBLE_RETRY_FILES_ENABLED=0", "ANSIBLE_LOCAL_TEMP="+filepath.Join(ctl, "tmp"))
	return &ansibleLab{t: t, l: l, password: password, ctl: ctl, llms: llms, noPython: noPython, ansibleEnv: ansibleEnv}
}

// play runs ansible-playbook with the play name of the controller's files.
func (a *ansibleLab) play(name string, env []string, extra ...string) string {
	t, ctl := a.t, a.ctl
	t.Helper()
	args := append([]string{"-i", filepath.Join(ctl, "inventory.yml"), "--forks", "2"}, extra...)
	cmd := playCommand(t, "ansible-playbook", append(args, filepath.Join(ctl, name))...)
	cmd.Env = append(a.ansibleEnv, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ansible-playbook %s: %v\n%s", name, err, out)
	}
	return string(out)
}

// tracedPlay is play under strace, which reports the syscalls of
// ansible-playbook and its children (workers, ssh, sftp), each
// descriptor with what it is: a file's path, a pipe or a socket.
// Ansible removes its local temporary files (ANSIBLE_LOCAL_TEMP) as
// soon as they are sent, so a search afterwards would find nothing;
// this sees them written. The trace stays in memory.
func (a *ansibleLab) tracedPlay(name, syscalls string, env []string, extra ...string) (out, trace string) {
	t, ctl := a.t, a.ctl
	t.Helper()
	args := append([]string{"-f", "-qq", "--seccomp-bpf", "-y", "-s", "1048576", "-e", "trace=" + syscalls,
		"-o", "/dev/fd/3", "ansible-playbook", "-i", filepath.Join(ctl, "inventory.yml"), "--forks", "2"}, extra...)
	cmd := playCommand(t, "strace", append(args, filepath.Join(ctl, name))...)
	cmd.Env = append(a.ansibleEnv, env...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{w}
	var outb, traceb strings.Builder
	cmd.Stdout, cmd.Stderr = &outb, &outb
	done := make(chan struct{})
	go func() { io.Copy(&traceb, r); close(done) }()
	err = cmd.Run()
	w.Close()
	<-done
	r.Close()
	if err != nil {
		t.Fatalf("ansible-playbook %s: %v\n%s", name, err, outb.String())
	}
	return outb.String(), traceb.String()
}

// checkDeploy runs the deploy role: in check mode, for real under
// strace, and again, which changes nothing.
func (a *ansibleLab) checkDeploy() {
	t, l, ctl := a.t, a.l, a.ctl
	noPython, play, tracedPlay := a.noPython, a.play, a.tracedPlay
	// The Python-less host is what it claims: a Python module fails there.
	ping := exec.Command("ansible", "-i", filepath.Join(ctl, "inventory.yml"), noPython, "-m", "ansible.builtin.ping")
	ping.Env = a.ansibleEnv
	if out, err := ping.CombinedOutput(); err == nil || !strings.Contains(string(out), "/nonexistent/python3") {
		t.Fatalf("ansible.builtin.ping on %s should fail for want of Python: %v\n%s", noPython, err, out)
	}
	recap := regexp.MustCompile(`(?m)^(h1\d)\s+: ok=\d+\s+changed=(\d+)`)

	// Check mode says what would change, and changes nothing.
	check := play("deploy.yml", nil, "--check")
	if m := recap.FindAllStringSubmatch(check, -1); len(m) != 2 || m[0][2] == "0" || m[1][2] == "0" {
		t.Errorf("deploy --check should report changes on both hosts:\n%s", check)
	}
	for _, h := range l.Hosts {
		if _, err := os.Stat(filepath.Join(h.Home, ".local/share/ollie")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: deploy --check made ~/.local/share/ollie: %v", h.Name, err)
		}
	}

	dstart := time.Now()
	first, opens := tracedPlay("deploy.yml", "openat", nil)
	t.Logf("the first deploy took %v", time.Since(dstart).Round(time.Millisecond))
	for _, h := range l.Hosts {
		cur, err := os.Readlink(filepath.Join(h.Home, ".local/share/ollie/current"))
		if err != nil {
			t.Fatalf("%s: no current link after deploy: %v\n%s", h.Name, err, first)
		}
		if _, err := os.Stat(filepath.Join(h.Home, ".local/share/ollie", cur, "olliesrv")); err != nil {
			t.Errorf("%s: current → %s has no olliesrv: %v", h.Name, cur, err)
		}
		if fi, err := os.Stat(filepath.Join(h.Home, ".config/ollie/backends.json")); err != nil || fi.Mode().Perm() != 0600 {
			t.Errorf("%s: backends.json: %v (mode %v), want mode 0600", h.Name, err, fi)
		}
		if _, err := os.Stat(filepath.Join(h.Home, ".local/share/ollie/data/tools/root_id.meta")); err != nil {
			t.Errorf("%s: data/ not deployed: %v", h.Name, err)
		}
	}
	if m := recap.FindAllStringSubmatch(first, -1); len(m) != 2 || m[0][2] == "0" {
		t.Errorf("the first deploy should change both hosts:\n%s", first)
	}
	// data/'s tar is a file of each run's own: made new (O_EXCL), 0600,
	// in the run's private Ansible directory, and gone after.
	// strace -f cuts a call another process interrupts short with
	// "<unfinished ...>" after its arguments, which are all there.
	tarOpen := regexp.MustCompile(`openat\(AT_FDCWD<[^>]*>, "([^"]*ollie-data[^"]*)", ([A-Z_|]+), (0\d+)(?:\)| <unfinished)`)
	tars := tarOpen.FindAllStringSubmatch(opens, -1)
	if len(tars) == 0 {
		var seen []string
		for _, line := range strings.Split(opens, "\n") {
			if strings.Contains(line, "ollie-data") {
				seen = append(seen, line)
			}
		}
		t.Errorf("the first deploy made no data tar that strace saw; its lines naming ollie-data (%d bytes traced):\n%s", len(opens), strings.Join(seen, "\n"))
	}
	private := regexp.MustCompile("^" + regexp.QuoteMeta(filepath.Join(ctl, "tmp")) + `/ansible-local-[^/]+/ollie-data-[^/]+\.tar$`)
	for _, m := range tars {
		if !private.MatchString(m[1]) || !strings.Contains(m[2], "O_EXCL") || m[3] != "0600" {
			t.Errorf("the data tar was made as %s (%s, %s), want a new 0600 file in the run's own ANSIBLE_LOCAL_TEMP/ansible-local-*", m[1], m[2], m[3])
		}
		if _, err := os.Stat(m[1]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the data tar %s outlived the play: %v", m[1], err)
		}
	}
	second := play("deploy.yml", nil)
	m := recap.FindAllStringSubmatch(second, -1)
	if len(m) != 2 {
		t.Fatalf("no recap for both hosts:\n%s", second)
	}
	for _, r := range m {
		if r[2] != "0" {
			t.Errorf("the second deploy changed %s on %s:\n%s", r[2], r[1], second)
		}
	}

}

// runGoals runs the goal play on every host, under strace, with the
// play's become password, at -vvvv.
func (a *ansibleLab) runGoals() (out2, trace string) {
	t, ctl := a.t, a.ctl
	for _, llm := range a.llms {
		llm.Push(fakellm.Text("hello from the host"))
		llm.Push(fakellm.ToolCall("peek", `{}`), fakellm.Text("peek was refused"))
		llm.Push(fakellm.ToolCall("root_id", `{}`), fakellm.Text("root is 0"))
	}
	start := time.Now()
	// ANSIBLE_KEEP_REMOTE_FILES leaves every module's arguments file on
	// the hosts for the search below; -vvvv prints every command run.
	out2, trace = a.tracedPlay("goal.yml", "write,pwrite64,writev,pwritev,pwritev2", []string{"ANSIBLE_KEEP_REMOTE_FILES=1"}, "-vvvv", "-e", "@"+filepath.Join(ctl, "secret.json"))
	t.Logf("the goal play took %v", time.Since(start).Round(time.Millisecond))
	return out2, trace
}

// checkGoals checks what each host's goals answered.
func (a *ansibleLab) checkGoals(out2 string) {
	t, l, ctl := a.t, a.l, a.ctl
	for _, h := range l.Hosts {
		b, err := os.ReadFile(filepath.Join(ctl, "results", h.Name+".json"))
		if err != nil {
			t.Fatalf("%s: no results: %v\n%s", h.Name, err, out2)
		}
		var r struct {
			Info struct {
				Version string
				Tools   []struct {
					Name, Status string
					Variant      int
				}
			}
			Hello, Peek, Root struct {
				Failed, Changed bool
				Status, Answer  string
				Steps           int
				ToolCalls       int `json:"tool_calls"`
				Approvals       []struct{ Tool, Decision, Reason, Result string }
				Denied          []string
				Warnings        []string
				Msg             string
			}
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: results: %v\n%s", h.Name, err, b)
		}
		if r.Info.Version == "" || len(r.Info.Tools) == 0 {
			t.Errorf("%s: ollie_info: %s", h.Name, b)
		}
		if r.Hello.Failed || !r.Hello.Changed || r.Hello.Answer != "hello from the host" || r.Hello.Status != "done" || r.Hello.Steps != 1 {
			t.Errorf("%s: the hello goal: %+v", h.Name, r.Hello)
		}
		if r.Peek.Failed || len(r.Peek.Denied) != 1 || !strings.Contains(r.Peek.Denied[0], "does not let peek leave the sandbox") || r.Peek.ToolCalls != 1 {
			t.Errorf("%s: peek should be denied by the policy, with the reason: %+v", h.Name, r.Peek)
		}
		if r.Root.Failed || len(r.Root.Approvals) != 1 || r.Root.Approvals[0].Decision != "once" || r.Root.Answer != "root is 0" || len(r.Root.Warnings) > 0 {
			t.Errorf("%s: root_id should be allowed by the policy: %+v", h.Name, r.Root)
		}
		// root_id ran as root: its output reached the model.
		reqs := a.llms[h.Name].ChatRequests()
		toolOut := ""
		for _, m := range reqs[len(reqs)-1].Messages {
			if m.Role == "tool" {
				toolOut = m.Text()
			}
		}
		if strings.TrimSpace(toolOut) != "0" {
			t.Errorf("%s: root_id's output reached the model as %q, want 0", h.Name, toolOut)
		}
	}
}

// checkPasswordNowhere searches for the password in the play's output,
// on the hosts, in their processes and in what the controller wrote.
func (a *ansibleLab) checkPasswordNowhere(out2, trace string) {
	t, l, password := a.t, a.l, a.password
	if strings.Contains(out2, password) {
		t.Error("the password is in ansible-playbook -vvvv's output")
	}
	for _, h := range l.Hosts {
		// The root goal's arguments file was kept, and so is searched.
		kept, _ := filepath.Glob(filepath.Join(h.Home, ".ansible/tmp/ansible-tmp-*/args"))
		withStdin := 0
		for _, f := range kept {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), `"_ollie_password_stdin": true`) {
				withStdin++
			}
		}
		if withStdin != 1 {
			t.Errorf("%s: %d kept arguments files of a goal given the password on stdin, want 1 (of %d kept)", h.Name, withStdin, len(kept))
		}
		l.SSH(h.Name, ".local/share/ollie/current/olliesrv stop").Run()
		lab.SearchFiles(t, password, h.Home, "/tmp", "/var/log")
	}
	lab.SearchProcs(t, password)
	// The controller's side: the password may go through pipes (to ssh,
	// whose stdin becomes olliesrv's) but into no file.
	written := regexp.MustCompile(`^\d+\s+\w+\(\d+<([^>]*)>`)
	pipes, files := 0, 0
	for _, line := range strings.Split(trace, "\n") {
		if !strings.Contains(line, password) {
			continue
		}
		m := written.FindStringSubmatch(line)
		switch {
		case m == nil:
			t.Errorf("the password in a write strace could not place: %.200s", line)
		case strings.HasPrefix(m[1], "pipe:"), strings.HasPrefix(m[1], "socket:"):
			pipes++
		default:
			files++
			t.Errorf("the controller wrote the password to %s", m[1])
		}
	}
	if pipes == 0 {
		t.Errorf("strace saw the password go nowhere, not even to ssh's stdin: the trace missed (%d bytes)", len(trace))
	}
}

// playCommand is a command that, with its process group, is killed
// when the test's deadline nears or after five minutes: a hung play
// fails the test instead of outliving it.
func playCommand(t *testing.T, name string, args ...string) *exec.Cmd {
	d := 5 * time.Minute
	if dl, ok := t.Deadline(); ok && time.Until(dl)-30*time.Second < d {
		d = time.Until(dl) - 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// ansibleGoalPlay runs ollie_info and three goals on every host, and
// keeps each host's results in ctl/results/HOST.json.
func ansibleGoalPlay(ctl string) string {
	return fmt.Sprintf(`- hosts: all
  gather_facts: false
  tasks:
    - ollie.fleet.ollie_info:
      register: info
    - ollie.fleet.ollie_goal:
        goal: say hello
        run_id: hello
        timeout: 60
      register: hello
      ignore_errors: true
    - ollie.fleet.ollie_goal:
        goal: peek outside the sandbox
        run_id: peek
        timeout: 60
        policy:
          allow: [root_id]
          sudo: true
      register: peek
      ignore_errors: true
    - ollie.fleet.ollie_goal:
        goal: who is root
        run_id: root
        timeout: "{{ 30 * 2 }}"
        policy:
          allow: [root_id]
          sudo: "{{ ollie_sudo_ok | default(true) }}"
        become_password: "{{ ansible_become_password }}"
      register: root
      ignore_errors: true
    - ansible.builtin.file:
        path: %[1]s/results
        state: directory
      delegate_to: localhost
      run_once: true
    - ansible.builtin.copy:
        content: "{{ {'info': info, 'hello': hello, 'peek': peek, 'root': root} | to_json }}"
        dest: "%[1]s/results/{{ inventory_hostname }}.json"
      delegate_to: localhost
`, ctl)
}

// ansibleData copies the repository's data/ to dir, with a tool the play
// denies (peek, elevated) and one it allows with sudo (root_id).
func ansibleData(t testing.TB, dir string) string {
	src := "../../data"
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		return os.WriteFile(filepath.Join(dir, rel), b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]string{
		"root_id.meta": `{"description": "Print the user id the tool runs as.", "sudo": true, "readOnly": true}`,
		"root_id":      "#!/bin/sh\nid -u\n",
		"peek.meta":    `{"description": "Look outside the sandbox.", "elevated": true, "readOnly": true}`,
		"peek":         "#!/bin/sh\necho peeked\n",
	}
	for name, content := range tools {
		mode := os.FileMode(0644)
		if !strings.HasSuffix(name, ".meta") {
			mode = 0755
		}
		os.WriteFile(filepath.Join(dir, "tools", name), []byte(content), mode)
	}
	return dir
}

// resetHome stops a daemon an earlier run left on the lab user and
// removes what ollie and Ansible keep in its home: the users are shared
// between runs.
func resetHome(t testing.TB, l *sshlab.Lab, h *sshlab.Host) {
	l.SSH(h.Name, "test -x .local/share/ollie/current/olliesrv && .local/share/ollie/current/olliesrv stop").Run()
	for _, d := range []string{".local/share/ollie", ".local/state/ollie", ".config/ollie", ".ansible", ".local/bin/ollie"} {
		os.RemoveAll(filepath.Join(h.Home, d))
	}
}

// installCollection builds the collection with ansible-galaxy and
// installs it under ctl; it returns the collections path.
func installCollection(t testing.TB, ctl string) string {
	t.Helper()
	out, err := exec.Command("ansible-galaxy", "collection", "build", "../../contrib/ansible/ollie/fleet", "--output-path", ctl).CombinedOutput()
	if err != nil {
		t.Fatalf("ansible-galaxy collection build: %v\n%s", err, out)
	}
	tarballs, _ := filepath.Glob(filepath.Join(ctl, "ollie-fleet-*.tar.gz"))
	if len(tarballs) != 1 {
		t.Fatalf("the build made %v", tarballs)
	}
	colls := filepath.Join(ctl, "collections")
	if out, err := exec.Command("ansible-galaxy", "collection", "install", "-p", colls, tarballs[0]).CombinedOutput(); err != nil {
		t.Fatalf("ansible-galaxy collection install: %v\n%s", err, out)
	}
	return colls
}
