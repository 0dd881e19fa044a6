package remote

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/await"
	"ollie/internal/sshlab"
	"ollie/ns/client"
	"ollie/tunnel/keeper"
)

// lockedBuffer is a log both the test and a broker's goroutines use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testPolicy points the broker policy at a private file, and returns a
// function that writes it.
func testPolicy(t *testing.T) (path string, write func(string)) {
	conf := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", conf)
	path = filepath.Join(conf, "ollie", "broker-policy.yaml")
	os.MkdirAll(filepath.Dir(path), 0o700)
	return path, func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeeperPolicyLive: the keeper's broker reads its policy file again
// when it changes: a deny rule added while it runs applies to the next
// request, and a broken edit keeps the last good rules, saying so in the
// log and in what status shows, once per edit.
func TestKeeperPolicyLive(t *testing.T) {
	dir := privateRemoteDir(t) // no terminal broker runs there
	_, write := testPolicy(t)
	write("rules:\n  - {host: h4, tool: tail_log, decision: allow}\n")
	program, asked := askpass(t, t.TempDir(), "unused", true)
	t.Setenv("OLLIE_ASKPASS", program)
	var log lockedBuffer
	b := desktop.KeeperBroker(slog.New(slog.NewTextHandler(&log, nil)))
	socks := approvalSockets(t, b, dir, "h4")
	ask := func(tool string) broker.Answer {
		t.Helper()
		c, err := net.Dial("unix", socks["h4"])
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cv, ans, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: tool, Executable: "/bin/" + tool, Cwd: "/"})
		if err != nil {
			t.Fatalf("asking for %s: %v", tool, err)
		}
		cv.Close("done")
		return ans
	}
	askpassed := func() string { b, _ := os.ReadFile(asked); return string(b) }

	if a := ask("tail_log"); a.Decision != broker.Once || askpassed() != "" {
		t.Fatalf("allowed by the policy: %+v; askpass was asked %q", a, askpassed())
	}
	write("rules:\n  - {tool: tail_log, decision: deny}\n  - {host: h4, tool: tail_log, decision: allow}\n")
	if a := ask("tail_log"); a.Decision != broker.Deny || !strings.Contains(a.Reason, "policy") || askpassed() != "" {
		t.Fatalf("after a deny rule was added: %+v; askpass was asked %q", a, askpassed())
	}
	if desktop.PolicyState(b) != "" {
		t.Errorf("status of a good policy: %q", desktop.PolicyState(b))
	}

	write("rules:\n  - {tool: tail_log, decision: deny}\n  - {hots: h4, decision: allow}\n")
	if a := ask("tail_log"); a.Decision != broker.Deny || askpassed() != "" {
		t.Errorf("after a broken edit: %+v, want the last good rules' deny; askpass was asked %q", a, askpassed())
	}
	ask("tail_log")
	st := desktop.PolicyState(b)
	if !strings.Contains(st, `unknown field "hots"`) || !strings.Contains(st, "the 2 rules last read without error stay in force") {
		t.Errorf("status of a broken policy: %q", st)
	}
	if n := strings.Count(log.String(), "the broker policy is broken"); n != 1 {
		t.Errorf("the broken edit was logged %d times, want once:\n%s", n, log.String())
	}
	if a := ask("other_tool"); a.Decision != broker.Once || !strings.Contains(askpassed(), "other_tool") {
		t.Errorf("a tool no rule names: %+v; askpass was asked %q", a, askpassed())
	}

	write("rules: []\n")
	if a := ask("tail_log"); a.Decision != broker.Once || desktop.PolicyState(b) != "" {
		t.Errorf("after the fix: %+v, status %q", a, desktop.PolicyState(b))
	}
}

