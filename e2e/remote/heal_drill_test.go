package remote

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/healdrill"
	"ollie/internal/nstest"
)

// TestHealDrillKeeper (issue 30): the drill on a real sshd lab host held
// by the keeper. An agent works through 40 queued prompts, each a model
// request for a tool call, the tool (a side effect that records its
// prompt's number, not replay-safe) and a model request for the answer,
// with ollie -H chat attached on the desktop. The host's daemon is killed
// with SIGKILL 25 times at random moments, each after its run recorded
// something; nobody restarts it but the keeper. Every prompt acknowledged
// gets its answer without a person, no side effect happens twice, and the
// attached chat shows every answer.
func TestHealDrillKeeper(t *testing.T) {
	t.Parallel() // its own lab users, keeper and model: it waits more than it works
	const kills, prompts = 25, 80
	r, h, llm := modelHost(t, "orheal")
	tools := filepath.Join(h.Home, ".config", "ollie", "tools")
	work := filepath.Join(h.Home, "drill")
	effects := filepath.Join(work, "effects")
	// The lab's users and homes outlive a run: nothing of an earlier one
	// may count in this one.
	os.RemoveAll(work)
	os.MkdirAll(tools, 0755)
	os.MkdirAll(work, 0755)
	if err := healdrill.WriteTool(tools, effects); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(h.Home, ".config"), work} {
		exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), d).Run()
	}
	llm.Respond(healdrill.Respond)
	r.must("up", "h11")

	olliesrv := filepath.Join(binDir, "olliesrv")
	env := append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "NO_COLOR=1")
	ollie := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(olliesrv, append([]string{"ollie", "-H", "h11"}, args...)...)
		cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, err := ollie(stdin, args...)
		if err != nil {
			t.Fatalf("ollie -H h11 %v: %v: %s", args, err, out)
		}
		return out
	}
	must("name=drill cwd="+work, "rdwr", "session/new")
	must("name=a backend=fake", "rdwr", "session/drill/agent/new")

	chat := exec.Command(olliesrv, "ollie", "-H", "h11", "chat", "session/drill/agent/a")
	chat.Env = env
	stdin, _ := chat.StdinPipe()
	var shown nstest.SyncBuffer
	chat.Stdout, chat.Stderr = &shown, &shown
	if err := chat.Start(); err != nil {
		t.Fatal(err)
	}
	chatEnded := make(chan error, 1)
	go func() { chatEnded <- chat.Wait() }()
	t.Cleanup(func() { stdin.Close(); chat.Process.Kill(); <-chatEnded })

	for i := 1; i <= prompts; i++ {
		must("prompt "+strconv.Itoa(i), "write", "session/drill/agent/a/prompt")
	}
	sid := strings.TrimSpace(must("", "read", "session/drill/id"))
	sessionFile := func() string {
		b, _ := os.ReadFile(filepath.Join(h.Home, ".local", "state", "ollie", "sessions", sid+".jsonl"))
		return string(b)
	}
	daemonPID := func() string {
		out, err := ollie("", "read", "status")
		if err != nil {
			return ""
		}
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "pid "); ok {
				return v
			}
		}
		return ""
	}
	answered := func() []int {
		hist, _ := ollie("", "read", "session/drill/agent/a/log")
		missing, _ := healdrill.Answers(hist, prompts)
		return missing
	}
	restart := killDaemonRepeatedly(t, kills, h.User, sessionFile, daemonPID, answered)

	if !await.Poll(ctxFor(t, 5*time.Minute), func() bool { return len(answered()) == 0 }) {
		t.Fatalf("prompts without an answer after the drill: %v", answered())
	}
	hist := must("", "read", "session/drill/agent/a/log")
	_, times := healdrill.Answers(hist, prompts)
	for i := 1; i <= prompts; i++ {
		if times[i] != 1 {
			t.Errorf("prompt %d has %d answers in the history, want 1", i, times[i])
		}
	}
	lines, twice := healdrill.Effects(effects)
	dups := len(twice)
	for _, n := range twice {
		t.Errorf("effect %s happened twice", n)
	}
	if dups > 0 {
		logEffectRecords(t, twice[0], sessionFile(), effects, h.User)
	}
	f := sessionFile()
	resumed, waited := strings.Count(f, `"kind":"agent.resume"`), strings.Count(f, `"error":"interrupted: olliesrv stopped`)
	if waited > 0 {
		t.Errorf("%d turns waited for a person, want every cut turn to go on by itself", waited)
	}
	await.Until(t, time.Minute, "the attached chat never showed every answer", func() bool {
		missing, _ := healdrill.Answers(shown.String(), prompts)
		return len(missing) == 0
	}, func() string {
		s := shown.String()
		missing, _ := healdrill.Answers(s, prompts)
		return fmt.Sprintf("missing %v:\n%s", missing, tailString(s, 4000))
	})
	select {
	case err := <-chatEnded:
		t.Errorf("ollie -H chat ended during the drill: %v\n%s", err, tailString(shown.String(), 2000))
		chatEnded <- err
	default:
	}
	slices.Sort(restart)
	t.Logf("figure: heal drill through the keeper: %d SIGKILLs, %d prompts answered, %d effects (%d twice), %d turns resumed by themselves, %d waited; kill to the keeper's new daemon answering through the tunnel p50 %v p99 %v",
		kills, prompts, len(lines), dups, resumed, waited, restart[len(restart)/2].Round(time.Millisecond), restart[len(restart)*99/100].Round(time.Millisecond))
}

