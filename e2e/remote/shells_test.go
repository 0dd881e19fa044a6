package remote

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/internal/lab"
	"ollie/internal/sshlab"
	"ollie/tunnel/deploy"
)

// loginShell is a lab host's login shell, and whether a file of the
// user's can make "ssh HOST ollie" work with it.
type loginShell struct {
	name  string
	path  string
	works bool
}

// TestDeployLoginShells deploys to one lab host per login shell, all at
// once, and runs "ssh HOST ollie help" with the real OpenSSH client:
// bash, zsh, fish and tcsh find the command; dash, busybox's ash, ksh93
// and mksh read no file for an ssh command, so the deploy reports the
// host degraded with exactly what to type, which works. Then -system on
// the dash host: a foreign /usr/local/bin/ollie is left alone, a policy
// rule and a person at the desktop can each deny it, and approved, with a
// wrong password and then the right one from askpass, it installs the
// wrapper, after which "ssh HOST ollie" works for dash and for the other
// users of the machine; the password is nowhere on the host afterwards.
func TestDeployLoginShells(t *testing.T) {
	// busybox runs ash when called by that name, as sshd calls a login
	// shell by its base name.
	ashDir, err := os.MkdirTemp("", "ollie-ash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ashDir) })
	os.Chmod(ashDir, 0755)
	if bb, err := exec.LookPath("busybox"); err == nil {
		os.Symlink(bb, filepath.Join(ashDir, "ash"))
	}
	shells := []loginShell{
		{"bash", "/bin/bash", true},
		{"zsh", "zsh", true},
		{"dash", "/bin/dash", false},
		{"ash", filepath.Join(ashDir, "ash"), false},
		{"ksh", "ksh", false},
		{"mksh", "mksh", false},
		{"fish", "fish", true},
		{"tcsh", "tcsh", true},
	}
	cfg := sshlab.Config{Hosts: len(shells), UserPrefix: "orsh", Shell: map[int]string{}, Sudoers: true}
	for i, s := range shells {
		p, err := exec.LookPath(s.path)
		lab.Need(t, err == nil, fmt.Sprintf("the %s shell (apt-get install zsh ksh fish tcsh busybox mksh, as .ci/run does)", s.name))
		shells[i].path, cfg.Shell[i] = p, p
	}
	// The -system part installs /usr/local/bin/ollie, the machine's. One
	// an earlier run of this test left (killed before its clean-up) goes;
	// anything else is the machine's own, which the test will not touch.
	removeOurSystemCommand(t)
	if _, err := os.Lstat(deploy.SystemCommand); err == nil {
		lab.Need(t, false, deploy.SystemCommand+" exists on this machine; the test would replace it")
	}
	t.Cleanup(func() { removeOurSystemCommand(t) })
	pwb := make([]byte, 12)
	rand.Read(pwb)
	cfg.Password = "Sh-" + hex.EncodeToString(pwb)
	l := sshlab.Start(t, cfg)
	r := newRemote(t, l)
	for _, h := range l.Hosts {
		for _, f := range []string{".zshrc", ".tcshrc", ".cshrc", ".kshrc", ".mkshrc"} {
			os.Remove(filepath.Join(h.Home, f))
		}
	}
	var names []string
	for _, h := range l.Hosts {
		names = append(names, h.Name)
	}

	out := r.must(append([]string{"deploy"}, names...)...)
	t.Logf("deploy:\n%s", out)
	for i, s := range shells {
		h := l.Host(i)
		row := deployRow(out, h.Name)
		hint := fmt.Sprintf("ssh %s ollie is not found: the login shell %s reads no file for ssh commands; type ssh %s .local/bin/ollie, or install it for every user with ollie-remote deploy -system %s",
			h.Name, s.path, h.Name, h.Name)
		if s.works {
			if row != "ok" {
				t.Errorf("%s (%s): the table says %q, want ok", h.Name, s.name, row)
			}
		} else {
			if !strings.Contains(out, h.Name+": degraded: "+hint+"\n") {
				t.Errorf("%s (%s): the deploy did not say, under the host:\n%s", h.Name, s.name, hint)
			}
			if row != "ok, degraded: "+hint {
				t.Errorf("%s (%s): the table says %q", h.Name, s.name, row)
			}
		}
		sshOllie(t, l, h, s, "ollie", s.works)
		sshOllie(t, l, h, s, ".local/bin/ollie", true)
	}

	// Deploying again changes nothing, edits no file twice, and says the
	// same of the hosts that cannot find ollie.
	out = r.must(append([]string{"deploy"}, names...)...)
	for i, s := range shells {
		h := l.Host(i)
		row := deployRow(out, h.Name)
		if want := "ok, up to date"; s.works && row != want || !s.works && !strings.HasPrefix(row, "ok, degraded: ssh "+h.Name+" ollie is not found") {
			t.Errorf("%s (%s), deployed again: %q", h.Name, s.name, row)
		}
	}
	for _, f := range []string{".bashrc", ".zshenv", ".config/fish/conf.d/ollie.fish", ".cshrc", ".tcshrc"} {
		for i, s := range shells {
			b, _ := os.ReadFile(filepath.Join(l.Host(i).Home, f))
			if n := strings.Count(string(b), "# added by ollie-remote"); n > 1 {
				t.Errorf("%s (%s): ~/%s has the PATH block %d times", l.Host(i).Name, s.name, f, n)
			}
		}
	}

	t.Run("system", func(t *testing.T) { testDeploySystem(t, r, l, shells, cfg.Password) })
}

// testDeploySystem is deploy -system on the dash host (h13).
func testDeploySystem(t *testing.T, r *remote, l *sshlab.Lab, shells []loginShell, password string) {
	const dash = 2
	h := l.Host(dash)
	desk := privateDir(t)
	conf := filepath.Join(desk, "config")
	os.MkdirAll(filepath.Join(conf, "ollie"), 0700)
	// An askpass that approves, logs each prompt, and types a wrong
	// password the first time it is asked for one.
	log := filepath.Join(desk, "askpass.log")
	program := filepath.Join(desk, "askpass")
	os.WriteFile(program, []byte(fmt.Sprintf(`#!/bin/sh
printf '%%s\n---\n' "$1" >> %[1]s
if [ "$SSH_ASKPASS_PROMPT" = confirm ]; then exit "$(cat %[2]s/approve)"; fi
if [ ! -e %[2]s/asked ]; then : > %[2]s/asked; echo wrong-password; exit 0; fi
printf '%%s\n' '%[3]s'
`, log, desk, password)), 0700)
	approve := func(yes bool) {
		s := "1"
		if yes {
			s = "0"
		}
		os.WriteFile(filepath.Join(desk, "approve"), []byte(s), 0600)
	}
	system := func() string {
		t.Helper()
		t0 := time.Now()
		defer func() { t.Logf("deploy -system took %v", time.Since(t0)) }()
		cmd := r.cmd("deploy", "-system", h.Name)
		cmd.Env = append(cmd.Env, "OLLIE_ASKPASS="+program, "XDG_CONFIG_HOME="+conf, "DISPLAY=", "WAYLAND_DISPLAY=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("deploy -system %s: %v\n%s", h.Name, err, out)
		}
		return string(out)
	}
	asked := func() string { b, _ := os.ReadFile(log); os.Remove(log); return string(b) }
	notInstalled := h.Name + ": degraded: " + deploy.SystemCommand + " was not installed: "

	// Another program's file is left as it is, and nobody is asked.
	foreign := foreignCommand
	if err := os.WriteFile(deploy.SystemCommand, []byte(foreign), 0755); err != nil {
		t.Fatal(err)
	}
	approve(true)
	out := system()
	if !strings.Contains(out, notInstalled+"it is there and is not ollie-remote's (-rwxr-xr-x 1 root root") {
		t.Errorf("a foreign %s: deploy said\n%s", deploy.SystemCommand, out)
	}
	if b, _ := os.ReadFile(deploy.SystemCommand); string(b) != foreign {
		t.Errorf("the foreign %s was changed to:\n%s", deploy.SystemCommand, b)
	}
	if a := asked(); a != "" {
		t.Errorf("the desktop was asked although nothing could be installed:\n%s", a)
	}
	os.Remove(deploy.SystemCommand)

	// The desktop's policy file denies it for this host.
	policy := filepath.Join(conf, "ollie", "broker-policy.yaml")
	os.WriteFile(policy, []byte("rules:\n  - host: "+h.Name+"\n    tool: "+deploy.SystemTool+"\n    decision: deny\n"), 0600)
	out = system()
	if !strings.Contains(out, notInstalled+"not approved: denied by a rule of the desktop's broker policy") || deployRow(out, h.Name) == "ok" {
		t.Errorf("denied by policy: deploy said\n%s", out)
	}
	if a := asked(); a != "" {
		t.Errorf("the person was asked although the policy answers:\n%s", a)
	}
	os.Remove(policy)

	// The person at the desktop denies it.
	approve(false)
	out = system()
	if !strings.Contains(out, notInstalled+"not approved: denied by the person at the desktop") {
		t.Errorf("denied by the person: deploy said\n%s", out)
	}
	if a := asked(); !strings.Contains(a, "ollie: "+h.Name+" asks to run as root (sudo)\n  tool:     "+deploy.SystemTool) {
		t.Errorf("the person was asked:\n%s", a)
	}
	if _, err := os.Lstat(deploy.SystemCommand); err == nil {
		t.Fatalf("%s installed without approval", deploy.SystemCommand)
	}

	// Approved: a wrong password, then the right one.
	approve(true)
	out = system()
	t.Logf("deploy -system:\n%s", out)
	if !strings.Contains(out, h.Name+": installed "+deploy.SystemCommand+" for every user") || deployRow(out, h.Name) != "ok" {
		t.Errorf("approved: deploy said\n%s", out)
	}
	a := asked()
	if strings.Count(a, "sudo password for root on "+h.Name) != 2 || !strings.Contains(a, h.Name+` says "wrong password", attempt 2 of 3`) {
		t.Errorf("the desktop was asked:\n%s", a)
	}
	fi, err := os.Stat(deploy.SystemCommand)
	if err != nil || fi.Mode().Perm() != 0755 {
		t.Fatalf("%s: %v %v", deploy.SystemCommand, fi, err)
	}
	// Now dash finds it, and so do the other users of this machine.
	sshOllie(t, l, h, shells[dash], "ollie", true)
	sshOllie(t, l, l.Host(3), shells[3], "ollie", true)

	// Again: nothing to do, nobody asked.
	out = system()
	if row := deployRow(out, h.Name); row != "ok, up to date" || strings.Contains(out, "installed") {
		t.Errorf("deploy -system again:\n%s", out)
	}
	if a := asked(); a != "" {
		t.Errorf("the desktop was asked again:\n%s", a)
	}

	// The password is nowhere on the host.
	searchFor(t, password, h.Home, "/tmp", "/var/log", filepath.Dir(deploy.SystemCommand))
	searchProcsFor(t, password)
}

// sshOllie runs "ssh HOST CMD help" with the real OpenSSH client, and
// checks that it printed ollie's usage, or, where the shell cannot find
// it, that the login shell said so.
func sshOllie(t *testing.T, l *sshlab.Lab, h *sshlab.Host, s loginShell, cmd string, works bool) {
	t.Helper()
	out, err := l.SSH(h.Name, cmd, "help").CombinedOutput()
	ran := err == nil && strings.Contains(string(out), "usage: ollie")
	switch {
	case works && !ran:
		t.Errorf("%s (%s): ssh %s %s help: %v\n%s", h.Name, s.name, h.Name, cmd, err, out)
	case !works && (ran || !strings.Contains(strings.ToLower(string(out)), "not found")):
		t.Errorf("%s (%s): ssh %s %s help should not find it: %v\n%s", h.Name, s.name, h.Name, cmd, err, out)
	}
}

// deployRow is the RESULT of host's row in a deploy table: from where
// the header's RESULT starts (SENT is two words).
func deployRow(out, host string) string {
	col := -1
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 5 && f[0] == "HOST" && f[5] == "RESULT":
			col = strings.Index(line, "RESULT")
		case col >= 0 && len(f) > 0 && f[0] == host && len(line) > col:
			return strings.TrimSpace(line[col:])
		}
	}
	return ""
}

// foreignCommand is another program's /usr/local/bin/ollie, as the test
// puts it there.
const foreignCommand = "#!/bin/sh\n# ollie's deploy test: another program named ollie\necho not ollie\n"

// removeOurSystemCommand removes what -system, or the test, installed on
// this machine, and only that.
func removeOurSystemCommand(t *testing.T) {
	b, err := os.ReadFile(deploy.SystemCommand)
	if err == nil && (strings.Contains(string(b), "installed by ollie-remote deploy -system") || string(b) == foreignCommand) {
		os.Remove(deploy.SystemCommand)
	} else if err == nil {
		t.Logf("%s is not ollie-remote's: left", deploy.SystemCommand)
	}
}
