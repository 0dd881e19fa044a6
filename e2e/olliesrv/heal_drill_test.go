package olliesrv

import (
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

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/healdrill"
	"ollie/internal/lab"
	"ollie/internal/nstest"
)

// TestHealDrill (issue 30): 25 SIGKILLs of olliesrv at random moments
// while an agent works through queued prompts, each a model request for a
// tool call, the tool (a side effect, not replay-safe), and a model
// request for the answer, with ollie chat attached. olliesrv is started
// again at once, as the keeper does for a held host. Every prompt
// acknowledged gets its answer without a person, no side effect happens
// twice, and the chat, riding every restart, shows every answer.
func TestHealDrill(t *testing.T) {
	lab.Need(t, lab.On(), "the heal drill: 25 SIGKILLs of olliesrv, about a minute")
	const kills, prompts = 25, 80
	d := startHealDrill(t, prompts)
	restart := d.killAtRandom(kills)
	d.waitAnswered()
	lines, dups, resumed, ended := d.checkAftermath()

	// The chat rode every restart and shows every answer.
	await.Until(t, 2*time.Minute, "the attached chat showing every answer", func() bool {
		missing, _ := healdrill.Answers(d.shown.String(), prompts)
		return len(missing) == 0
	}, func() string {
		missing, _ := healdrill.Answers(d.shown.String(), prompts)
		return fmt.Sprintf("no answers to %v in:\n%s", missing, d.shown.String())
	})
	if d.chat.ProcessState != nil {
		t.Errorf("ollie chat ended during the drill: %v", d.chat.ProcessState)
	}
	slices.Sort(restart)
	t.Logf("figure: heal drill: %d SIGKILLs, %d prompts answered, %d effects (%d duplicates), %d turns resumed by themselves, %d waited; restart to answering p50 %v p99 %v; the chat said it followed again %d times",
		kills, prompts, lines, dups, resumed, ended, restart[len(restart)/2].Round(time.Millisecond), restart[len(restart)*99/100].Round(time.Millisecond),
		strings.Count(d.shown.String(), "[olliesrv restarted; following the agent again]"))
}

// healDrill is one agent with its prompts queued, its tool's effects, the
// olliesrv of the moment and the ollie chat attached to the agent.
type healDrill struct {
	t                                *testing.T
	prompts                          int
	work, tools, state, dir, effects string
	env                              []string
	srv                              *exec.Cmd
	log                              *logBuffer
	chat                             *exec.Cmd
	shown                            *nstest.SyncBuffer
}

// startHealDrill starts olliesrv, makes the agent, attaches ollie chat,
// its input open and silent, and queues the prompts.
func startHealDrill(t *testing.T, prompts int) *healDrill {
	binaries(t)
	llm := fakellm.Start(t)
	d := &healDrill{t: t, prompts: prompts, work: t.TempDir(), tools: t.TempDir(), state: t.TempDir(), dir: nstest.ShortTempDir(t)}
	d.effects = filepath.Join(d.work, "effects")
	if err := healdrill.WriteTool(d.tools, d.effects); err != nil {
		t.Fatal(err)
	}
	// The model: a prompt "prompt N" asks for the tool with N, and once
	// the call has a result (run, or interrupted) answers "answer N done".
	llm.Respond(healdrill.Respond)
	data, _ := filepath.Abs("../../data")
	d.env = []string{"OLLIE_TOOLS_PATH=" + d.tools, "OLLIE_DATA=" + data, "XDG_STATE_HOME=" + d.state,
		"OPENAI_BASE_URL=" + llm.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"}
	d.srv, d.log = startBinary(t, d.dir, d.env...)
	d.ollie("name=drill cwd="+d.work, "rdwr", "session/new")
	d.ollie("name=a backend=openai", "rdwr", "session/drill/agent/new")

	_, ollieBin := binaries(t)
	d.chat = exec.Command(ollieBin, "chat", "session/drill/agent/a")
	d.chat.Env = append(os.Environ(), "NAMESPACE="+d.dir, "NO_COLOR=1")
	stdin, _ := d.chat.StdinPipe()
	d.shown = new(nstest.SyncBuffer)
	d.chat.Stdout, d.chat.Stderr = d.shown, d.shown
	if err := d.chat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); d.chat.Process.Kill(); d.chat.Wait() })

	for i := 1; i <= prompts; i++ {
		d.ollie("prompt "+strconv.Itoa(i), "write", "session/drill/agent/a/prompt")
	}
	return d
}

