package remote

import (
	"encoding/json"
	"fmt"
	"ollie/broker/desktop"
	"ollie/internal/await"
	"ollie/internal/termsafe"
	"ollie/tunnel/deploy"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The hostile-host tests replay issue 11's findings against the real
// desktop, one test per finding: h11 is a compromised host whose olliesrv
// is a scripted fake (hostile_fake_test.go), h12 an honest one beside it
// (hostile_harness_test.go). Each passes only when the honest host keeps
// its tunnel and gets its approval prompt in time, the keeper and the
// terminal broker stay under memBound, and nothing the host sent reaches
// the terminal as an escape. Their "figure:" lines are the numbers
// docs/benchmarks.md records (go test -run TestHostile -v).

// TestHostilePhishing (finding 1): a host's fields try to rewrite the
// prompt into another host's sudo request, set the title and the
// clipboard; through askpass's argument, then on the terminal broker.
func TestHostilePhishing(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{Approvals: "escapes"})
	dir := privateDir(t)
	program, prompts := askpassPrompts(t, dir)
	d := hl.desk(t, "OLLIE_ASKPASS="+program)
	d.mustUp(bad, good)
	hl.waitEvent(t, `escapes: tool name: deny ".*is not a tool's name.*" <nil>`, 20*time.Second)
	hl.waitEvent(t, `escapes: password 3`, 20*time.Second)
	asked, _ := filepath.Glob(filepath.Join(prompts, "prompt.*"))
	if len(asked) < 2 {
		t.Fatalf("askpass was asked %d times", len(asked))
	}
	for _, f := range asked {
		b, _ := os.ReadFile(f)
		checkPrompt(t, "askpass's argument", string(b), bad, strings.Contains(f, ".confirm."))
	}

	d.startBroker()
	d.screen.setAnswer(func(kind, seg string) string {
		if kind == "password" {
			return "not-the-password"
		}
		if strings.Contains(seg, honestTool) {
			return "d"
		}
		return "o" // on to the password asks, whose problem is the host's too
	})
	await.Until(t, 10*time.Second, "the terminal broker showed fewer than 3 password prompts that are ollie's own lines", func() bool {
		return countKind(d.screen.seen(), "password") >= 3
	}, func() string {
		checkClean(t, "the broker's terminal", d.screen.String())
		return fmt.Sprintf("it showed %d", countKind(d.screen.seen(), "password"))
	})
	for _, p := range d.screen.seen() {
		if !strings.Contains(p.seg, honestTool) {
			checkPrompt(t, "the terminal's "+p.kind+" prompt", p.seg, bad, p.kind == "approve")
		}
	}
	d.finish("phishing")
}

// TestHostileApprovalFlood (finding 2): 300 requests in distinct sessions
// must not keep the honest host's prompt waiting behind them.
func TestHostileApprovalFlood(t *testing.T) {
	hl := startHostileLab(t)
	hl.script(t, fakeScript{Approvals: "flood", Count: 300})
	bad, good := hl.bad.Name, hl.good.Name
	d := hl.desk(t)
	d.startBroker()
	d.screen.setThink(50 * time.Millisecond) // a person faster than any
	d.mustUp(bad, good)
	m := hl.waitEvent(t, `flood-sent written=(\d+) failed=(\d+)`, 30*time.Second)
	t.Logf("the fake wrote %s requests (%s failed)", m[1], m[2])
	honest := d.finish("300 requests in distinct sessions")
	if honest.delay > 2*time.Second {
		t.Errorf("the honest host's request was shown %v after it asked, want within 2s", honest.delay)
	}
	// The desktop's budget for the host (issue 29) puts at most its
	// prompts a minute to the person; the rest are denied unasked, so the
	// honest host's prompt (checked by finish) never waits behind them.
	ps := d.screen.seen()
	flooded := 0
	for _, p := range ps {
		if !strings.Contains(p.seg, honestTool) {
			flooded++
		}
	}
	t.Logf("%d prompts of %s shown in all", flooded, bad)
	if flooded > desktop.DefaultPromptsPerMinute {
		t.Errorf("%d prompts of %s shown, more than the budget of %d a minute", flooded, bad, desktop.DefaultPromptsPerMinute)
	}
	// One notice for the burst, naming the host from the connection and
	// how to lift the limit.
	notice := "from " + bad + " refused: over this desktop's limit of"
	d.screen.waitFor(t, notice, 10*time.Second)
	// The silence is the point: a second notice for the same burst would
	// come a second after the first.
	await.For(t.Context(), 2*time.Second)
	if n := strings.Count(d.screen.String(), notice); n != 1 {
		t.Errorf("%d notices of %s's refusals, want one for the burst:\n%s", n, bad, tailString(d.screen.String(), 3000))
	}
	if !strings.Contains(d.screen.String(), "prompts_per_minute") {
		t.Errorf("the notice does not say how to lift the limit:\n%s", tailString(d.screen.String(), 3000))
	}
}

