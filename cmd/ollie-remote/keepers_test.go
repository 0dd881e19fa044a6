package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/paths"
	"ollie/internal/sshlab"
	"ollie/tunnel/keeper"
)

// sshKeepers runs ollie-remote and ollie as a desktop user would, with
// the lab's ssh config (A) or a second one (B) in which the name h11 is
// another machine: the lab's h12.
type sshKeepers struct {
	t          *testing.T
	lab        *sshlab.Lab
	a, b       string // the two ssh config files
	runtimeDir string // XDG_RUNTIME_DIR
	remoteDir  string // OLLIE_REMOTE_DIR, "" for none
}

func newSSHKeepers(t *testing.T) *sshKeepers {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orcfg"})
	for _, h := range lab.Hosts {
		freshHome(t, h)
	}
	h12 := lab.Host(1)
	b := filepath.Join(t.TempDir(), "other_config")
	os.WriteFile(b, fmt.Appendf(nil, "Host h11\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n",
		h12.Addr, h12.Port, h12.User, lab.ClientKey, lab.KnownHosts), 0o600)
	rt, err := os.MkdirTemp("", "xr")
	if err != nil {
		t.Fatal(err)
	}
	k := &sshKeepers{t: t, lab: lab, a: lab.ConfigFile, b: b, runtimeDir: rt}
	t.Cleanup(func() {
		for _, dir := range []string{"", k.remoteDir} {
			for _, cfg := range []string{k.a, k.b} {
				c := k.cmd("-F", cfg, "down", "-all")
				if dir != "" {
					c.Env = append(c.Env, "OLLIE_REMOTE_DIR="+dir)
				}
				c.Run()
			}
		}
		os.RemoveAll(rt)
	})
	return k
}

func (k *sshKeepers) env() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "OLLIE_REMOTE_DIR=") && !strings.HasPrefix(e, "XDG_RUNTIME_DIR=") {
			env = append(env, e)
		}
	}
	env = append(env, "XDG_RUNTIME_DIR="+k.runtimeDir, "SSH_AUTH_SOCK=")
	if k.remoteDir != "" {
		env = append(env, "OLLIE_REMOTE_DIR="+k.remoteDir)
	}
	return env
}

func (k *sshKeepers) cmd(args ...string) *exec.Cmd {
	c := exec.Command(remoteBin, append([]string{"-bin", binDir, "-data", dataDir}, args...)...)
	c.Env = k.env()
	return c
}

// remote runs ollie-remote -F config args.
func (k *sshKeepers) remote(config string, args ...string) (string, error) {
	out, err := k.cmd(append([]string{"-F", config}, args...)...).CombinedOutput()
	return string(out), err
}

func (k *sshKeepers) must(config string, args ...string) string {
	k.t.Helper()
	out, err := k.remote(config, args...)
	if err != nil {
		k.t.Fatalf("ollie-remote -F %s %s: %v\n%s", config, strings.Join(args, " "), err, out)
	}
	return out
}

