package main

import (
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
	binaries(t)
	llm := fakellm.Start(t)
	work, tools, state, dir := t.TempDir(), t.TempDir(), t.TempDir(), nstest.ShortTempDir(t)
	effects := filepath.Join(work, "effects")
	if err := healdrill.WriteTool(tools, effects); err != nil {
		t.Fatal(err)
	}
	// The model: a prompt "prompt N" asks for the tool with N, and once
	// the call has a result (run, or interrupted) answers "answer N done".
	llm.Respond(healdrill.Respond)
	data, _ := filepath.Abs("../../data")
	env := []string{"OLLIE_TOOLS_PATH=" + tools, "OLLIE_DATA=" + data, "XDG_STATE_HOME=" + state,
		"OPENAI_BASE_URL=" + llm.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"}
	srv, log := startBinary(t, dir, env...)
	ollie := func(stdin string, args ...string) string {
		t.Helper()
		out, code := runBinary(t, dir, stdin, args...)
		if code != 0 {
			t.Fatalf("ollie %v: exit %d: %s", args, code, out)
		}
		return out
	}
	ollie("name=drill cwd="+work, "rdwr", "session/new")
	ollie("name=a backend=openai", "rdwr", "session/drill/agent/new")

	// ollie chat attached from the start, its input open and silent.
	_, ollieBin := binaries(t)
	chat := exec.Command(ollieBin, "chat", "session/drill/agent/a")
	chat.Env = append(os.Environ(), "NAMESPACE="+dir, "NO_COLOR=1")
	stdin, _ := chat.StdinPipe()
	var shown nstest.SyncBuffer
	chat.Stdout, chat.Stderr = &shown, &shown
	if err := chat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); chat.Process.Kill(); chat.Wait() })

	for i := 1; i <= prompts; i++ {
		ollie("prompt "+strconv.Itoa(i), "write", "session/drill/agent/a/prompt")
	}
	// messages counts the messages recorded in the session's file.
	messages := func() int {
		files, _ := filepath.Glob(filepath.Join(state, "ollie", "sessions", "*.jsonl"))
		if len(files) != 1 {
			return 0
		}
		b, _ := os.ReadFile(files[0])
		return strings.Count(string(b), `"kind":"agent.message"`)
	}
	var restart []time.Duration
	for k := 0; k < kills; k++ {
		// Each run of olliesrv gets somewhere before the next kill (a
		// message recorded), then is killed at a random moment of its
		// work: a daemon killed before every first step is a crash loop,
		// which waits for a person (host.MaxResumes).
		recorded := messages()
		for deadline := time.Now().Add(crashWait); messages() == recorded; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: nothing recorded within %v\n%s", k, crashWait, log.String())
			}
		}
		time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
		srv.Process.Kill()
		srv.Wait()
		t0 := time.Now()
		srv, log = startBinary(t, dir, env...)
		restart = append(restart, time.Since(t0))
	}

	answered := func() []int {
		missing, _ := healdrill.Answers(ollie("", "read", "session/drill/agent/a/log"), prompts)
		return missing
	}
	for deadline := time.Now().Add(5 * time.Minute); len(answered()) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			files, _ := filepath.Glob(filepath.Join(state, "ollie", "sessions", "*.jsonl"))
			for _, f := range files {
				b, _ := os.ReadFile(f)
				os.WriteFile(filepath.Join(os.TempDir(), "heal-drill-failed.jsonl"), b, 0600)
			}
			t.Fatalf("prompts without an answer after the drill: %v (session file copied to %s)\n%s", answered(), filepath.Join(os.TempDir(), "heal-drill-failed.jsonl"), log.String())
		}
	}
	hist := ollie("", "read", "session/drill/agent/a/log")
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
	files, _ := filepath.Glob(filepath.Join(state, "ollie", "sessions", "*.jsonl"))
	var resumed, ended int
	if len(files) == 1 {
		f, _ := os.ReadFile(files[0])
		resumed = strings.Count(string(f), `"kind":"agent.resume"`)
		ended = strings.Count(string(f), `"error":"interrupted: olliesrv stopped`)
	}
	if ended > 0 {
		t.Errorf("%d turns waited for a person, want every cut turn to go on by itself", ended)
	}
	// The chat rode every restart and shows every answer.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		s := shown.String()
		missing, _ := healdrill.Answers(s, prompts)
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attached chat never showed the answers to %v:\n%s", missing, s)
		}
	}
	if chat.ProcessState != nil {
		t.Errorf("ollie chat ended during the drill: %v", chat.ProcessState)
	}
	slices.Sort(restart)
	t.Logf("figure: heal drill: %d SIGKILLs, %d prompts answered, %d effects (%d duplicates), %d turns resumed by themselves, %d waited; restart to answering p50 %v p99 %v; the chat said it followed again %d times",
		kills, prompts, len(lines), dups, resumed, ended, restart[len(restart)/2].Round(time.Millisecond), restart[len(restart)*99/100].Round(time.Millisecond),
		strings.Count(shown.String(), "[olliesrv restarted; following the agent again]"))
}
