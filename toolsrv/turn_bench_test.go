//go:build linux

package toolsrv

import (
	"context"
	"encoding/json"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/agent/fakellm"
)

// BenchmarkToolTurn is a model turn that calls a tool, end to end: an
// agent (the real loop and openai-go backend, against fakellm answering
// at once) asks the model, which calls "truth" (/bin/true), runs it
// through a session's toolsrv child (9P, the Runner, a pre-started
// sandbox helper), and asks the model again, which answers. In the same
// loop: the model's part alone (the backend's two requests, answered the
// same way), the same call through the child alone (Child.Call), and the
// tool's own run time (a bare fork/exec of /bin/true). Between
// iterations the pool refills, as between a session's calls.
//
// over-tool-ns is what the turn costs beyond the model and the tool's
// own run: turn − model − bare (goal: at most 2 ms); call-over-tool-ns
// the same for Child.Call alone. Medians (p50) beside the means: on a
// shared machine a few iterations wait for the CPU for milliseconds.
func BenchmarkToolTurn(b *testing.B) {
	c, _ := spawnChild(b, map[string][2]string{"truth": {`{"description": "True.", "cmd": "/bin/true"}`, ""}})
	s := fakellm.Start(b)
	be, err := backend.NewOpenAI(backend.Config{Name: "bench", Type: backend.TypeOpenAI, URL: s.URL + "/v1", Model: "fake-model"}, "sk-bench")
	if err != nil {
		b.Fatal(err)
	}
	const system = "You are a careful operator of Linux hosts. Answer briefly."
	a := agent.New(agent.Config{ID: agent.NewID(), Name: "bench", Backend: be, System: system, Tools: c})
	defer a.Close()
	ctx := context.Background()
	decls, err := c.Decls(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var tools []backend.Tool
	for _, d := range decls {
		tools = append(tools, backend.Tool{Name: d.Name, Description: d.Description, Parameters: d.Parameters})
	}
	msgs := []backend.Message{{Role: backend.RoleSystem, Content: system}, {Role: backend.RoleUser, Content: "Is it true?"}}
	turns := 0
	turn := func() {
		turns++
		s.Push(fakellm.ToolCall("truth", "{}"), fakellm.Text("ok"))
		if err := a.Submit(ctx, "Is it true?"); err != nil {
			b.Fatal(err)
		}
		a.WaitTurns(ctx, turns)
		if err := a.Clear(); err != nil {
			b.Fatal(err)
		}
	}
	model := func() {
		s.Push(fakellm.ToolCall("truth", "{}"), fakellm.Text("ok"))
		for range 2 {
			if _, err := be.Chat(ctx, msgs, tools, backend.Params{}, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	call := func() {
		res, err := c.Call(ctx, "truth", json.RawMessage(`{}`))
		if err != nil || res.Failed {
			b.Fatalf("call: %+v %v", res, err)
		}
	}
	bare := func() {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
	// Between a session's calls its pool refills: the helpers a call took
	// are started again before the next (calls come at the model's pace).
	settle := func() {
		_, _ = waitingHelpers(b, c.current().cmd.Process.Pid, helperPoolSize)
	}
	for range 5 { // warm the connections and the code paths
		settle()
		turn()
		model()
		settle()
		call()
		bare()
	}
	if st := a.Stats(); st.LastError != "" {
		b.Fatalf("the agent failed: %s", st.LastError)
	}
	var tTurn, tModel, tCall, tBare []time.Duration
	for b.Loop() {
		settle()
		t0 := time.Now()
		turn()
		t1 := time.Now()
		model()
		t2 := time.Now()
		bare()
		t3 := time.Now()
		settle()
		t4 := time.Now()
		call()
		t5 := time.Now()
		tTurn = append(tTurn, t1.Sub(t0))
		tModel = append(tModel, t2.Sub(t1))
		tBare = append(tBare, t3.Sub(t2))
		tCall = append(tCall, t5.Sub(t4))
	}
	if st := a.Stats(); st.LastError != "" || st.Turns != turns {
		b.Fatalf("the agent ran %d turns of %d, last error %q", st.Turns, turns, st.LastError)
	}
	b.ReportMetric(mean(tTurn), "turn-ns")
	b.ReportMetric(mean(tModel), "model-ns")
	b.ReportMetric(mean(tCall), "call-ns")
	b.ReportMetric(mean(tBare), "bare-ns")
	b.ReportMetric(mean(tTurn)-mean(tModel)-mean(tBare), "over-tool-ns")
	b.ReportMetric(median(tTurn)-median(tModel)-median(tBare), "over-tool-p50-ns")
	b.ReportMetric(mean(tCall)-mean(tBare), "call-over-tool-ns")
	b.ReportMetric(median(tCall)-median(tBare), "call-over-tool-p50-ns")
}
