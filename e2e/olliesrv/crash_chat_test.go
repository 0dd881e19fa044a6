package olliesrv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/agent/fakellm"
)

// chatNow is the agent's chat stream as it stands once the agent is idle:
// a turn writes all of its chat before the state goes idle, and a restart
// rebuilds the chat before the agent is served, so nothing more is coming.
func (r *crashRig) chatNow(want string) string {
	r.t.Helper()
	r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
	return r.chatSays(want)
}

// TestCrashKeepsChat: the chat stream of a restarted agent is the one it
// had, rebuilt from the session file, and a turn that ended in a model
// error is still that error, not a turn the crash interrupted.
func TestCrashKeepsChat(t *testing.T) {
	binaries(t)

	t.Run("chat rebuilt", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		r.llm.Push(fakellm.ToolCall("mark", `{}`), fakellm.Text("the marker ", "is set"))
		r.prompt("set the marker")
		r.waitFor("the turn to end", func() bool { return strings.Contains(r.read("session/crash/agent/a/log"), "is set") })
		r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
		before := r.chatNow("is set")
		for _, want := range []string{"set the marker\n", "→ mark {}", "← mark: real result of run 1", "the marker is set\n"} {
			if !strings.Contains(before, want) {
				t.Fatalf("the chat before the crash lacks %q:\n%s", want, before)
			}
		}
		r.kill()

		r.start()
		r.checkRestored()
		if after := r.chatNow("is set"); after != before {
			t.Errorf("the chat after the restart:\n%q\nwant the chat before it:\n%q", after, before)
		}
		if raw := r.read("session/crash/agent/a/stats"); strings.Contains(raw, "last_error") {
			t.Errorf("a turn that ended well has an error after the restart: %s", raw)
		}
		r.goesOn()
		r.checkRuns(1)
	})

	t.Run("model error kept", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		r.llm.Push(fakellm.Error(400, "this model does not exist"))
		r.prompt("first prompt")
		r.waitFor("the model error", func() bool {
			return strings.Contains(r.read("session/crash/agent/a/stats"), "this model does not exist")
		})
		r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
		before := r.chatNow("this model does not exist")
		if !strings.Contains(before, "[model error:") {
			t.Fatalf("the chat does not show the model error:\n%s", before)
		}
		r.kill()

		r.start()
		r.checkRestored()
		after := r.chatNow("this model does not exist")
		if after != before {
			t.Errorf("the chat after the restart:\n%q\nwant the chat before it:\n%q", after, before)
		}
		if strings.Contains(after, "[interrupted") {
			t.Errorf("a turn that ended in a model error is reported as interrupted:\n%s", after)
		}
		if stats := r.read("session/crash/agent/a/stats"); !strings.Contains(stats, "model error") || !strings.Contains(stats, "this model does not exist") {
			t.Errorf("stats after the restart lost the model error: %s", stats)
		}
		r.goesOn()
	})
}

// TestCrashTurnHistory: a restart marks as interrupted only a turn that was
// running when olliesrv stopped, and only once: a turn a safety limit
// stopped keeps its reason, an idle agent is not logged as having had a
// turn running, and a turn interrupted once is not interrupted again by
// the next restart.
func TestCrashTurnHistory(t *testing.T) {
	binaries(t)

	t.Run("safety limit kept", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		// The same call three times in a row stops the turn.
		r.llm.Push(fakellm.ToolCall("mark", `{}`), fakellm.ToolCall("mark", `{}`), fakellm.ToolCall("mark", `{}`))
		r.prompt("loop")
		r.waitFor("the safety limit", func() bool {
			return strings.Contains(r.read("session/crash/agent/a/stats"), "stopped: the model made the same tool call")
		})
		r.waitFor("the agent to be idle", func() bool { return r.read("session/crash/agent/a/state") == "idle\n" })
		before := r.chatNow("stopped: the model made the same tool call")
		r.kill()

		for run := 2; run <= 3; run++ {
			r.start()
			r.checkRestored()
			after := r.chatNow("stopped: the model made the same tool call")
			if after != before {
				t.Errorf("run %d: the chat after the restart:\n%q\nwant the chat before it:\n%q", run, after, before)
			}
			if stats := r.read("session/crash/agent/a/stats"); !strings.Contains(stats, "stopped: the model made the same tool call") {
				t.Errorf("run %d: stats lost the safety limit: %s", run, stats)
			}
			r.kill()
			if log := r.logs[run-1].String(); strings.Contains(log, "turn was running") {
				t.Errorf("run %d: an idle agent is logged as having had a turn running:\n%s", run, log)
			}
		}
		r.start()
		r.checkRestored()
		r.goesOn()
	})

	t.Run("interrupted once", func(t *testing.T) {
		t.Parallel()
		r := newCrashRig(t, false)
		r.start()
		r.create("default")
		os.WriteFile(filepath.Join(r.work, "hang-1"), nil, 0644)
		r.llm.Push(fakellm.ToolCall("mark", `{}`))
		r.prompt("hang")
		r.waitFor("the tool to start", func() bool { return r.runs() == 1 })
		r.kill()

		r.start()
		r.checkRestored()
		first := r.chatNow("[interrupted: olliesrv stopped during this turn")
		if n := strings.Count(first, "[interrupted: olliesrv stopped"); n != 1 {
			t.Errorf("after the first restart the chat says interrupted %d times:\n%s", n, first)
		}
		r.kill()
		if log := r.logs[1].String(); !strings.Contains(log, "turn was running") {
			t.Errorf("the interrupted turn is not in the log:\n%s", log)
		}

		r.start()
		r.checkRestored()
		if again := r.chatNow("[interrupted: olliesrv stopped during this turn"); again != first {
			t.Errorf("a second restart changed the chat:\n%q\nwant:\n%q", again, first)
		}
		if stats := r.read("session/crash/agent/a/stats"); !strings.Contains(stats, "interrupted: olliesrv stopped") {
			t.Errorf("stats do not say the turn was interrupted: %s", stats)
		}
		r.kill()
		if log := r.logs[2].String(); strings.Contains(log, "turn was running") {
			t.Errorf("the second restart logs the agent as having had a turn running:\n%s", log)
		}
		r.start()
		r.checkRestored()
		r.goesOn()
		r.checkRuns(1)
	})
}