// killDaemonRepeatedly kills the host user's daemon kills times, each
// once its run has recorded a message and then at a random moment of its
// work, and waits each time for the keeper to start it again. It returns
// how long each restart took, from the kill to a new daemon answering.
func killDaemonRepeatedly(t *testing.T, kills int, user string, sessionFile, daemonPID func() string, answered func() []int) []time.Duration {
	t.Helper()
	messages := func() int { return strings.Count(sessionFile(), `"kind":"agent.message"`) }
	var restart []time.Duration
	for k := 0; k < kills; k++ {
		recorded := messages()
		if !await.Poll(ctxFor(t, time.Minute), func() bool { return messages() != recorded }) {
			t.Fatalf("kill %d: nothing recorded within a minute (%d prompts unanswered)", k, len(answered()))
		}
		// The random moment is the point of the drill: a kill may land
		// anywhere in a turn.
		await.For(t.Context(), time.Duration(rand.IntN(400))*time.Millisecond)
		before := daemonPID()
		t0 := time.Now()
		exec.Command("pkill", "-KILL", "-u", user, "-f", "olliesrv serve$").Run()
		await.Until(t, time.Minute, fmt.Sprintf("kill %d: the keeper did not start the daemon again", k), func() bool {
			p := daemonPID()
			return p != "" && p != before
		})
		restart = append(restart, time.Since(t0))
	}
	return restart
}

// logEffectRecords logs what the session file recorded of effect n, with
// the resumes, the effects file and the host user's processes: what tells
// how a side effect came to happen twice.
func logEffectRecords(t *testing.T, n, sessionFile, effects, user string) {
	var recs []string
	for _, l := range strings.Split(sessionFile, "\n") {
		if strings.Contains(l, `\"n\":`+n+`}`) || strings.Contains(l, `"n":`+n+`}`) || strings.Contains(l, "prompt "+n+`"`) || strings.Contains(l, "agent.resume") {
			recs = append(recs, tailString(l, 400))
		}
	}
	t.Logf("the session file's records of effect %s and the resumes:\n%s", n, strings.Join(recs, "\n"))
	raw, _ := os.ReadFile(effects)
	ps, _ := exec.Command("ps", "-o", "pid,ppid,args", "-u", user).CombinedOutput()
	t.Logf("effects: %q\nthe host user's processes:\n%s", raw, ps)
}

// ctxFor is a context that ends after d or with the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