func (d *healDrill) ollie(stdin string, args ...string) string {
	d.t.Helper()
	out, code := runBinary(d.t, d.dir, stdin, args...)
	if code != 0 {
		d.t.Fatalf("ollie %v: exit %d: %s", args, code, out)
	}
	return out
}

// sessionFile is the session's file, or "" while there is none.
func (d *healDrill) sessionFile() string {
	files, _ := filepath.Glob(filepath.Join(d.state, "ollie", "sessions", "*.jsonl"))
	if len(files) != 1 {
		return ""
	}
	return files[0]
}

// messages counts the messages recorded in the session's file.
func (d *healDrill) messages() int {
	b, _ := os.ReadFile(d.sessionFile())
	return strings.Count(string(b), `"kind":"agent.message"`)
}

// killAtRandom kills olliesrv kills times, each at a random moment once
// the run got somewhere, and starts it again at once. It returns how long
// each start took to serve.
func (d *healDrill) killAtRandom(kills int) []time.Duration {
	var restart []time.Duration
	for k := 0; k < kills; k++ {
		// Each run of olliesrv gets somewhere before the next kill (a
		// message recorded), then is killed at a random moment of its
		// work: a daemon killed before every first step is a crash loop,
		// which waits for a person (host.MaxResumes).
		recorded := d.messages()
		await.Until(d.t, crashWait, fmt.Sprintf("kill %d: a message recorded", k),
			func() bool { return d.messages() != recorded }, d.log.String)
		// The random moment is the drill's point: where in its work the
		// daemon is cut.
		await.For(d.t.Context(), time.Duration(rand.IntN(400))*time.Millisecond)
		d.srv.Process.Kill()
		d.srv.Wait()
		t0 := time.Now()
		d.srv, d.log = startBinary(d.t, d.dir, d.env...)
		restart = append(restart, time.Since(t0))
	}
	return restart
}

// waitAnswered waits for every prompt's answer in the agent's history;
// if one never comes, the session file is kept for a look.
func (d *healDrill) waitAnswered() {
	answered := func() []int {
		missing, _ := healdrill.Answers(d.ollie("", "read", "session/drill/agent/a/log"), d.prompts)
		return missing
	}
	kept := filepath.Join(os.TempDir(), "heal-drill-failed.jsonl")
	await.Until(d.t, 5*time.Minute, "an answer to every prompt after the drill", func() bool { return len(answered()) == 0 }, func() string {
		b, _ := os.ReadFile(d.sessionFile())
		os.WriteFile(kept, b, 0600)
		return fmt.Sprintf("prompts without an answer: %v (session file copied to %s)\n%s", answered(), kept, d.log.String())
	})
}

// checkAftermath checks that every prompt has one answer, that no effect
// happened twice and that no turn waited for a person; it returns the
// effects, the duplicates and the turns resumed and ended, for the figure.
func (d *healDrill) checkAftermath() (effects, dups, resumed, ended int) {
	t := d.t
	hist := d.ollie("", "read", "session/drill/agent/a/log")
	_, times := healdrill.Answers(hist, d.prompts)
	for i := 1; i <= d.prompts; i++ {
		if times[i] != 1 {
			t.Errorf("prompt %d has %d answers in the history, want 1", i, times[i])
		}
	}
	lines, twice := healdrill.Effects(d.effects)
	for _, n := range twice {
		t.Errorf("effect %s happened twice", n)
	}
	if file := d.sessionFile(); file != "" {
		f, _ := os.ReadFile(file)
		resumed = strings.Count(string(f), `"kind":"agent.resume"`)
		ended = strings.Count(string(f), `"error":"interrupted: olliesrv stopped`)
	}
	if ended > 0 {
		t.Errorf("%d turns waited for a person, want every cut turn to go on by itself", ended)
	}
	return len(lines), len(twice), resumed, ended
}