// TestHostileBrokerConnFlood (finding 2): 400 broker connections each
// sending 1 MiB without a newline, first at the keeper's own broker, then
// through to the terminal broker.
func TestHostileBrokerConnFlood(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{Approvals: "connflood", Count: 400, Bytes: 1 << 20})
	d := hl.desk(t)
	d.mustUp(bad, good)
	m := hl.waitEvent(t, `connflood-sent round=1 ok=(\d+) failed=(\d+)`, 40*time.Second)
	t.Logf("round 1 (the keeper answers): %s connections sent 1 MiB, %s failed; keeper at %s", m[1], m[2], mib(d.keeper.Peak()))
	d.startBroker()
	touch(t, filepath.Join(hl.stateDir(), "go-2"))
	m = hl.waitEvent(t, `connflood-sent round=2 ok=(\d+) failed=(\d+)`, 40*time.Second)
	t.Logf("round 2 (the terminal broker answers): %s connections sent 1 MiB, %s failed", m[1], m[2])
	d.finish("400 connections x 1 MiB")
}

// TestHostilePasswordAsks (finding 3): one approved sudo request asks for
// the password 10 times; the desktop asks the person 3 times at most.
func TestHostilePasswordAsks(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{Approvals: "password", PasswordAsks: 10})
	d := hl.desk(t)
	d.startBroker()
	d.screen.setAnswer(func(kind, seg string) string {
		switch {
		case kind == "password":
			return "not-the-password"
		case strings.Contains(seg, "root_tool"):
			return "o"
		}
		return "d"
	})
	d.mustUp(bad, good)
	m := hl.waitEvent(t, `password: secrets (\d+)`, 30*time.Second)
	asked := countKind(d.screen.seen(), "password")
	t.Logf("the host got %s passwords; the terminal asked %d times", m[1], asked)
	if n, _ := strconv.Atoi(m[1]); n > 3 || asked > 3 {
		t.Errorf("the host asked 10 times and got %d passwords, after %d password prompts: want at most 3", n, asked)
	}
	d.finish("10 password asks")
}

// TestHostileOutput (finding 5): escapes on every output path: up's
// messages and the host's error output, the deploy report, status's
// columns, ollie -H's names and its 9P errors.
func TestHostileOutput(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{StartExit: 3, StartStderr: hostileField("start failed") + "\n"})
	d := hl.desk(t)
	d.startBroker()
	out, _ := d.up(bad, good)
	t.Logf("up with a failing start:\n%s", out)
	checkClean(t, "up (failing start)", out)

	// One data file missing, so that deploy uploads it and the fake
	// commits and reports.
	var m deploy.Manifest
	json.Unmarshal([]byte(hl.manifest), &m)
	for rel := range m.Data {
		delete(m.Data, rel)
		break
	}
	mb, _ := json.Marshal(m)
	report, _ := json.Marshal(deploy.Report{Changed: []string{hostileField("changed"), "\x1b[2K\r" + good + ": up to date (all good)"}})
	sc := fakeScript{
		// No space in it (start's answer is split into words), nor
		// U+0085, which Go counts as one.
		SockDir:   "ns\x1b]0;pwned\x07\u009b2J",
		Manifest:  string(mb),
		Commit:    string(report),
		Status:    "version 1.0" + escRewrite + escTitle + "\nuptime 5\nsessions 3" + escC1 + escBidi + "\nagents " + escClipboard + escBack + "\n",
		Names:     []string{hostileField("session"), "plain"},
		WalkError: hostileField("no such file"),
	}
	hl.script(t, sc)
	out, err := d.up(bad)
	t.Logf("up: %v\n%s", err, out)
	checkClean(t, "up", out)
	if !strings.Contains(out, bad+": up:") {
		t.Errorf("up %s failed: %v\n%s", bad, err, out)
	}

	out, err, _ = d.run(60*time.Second, "deploy", bad, good)
	t.Logf("deploy: %v\n%s", err, out)
	checkClean(t, "deploy (the host's report)", out)
	if !strings.Contains(out, "up to date (all good)") {
		t.Errorf("deploy did not show the host's report at all:\n%s", out)
	}

	sc.CommitExit, sc.CommitStderr = 1, hostileField("commit failed")+"\n"
	hl.script(t, sc)
	out, err, _ = d.run(60*time.Second, "deploy", bad)
	t.Logf("deploy: %v\n%s", err, out)
	checkClean(t, "deploy (the host's error output)", out)

	out, err, _ = d.run(30*time.Second, "status")
	t.Logf("status: %v\n%s", err, out)
	checkClean(t, "status", out)
	if row := tableRow(out, bad); row == nil || row[1] == "-" {
		t.Errorf("status did not read %s's status:\n%s", bad, out)
	}

	out, err, _ = d.ollie(30*time.Second, "-H", bad, "ls", "/session")
	t.Logf("ollie ls: %v\n%s", err, out)
	checkClean(t, "ollie -H ls", out)
	if !strings.Contains(out, "plain") {
		t.Errorf("ollie -H %s ls /session did not list: %v\n%s", bad, err, out)
	}
	out, err, _ = d.ollie(30*time.Second, "-H", bad, "read", "/nosuch")
	t.Logf("ollie read: %v\n%s", err, out)
	checkClean(t, "ollie -H (a 9P error)", out)
	if !strings.Contains(out, "no such file") {
		t.Errorf("ollie -H %s read /nosuch did not show the host's error: %v\n%s", bad, err, out)
	}
	d.finish("escapes on every output path")
}