// ollie runs ollie -H h11 ls session, with extra environment.
func (k *sshKeepers) ollie(env ...string) (string, error) {
	c := exec.Command(filepath.Join(binDir, "olliesrv"), "ollie", "-H", "h11", "ls", "session")
	c.Env = append(k.env(), env...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// TestKeeperPerSSHConfig: the keeper is per desktop user and ssh
// configuration. Where one keeper holds h11 with the lab's config, deploy
// and up given another config, in which h11 is another machine (h12),
// reach that machine: two configurations give two keepers, each with its
// own socket for h11; status names the other; ollie -H h11 asks which.
// With OLLIE_REMOTE_DIR naming one keeper's directory, deploy -F other
// goes over its own connection, saying so, and up -F other is refused,
// saying why.
func TestKeeperPerSSHConfig(t *testing.T) {
	k := newSSHKeepers(t)
	h11, h12 := k.lab.Host(0), k.lab.Host(1)

	t.Run("one directory", func(t *testing.T) {
		k.t = t
		dir, err := os.MkdirTemp("", "or")
		if err != nil {
			t.Fatal(err)
		}
		k.remoteDir = dir
		defer func() { k.remoteDir = "" }()
		k.must(k.a, "deploy", "h11")
		k.must(k.a, "up", "h11")
		out := k.must(k.b, "deploy", "h11")
		t.Logf("deploy -F other:\n%s", out)
		if !strings.Contains(out, "h11: ollie-remote up holds it with -F "+k.a+"; deploying with -F "+k.b+" over a new connection") {
			t.Errorf("deploy -F other while a keeper holds h11 with the lab's config did not say so:\n%s", out)
		}
		checkDeployed(t, h12, filepath.Join(binDir, "olliesrv"))
		out, err = k.remote(k.b, "up", "h11")
		t.Logf("up -F other:\n%s", out)
		if err == nil || !strings.Contains(out, "holds its hosts with -F "+k.a) || !strings.Contains(out, "OLLIE_REMOTE_DIR") {
			t.Errorf("up -F other into a keeper of another config: %v\n%s", err, out)
		}
		if st := k.must(k.a, "status"); tableRow(st, "h11") == nil {
			t.Errorf("status after the refused up:\n%s", st)
		}
		k.must(k.a, "down", "h11")
	})

	t.Run("two keepers", func(t *testing.T) {
		k.t = t
		checkDeployed(t, h11, filepath.Join(binDir, "olliesrv"))
		k.must(k.a, "up", "h11")
		k.must(k.b, "up", "h11")
		t.Setenv("XDG_RUNTIME_DIR", k.runtimeDir)
		t.Setenv("OLLIE_REMOTE_DIR", "")
		os.Unsetenv("OLLIE_REMOTE_DIR")
		da, db := paths.KeeperDir(paths.NewSSHConfig(k.a, nil)), paths.KeeperDir(paths.NewSSHConfig(k.b, nil))
		if da == db || filepath.Dir(da) != k.runtimeDir {
			t.Fatalf("keeper directories %s and %s", da, db)
		}
		for _, d := range []string{da, db} {
			c, err := net.Dial("unix", keeper.ControlSocket(d))
			if err != nil {
				t.Fatalf("no keeper answers in %s: %v", d, err)
			}
			c.Close()
		}
		// deploy -F B reaches B's keeper, which holds B's h11 (h12).
		if out := k.must(k.b, "deploy", "h11"); !strings.Contains(out, "up to date") || strings.Contains(out, "new connection") {
			t.Errorf("deploy -F other through its own keeper:\n%s", out)
		}

		st := k.must(k.a, "status")
		t.Logf("status -F lab:\n%s", st)
		if row := tableRow(st, "h11"); row == nil || !strings.Contains(st, "also up with -F "+k.b+": h11 (ollie-remote -F "+k.b+" status)") {
			t.Errorf("status -F lab:\n%s", st)
		}
		if st, err := k.cmd("status").CombinedOutput(); err != nil || !strings.Contains(string(st), "also up with -F "+k.a+": h11") ||
			!strings.Contains(string(st), "also up with -F "+k.b+": h11") {
			t.Errorf("status with the default config: %v\n%s", err, st)
		}

		out, err := k.ollie()
		t.Logf("ollie -H h11:\n%s", out)
		if err == nil || !strings.Contains(out, "with 2 ssh configurations") || !strings.Contains(out, "OLLIE_REMOTE_DIR="+db) {
			t.Errorf("ollie -H h11 with two keepers holding an h11: %v\n%s", err, out)
		}
		if out, err := k.ollie("OLLIE_REMOTE_DIR=" + db); err != nil {
			t.Errorf("ollie -H h11 with B's directory: %v\n%s", err, out)
		}

		k.must(k.a, "down", "h11")
		if out, err := k.ollie(); err != nil {
			t.Errorf("ollie -H h11 with one keeper left: %v\n%s", err, out)
		}
		if st := k.must(k.b, "status"); tableRow(st, "h11") == nil || strings.Contains(st, "also up") {
			t.Errorf("status -F other after down -F lab:\n%s", st)
		}
		k.must(k.b, "down", "h11")
	})
}