// TestPolicyBrokenReported: a broken policy file is reported on the
// terminal of ollie-remote broker, in keeper.log and by status, each
// saying that the last good rules stay in force; the terminal also says
// when a fixed file is read again.
func TestPolicyBrokenReported(t *testing.T) {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	dir := privateRemoteDir(t)
	_, write := testPolicy(t)
	write("rules:\n  - {tool: rm_rf, decision: deny}\n")

	_, scr := startTerminalBroker(t)

	kp := exec.Command(remoteBin, keeper.Command)
	kp.Env = os.Environ()
	if err := kp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		kp.Process.Kill()
		kp.Wait()
	}()
	await.Until(t, 10*time.Second, "the keeper never listened", func() bool {
		c, err := net.Dial("unix", keeper.ControlSocket(dir))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	write("rules:\n  - {tool: rm_rf, decision: deny}\n  - {tool: x, decision: perhaps}\n")
	scr.waitFor(t, `the policy file is broken: broker: bad policy: `)
	if s := scr.String(); !strings.Contains(s, `decision "perhaps"`) || !strings.Contains(s, "the one rule last read without error stays in force") {
		t.Errorf("the terminal says:\n%s", s)
	}
	out, err := exec.Command(remoteBin, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `broker policy: broker: bad policy: `) || !strings.Contains(string(out), `decision "perhaps"`) {
		t.Errorf("status: %v\n%s", err, out)
	}
	var klog []byte
	await.Until(t, 10*time.Second, "keeper.log does not say the policy is broken", func() bool {
		klog, _ = os.ReadFile(filepath.Join(dir, "keeper.log"))
		return bytes.Contains(klog, []byte("the broker policy is broken")) && bytes.Contains(klog, []byte(`perhaps`))
	}, func() string { return string(klog) })

	write("rules:\n  - {tool: rm_rf, decision: deny}\n  - {tool: x, decision: allow}\n")
	scr.waitFor(t, "was read again: 2 rules in force")
	if out, _ := exec.Command(remoteBin, "status").CombinedOutput(); strings.Contains(string(out), "broker policy") {
		t.Errorf("status after the fix:\n%s", out)
	}
}

// TestPolicyLiveThroughKeeper: the real keeper holding a real sshd host
// reads its policy file again while it runs: a request the host sends
// through its gate (a tool run with bypass) is allowed by a rule; once a deny rule
// is added, the next is denied; a broken edit keeps that deny and is
// reported in keeper.log and by status; the test askpass is never asked
// about what a rule answers.
func TestPolicyLiveThroughKeeper(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "orpol"})
	r := newRemote(t, lab)
	r.must("deploy", "h11")
	conf := t.TempDir()
	policy := filepath.Join(conf, "ollie", "broker-policy.yaml")
	os.MkdirAll(filepath.Dir(policy), 0o700)
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(policy, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("rules:\n  - {host: h11, tool: reasoning_think, decision: allow}\n")
	program, asked := askpass(t, privateDir(t), "unused", true)
	up := r.cmd("up", "h11")
	up.Env = append(up.Env, "OLLIE_ASKPASS="+program, "XDG_CONFIG_HOME="+conf)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sock string
	if !await.Poll(ctx, func() bool {
		if c, err := client.DialAs(filepath.Join(r.dir, "h11.ns"), ""); err == nil {
			b, _ := c.ReadAll(ctx, "bypass/broker")
			c.Close()
			if first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); strings.Contains(first, "broker-") {
				sock = first
			}
		}
		return sock != ""
	}) {
		t.Fatal("h11 never learnt of the desktop broker")
	}
	// Through the host's gate, as an agent's call asks: a deployed tool
	// run with bypass.
	think := func() (string, bool) {
		t.Helper()
		return askThroughGate(t, lab, "h11", "reasoning_think", `{"thought":"policy"}`)
	}
	askpassed := func() string { b, _ := os.ReadFile(asked); return string(b) }

	if out, ran := think(); !ran || askpassed() != "" {
		t.Fatalf("allowed by the policy: %s; askpass was asked %q", out, askpassed())
	}
	write("rules:\n  - {tool: reasoning_think, decision: deny}\n  - {host: h11, tool: reasoning_think, decision: allow}\n")
	if out, ran := think(); ran || !strings.Contains(out, "policy") {
		t.Errorf("after a deny rule was added while the keeper runs: %s", out)
	}
	write("rules:\n  - {tool: reasoning_think, decision: deny}\n  - {host: h11, tool: reasoning_think, decision: alow}\n")
	if out, ran := think(); ran {
		t.Errorf("after a broken edit: %s, want the last good rules' deny", out)
	}
	if askpassed() != "" {
		t.Errorf("askpass was asked what the policy answers:\n%s", askpassed())
	}
	klog, _ := os.ReadFile(filepath.Join(r.dir, "keeper.log"))
	if !bytes.Contains(klog, []byte("the broker policy is broken")) || !bytes.Contains(klog, []byte(`decision \"alow\"`)) {
		t.Errorf("keeper.log does not say the policy is broken:\n%s", klog)
	}
	if st := r.must("status"); !strings.Contains(st, `broker policy: broker: bad policy: `) || !strings.Contains(st, "the 2 rules last read without error stay in force") {
		t.Errorf("status:\n%s", st)
	}
	if out, ran := askThroughGate(t, lab, "h11", "file_glob", `{"pattern":"*"}`); !ran || !strings.Contains(askpassed(), "h11 asks to run outside its sandbox") {
		t.Errorf("a tool no rule names: %s; askpass was asked %q", out, askpassed())
	}

	// Another process on the host (the lab's hosts share this machine)
	// asks over the keeper's socket itself, for a tool the policy allows:
	// without the key only olliesrv holds, it is closed unanswered, and
	// status says so.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if cv, a, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "reasoning_think", Executable: "/bin/true", Cwd: "/"}); err == nil {
		cv.Close("ran")
		t.Errorf("a request without olliesrv's key was answered: %+v", a)
	}
	if st := r.must("status", "h11"); !strings.Contains(st, "ok (1 refused without olliesrv's key)") {
		t.Errorf("status after a request without the key:\n%s", st)
	}
}
