//go:build linux

package toolsrv

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
)

// BenchmarkDispatchVsBare is the sandboxed dispatch as a session's
// toolsrv runs it (Runner.Run: validation, the profile, a scratch
// directory, output capture, Landlock) of a tool that is /bin/true,
// through the pool of pre-started helpers and through a helper started
// for the call, beside a bare fork/exec of /bin/true, alternating in one
// loop. The pool is refilled, untimed, before each pooled call, as it is
// between a session's calls. It reports means and medians and their
// ratios to bare; toolsrv/sandbox's BenchmarkPoolVsBare is the same below
// the Runner.
func BenchmarkDispatchVsBare(b *testing.B) {
	tools := map[string][2]string{"truth": {`{"description": "True.", "cmd": "/bin/true"}`, ""}}
	pooled, _ := runner(b, tools)
	cold := &Runner{Tools: pooled.Tools, Cwd: pooled.Cwd, Profiles: pooled.Profiles, ToolsPath: pooled.ToolsPath, SpillDir: pooled.SpillDir}
	const size = 2
	ctx := context.Background()
	args := json.RawMessage(`{}`)
	call := func(r *Runner) {
		if res := r.Run(ctx, "truth", args); res.Failed {
			b.Fatalf("call failed: %s", res.Output)
		}
	}
	// Between a session's calls (seconds, at the model's pace) its pool
	// refills, the last call's scratch directory goes and the next one's
	// is made, and the profile is resolved again for the next call.
	full := func() {
		await.Until(b, 10*time.Second, "the pool refilling", func() bool { return pooled.Helpers.Idle() >= size })
		for _, r := range []*Runner{pooled, cold} {
			r.scratchWork.Wait()
			r.refreshes.Wait()
		}
	}
	var bare, pool, start []time.Duration
	for b.Loop() {
		full()
		t0 := time.Now()
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		call(pooled)
		t2 := time.Now()
		full()
		t3 := time.Now()
		call(cold)
		t4 := time.Now()
		bare = append(bare, t1.Sub(t0))
		pool = append(pool, t2.Sub(t1))
		start = append(start, t4.Sub(t3))
	}
	b.ReportMetric(mean(bare), "bare-ns/op")
	b.ReportMetric(mean(pool), "pooled-ns/op")
	b.ReportMetric(mean(start), "cold-ns/op")
	b.ReportMetric(mean(pool)/mean(bare), "pooled/bare")
	b.ReportMetric(median(pool)/median(bare), "pooled/bare-p50")
	b.ReportMetric(mean(start)/mean(bare), "cold/bare")
}

// BenchmarkChildOp is one small operation on a session's toolsrv (read
// its tools file: walk, open, read, clunk), as Child does it, on a
// connection kept from the previous operation, beside the same with a
// connection dialled and attached for it (how Child worked before it kept
// connections), alternating in one loop.
func BenchmarkChildOp(b *testing.B) {
	c, _ := spawnChild(b, map[string][2]string{"echo": {echoMeta, "#!/bin/sh\ncat\n"}})
	ctx := context.Background()
	var kept, dialled time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.ReadFile(ctx, "tools"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		cc, err := c.dial(ctx, c.current())
		if err != nil {
			b.Fatal(err)
		}
		f, err := cc.fsys.Open("tools", plan9.OREAD)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadAll(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
		cc.conn.Close()
		t2 := time.Now()
		kept += t1.Sub(t0)
		dialled += t2.Sub(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(kept.Nanoseconds())/n, "kept-ns/op")
	b.ReportMetric(float64(dialled.Nanoseconds())/n, "dialled-ns/op")
	b.ReportMetric(float64(dialled)/float64(kept), "dialled/kept")
}

// mean and median of durations, in nanoseconds, for the benchmarks'
// figures.
func mean(d []time.Duration) float64 {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return float64(sum) / float64(len(d))
}

func median(d []time.Duration) float64 {
	d = slices.Clone(d)
	slices.Sort(d)
	return float64(d[len(d)/2])
}
