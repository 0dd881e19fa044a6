package olliesrv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// BenchmarkTurnToolLeg is a tool call end to end with the model's turns
// left out (issue 33's goal: at most 2 ms over the tool's own run time):
// the real olliesrv, an agent with the real model client, and the scripted
// model server, which asks for a sandboxed tool whose cmd is /bin/true
// and times from handing over that request to the arrival of the request
// that carries its result. That leg holds everything ollie does for the
// call: the reply parsed, the loop, the call over 9P to the session's
// tool server, validation, the profile, the sandbox, the result back and
// the next request built. Beside it, in the same loop, a bare fork/exec
// of /bin/true (the tool's own run time). Before each turn the session's
// pool of sandbox helpers is full again, as it is between a model's
// turns.
func BenchmarkTurnToolLeg(b *testing.B) {
	llm := fakellm.Start(b)
	tools := b.TempDir()
	os.WriteFile(filepath.Join(tools, "truth.meta"), []byte(`{"description": "True.", "cmd": "/bin/true"}`), 0644)
	data, _ := filepath.Abs("../../data")
	dir := nstest.ShortTempDir(b)
	srv, log := startBinary(b, dir, "OLLIE_TOOLS_PATH="+tools, "OLLIE_DATA="+data,
		"OPENAI_BASE_URL="+llm.URL+"/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model")

	var mu sync.Mutex
	var asked time.Time
	legs := make(chan time.Duration, 1)
	llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		now := time.Now()
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			mu.Lock()
			legs <- now.Sub(asked)
			mu.Unlock()
			return fakellm.Text("done")
		}
		mu.Lock()
		defer mu.Unlock()
		asked = time.Now()
		return fakellm.ToolCall("truth", `{}`)
	})
	work := b.TempDir()
	for _, step := range [][]string{
		{"name=leg cwd=" + work, "rdwr", "session/new"},
		{"name=a backend=openai", "rdwr", "session/leg/agent/new"},
	} {
		if out, code := runBinary(b, dir, step[0], step[1:]...); code != 0 {
			b.Fatalf("%v: %d %q\n%s", step, code, out, log.String())
		}
	}
	turn := func() time.Duration {
		if out, code := runBinary(b, dir, "go", "write", "session/leg/agent/a/prompt"); code != 0 {
			b.Fatalf("prompt: %d %q\n%s", code, out, log.String())
		}
		select {
		case leg := <-legs:
			return leg
		case <-time.After(30 * time.Second):
			b.Fatalf("no tool result reached the model\n%s", log.String())
			return 0
		}
	}
	poolFull := func() {
		await.Until(b, 20*time.Second, "the session's sandbox helpers waiting", func() bool {
			return len(warmHelpers(srv.Process.Pid)) >= 2
		})
	}
	turn() // the session's tool server starts
	var legSum, bareSum time.Duration
	var ratios []float64
	for b.Loop() {
		poolFull()
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		bare := time.Since(t0)
		leg := turn()
		legSum, bareSum = legSum+leg, bareSum+bare
		ratios = append(ratios, float64(leg)/float64(bare))
	}
	n := float64(b.N)
	slices.Sort(ratios)
	b.ReportMetric(float64(legSum)/n, "leg-ns/op")
	b.ReportMetric(float64(bareSum)/n, "bare-ns/op")
	b.ReportMetric(float64(legSum-bareSum)/n/1e6, "ms-over-bare")
	b.ReportMetric(float64(legSum)/float64(bareSum), "leg/bare")
	b.ReportMetric(ratios[len(ratios)/2], "leg/bare-p50")
}

// warmHelpers are pid's descendants that are sandbox helpers waiting
// for (or running) a call: "olliesrv __ollie_sandbox warm".
func warmHelpers(pid int) []int {
	var out []int
	for _, p := range descendants(pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[1] == "__ollie_sandbox" && args[2] == "warm" {
			out = append(out, p)
		}
	}
	return out
}
