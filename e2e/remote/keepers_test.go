package remote

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/paths"
	"ollie/internal/sshlab"
	"ollie/ns/client"
	"ollie/tunnel/keeper"
)

// sshKeepers runs ollie-remote and ollie as a desktop user would, with
// the lab's ssh config (A) or a second one (B) in which the name h11 is
// another machine: the lab's h12.
type sshKeepers struct {
	t          *testing.T
	lab        *sshlab.Lab
	a, b       string   // the two ssh config files
	runtimeDir string   // XDG_RUNTIME_DIR
	remoteDir  string   // OLLIE_REMOTE_DIR, "" for none
	extraEnv   []string // for every command, and the keepers they start
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
	return append(env, k.extraEnv...)
}

// ollieAs runs ollie args with extra environment.
func (k *sshKeepers) ollieAs(env []string, args ...string) (string, error) {
	c := exec.Command(filepath.Join(binDir, "olliesrv"), append([]string{"ollie"}, args...)...)
	c.Env = append(k.env(), env...)
	out, err := c.CombinedOutput()
	return string(out), err
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

// TestFleetAcrossKeepers (issue 31, item 3): with two keepers, of the
// lab's ssh config (A: h11, h12) and of another (B: its h11 is the lab's
// h12), ollie -H fleet is the hosts of both, served alike by either
// keeper, the name both hold told apart as h11~TAG (the config file's
// name), which ollie -H takes too; an approval is labelled with the name
// the request's own keeper holds the host by, told apart the same way
// while the name is held twice, and plain again once it is not.
func TestFleetAcrossKeepers(t *testing.T) {
	k := newSSHKeepers(t)
	program, asked := askpass(t, privateDir(t), "unused", true)
	k.extraEnv = []string{"OLLIE_ASKPASS=" + program, "XDG_CONFIG_HOME=" + t.TempDir()}
	k.must(k.a, "deploy", "h11", "h12")
	k.must(k.a, "up", "h11", "h12")
	k.must(k.b, "up", "h11")
	t.Setenv("XDG_RUNTIME_DIR", k.runtimeDir)
	os.Unsetenv("OLLIE_REMOTE_DIR")
	da, db := paths.KeeperDir(paths.NewSSHConfig(k.a, nil)), paths.KeeperDir(paths.NewSSHConfig(k.b, nil))
	ta, tb := "h11~"+filepath.Base(k.a), "h11~"+filepath.Base(k.b)

	out, err := k.ollieAs(nil, "-H", "fleet", "read", "host/idx")
	t.Logf("ollie -H fleet read host/idx:\n%s", out)
	if err != nil {
		t.Fatalf("ollie -H fleet with two keepers: %v\n%s", err, out)
	}
	for _, dir := range []string{da, db} {
		out, err := k.ollieAs([]string{"OLLIE_REMOTE_DIR=" + dir}, "-H", "fleet", "read", "host/idx")
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			names = append(names, strings.Fields(line + " -")[0])
		}
		if err != nil || strings.Join(names, " ") != strings.Join([]string{tb, ta, "h12"}, " ") {
			t.Errorf("the fleet as the keeper in %s serves it: %v, hosts %q, want %s %s h12\n%s", dir, err, names, tb, ta, out)
		}
	}
	// B's h11 is the lab's h12: its namespace, through the fleet and
	// by its name.
	for _, args := range [][]string{{"-H", "fleet", "ls", "host/" + tb + "/session"}, {"-H", tb, "ls", "session"}, {"-H", ta, "ls", "session"}} {
		if out, err := k.ollieAs(nil, args...); err != nil {
			t.Errorf("ollie %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := k.ollieAs(nil, "-H", "h11", "ls", "session"); err == nil || !strings.Contains(out, "ollie -H "+tb+" ...") {
		t.Errorf("ollie -H h11, held by both: %v\n%s", err, out)
	}

	// The keepers register with the hosts: A with both, B with the lab's h12.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for sock, n := range map[string]int{paths.RemoteSocketIn(da, "h11"): 1, paths.RemoteSocketIn(da, "h12"): 2} {
		var b []byte
		if !await.Poll(ctx, func() bool {
			b = nil
			if c, err := client.DialAs(sock, ""); err == nil {
				b, _ = c.ReadAll(ctx, "bypass/broker")
				c.Close()
			}
			return strings.Count(string(b), "broker-") >= n
		}) {
			t.Fatalf("%s lists %q, want %d desktop registrations", sock, b, n)
		}
	}
	askpassed := func() string { b, _ := os.ReadFile(asked); return string(b) }
	bare := regexp.MustCompile(`(?m)^ollie: h11 asks`)
	if out, ran := askThroughGate(t, k.lab, "h11", "reasoning_think", `{"thought":"a"}`); !ran ||
		!strings.Contains(askpassed(), "ollie: "+ta+" asks") || bare.MatchString(askpassed()) {
		t.Errorf("the lab's h11 (A's h11) asks: %s; askpass was asked:\n%s", out, askpassed())
	}
	// The lab's h12 asks the desktop that registered last: B, which
	// holds it as h11, or A, as h12; never a bare h11.
	before := len(askpassed())
	if out, ran := askThroughGate(t, k.lab, "h12", "reasoning_think", `{"thought":"b"}`); !ran ||
		(!strings.Contains(askpassed()[before:], "ollie: "+tb+" asks") && !strings.Contains(askpassed()[before:], "ollie: h12 asks")) ||
		bare.MatchString(askpassed()) {
		t.Errorf("the lab's h12 (B's h11, A's h12) asks: %s; askpass was asked:\n%s", out, askpassed()[before:])
	}

	// With B's h11 down, h11 is one host again.
	k.must(k.b, "down", "h11")
	// A's keeper looks at the other keepers at most once a second
	// (keeper.othersNow) and says nothing when it does: the wait outlasts
	// its last look.
	await.For(t.Context(), 1500*time.Millisecond)
	before = len(askpassed())
	if out, ran := askThroughGate(t, k.lab, "h11", "reasoning_think", `{"thought":"c"}`); !ran || !bare.MatchString(askpassed()[before:]) {
		t.Errorf("the lab's h11, held once again: %s; askpass was asked:\n%s", out, askpassed()[before:])
	}
	if out, err := k.ollieAs(nil, "-H", "fleet", "ls", "host/h11/session"); err != nil {
		t.Errorf("ollie -H fleet ls host/h11/session with one h11: %v\n%s", err, out)
	}
}