// checkPrompt checks one prompt a host's request made: nothing a terminal
// acts on, no line the host's text started, and the host the request came
// over named on an approval's first line, or, for a password, at the end
// of the password line, beside where it is typed. On the terminal an
// approval's prompt follows a blank line (before it: the broker's banner,
// its log, earlier answers); a password's is the last line.
func checkPrompt(t *testing.T, what, p, host string, approval bool) {
	t.Helper()
	checkClean(t, what, p)
	p = strings.ReplaceAll(p, "\r\n", "\n")
	if i := strings.LastIndex(p, "\n\n"); i >= 0 {
		p = p[i+2:]
	}
	lines := strings.Split(strings.TrimLeft(p, "\n"), "\n")
	if approval && !strings.Contains(lines[0], host) {
		t.Errorf("%s: the first line does not name %s: %q", what, host, lines[0])
	}
	if last := lines[len(lines)-1]; !approval && !strings.Contains(last[max(0, len(last)-40):], host) {
		t.Errorf("%s: the password line does not end naming %s: %q", what, host, last)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "sudo password for h12") || strings.HasPrefix(l, "ollie: h12") {
			t.Errorf("%s: the host's text starts a line of its own: %q", what, l)
		}
		// Its words are quoted: outside the quotes no host is named but
		// the connection's.
		if strings.Contains(termsafe.Unquoted(l), "h12") {
			t.Errorf("%s: a line names h12 outside its quotes: %q", what, l)
		}
	}
	if approval && !strings.Contains(p, "  "+host+" says:\n") {
		t.Errorf("%s: the host's words are not attributed to %s:\n%s", what, host, p)
	}
}

// askpassPrompts writes an askpass that keeps each prompt in a file of its
// own (prompt.confirm.* or prompt.password.*), approves, and gives a wrong
// password.
func askpassPrompts(t *testing.T, dir string) (program, prompts string) {
	prompts = filepath.Join(dir, "prompts")
	os.Mkdir(prompts, 0700)
	script := `#!/bin/sh
f=$(mktemp -p ` + prompts + ` prompt.${SSH_ASKPASS_PROMPT:-password}.XXXXXX)
printf '%s' "$1" > "$f"
if [ "$SSH_ASKPASS_PROMPT" = confirm ]; then exit 0; fi
echo not-the-password
`
	program = filepath.Join(dir, "askpass")
	os.WriteFile(program, []byte(script), 0700)
	return program, prompts
}

func countKind(ps []prompt, kind string) int {
	n := 0
	for _, p := range ps {
		if p.kind == kind {
			n++
		}
	}
	return n
}

// checkDeployRows checks that the hostile host failed and the honest one
// did not.
func checkDeployRows(t *testing.T, out, bad, good string) {
	t.Helper()
	if row := tableRow(out, bad); row == nil || row[len(row)-1] != "FAILED" {
		t.Errorf("%s's deploy row %q, want FAILED", bad, row)
	}
	if row := tableRow(out, good); row == nil || !strings.HasPrefix(strings.Join(row[6:], " "), "ok") {
		t.Errorf("%s's deploy row %q, want ok", good, row)
	}
}

func touch(t *testing.T, p string) {
	if err := os.WriteFile(p, nil, 0644); err != nil {
		t.Fatal(err)
	}
}
