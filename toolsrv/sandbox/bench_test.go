//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"ollie/internal/await"
)

// Dispatch overhead: /bin/true under the default profile (re-exec of this
// binary as the helper, Landlock, exec) against a bare fork/exec of it.
// The figures and the command are in README.md.

func benchPolicy(b *testing.B) *Policy {
	b.Helper()
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		b.Fatal(err)
	}
	pol, err := p.Resolve(Vars{CWD: b.TempDir(), TmpDir: b.TempDir(), ToolsPath: []string{}})
	if err != nil {
		b.Fatal(err)
	}
	if err := pol.Check(); err != nil {
		b.Fatal(err)
	}
	return pol
}

// runSandboxed and runBare return the CPU time (user and system) the child
// used: helper and tool are one process, so it covers both.
func runSandboxed(b *testing.B, pol *Policy) time.Duration {
	cmd, err := Command(context.Background(), pol, "/bin/true", nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	cmd.ExtraFiles[0].Close()
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func runBare(b *testing.B) time.Duration {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func BenchmarkSandboxedExec(b *testing.B) {
	pol := benchPolicy(b)
	for b.Loop() {
		runSandboxed(b, pol)
	}
}

func BenchmarkBareExec(b *testing.B) {
	for b.Loop() {
		runBare(b)
	}
}

// BenchmarkSandboxVsBare alternates the two in one loop, so both see the
// same machine load, and reports each and their ratio (goal: ≤ 1.5), in
// wall-clock time and in the children's CPU time, which load on a shared
// machine distorts less.
func BenchmarkSandboxVsBare(b *testing.B) {
	pol := benchPolicy(b)
	var sandboxed, bare, sandboxedCPU, bareCPU time.Duration
	for b.Loop() {
		t0 := time.Now()
		bareCPU += runBare(b)
		t1 := time.Now()
		sandboxedCPU += runSandboxed(b, pol)
		sandboxed += time.Since(t1)
		bare += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(bare.Nanoseconds())/n, "bare-ns/op")
	b.ReportMetric(float64(sandboxed.Nanoseconds())/n, "sandboxed-ns/op")
	b.ReportMetric(float64(sandboxed)/float64(bare), "sandboxed/bare")
	if bareCPU > 0 {
		b.ReportMetric(float64(sandboxedCPU)/float64(bareCPU), "sandboxed/bare-cpu")
	}
}

// runPooledTrue runs /bin/true through a pre-started helper of p.
func runPooledTrue(b *testing.B, p *Pool, pol *Policy) {
	c, err := p.Command(context.Background(), pol, "/bin/true", nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		b.Fatal(err)
	}
}

// waitFull waits, untimed, until every helper of p waits for a call: a
// call's latency is measured as a session sees it, the pool refilled
// since the last call (calls come seconds apart, at the model's pace).
func waitFull(b *testing.B, p *Pool, size int) {
	await.Until(b, 10*time.Second, fmt.Sprintf("the pool holding %d helpers", size), func() bool { return p.Idle() >= size },
		func() string { return fmt.Sprintf("%d idle", p.Idle()) })
}

// BenchmarkPoolVsBare alternates, in one loop, a bare fork/exec of
// /bin/true, the same under the default profile through a pre-started
// helper (Pool), and through a helper started for the call (Command, the
// cold path), and reports each and the ratios to bare (goal for the pool:
// ≤ 1.5). The pool is refilled before each pooled call, outside the
// timings.
func BenchmarkPoolVsBare(b *testing.B) {
	pol := benchPolicy(b)
	const size = 2
	p := NewPool(size)
	defer p.Close()
	var bare, pooled, cold []time.Duration
	for b.Loop() {
		waitFull(b, p, size)
		t0 := time.Now()
		runBare(b)
		t1 := time.Now()
		runPooledTrue(b, p, pol)
		t2 := time.Now()
		waitFull(b, p, size) // the cold call alone, with no refill beside it
		t3 := time.Now()
		runSandboxed(b, pol)
		t4 := time.Now()
		bare = append(bare, t1.Sub(t0))
		pooled = append(pooled, t2.Sub(t1))
		cold = append(cold, t4.Sub(t3))
	}
	// Means, and medians: on a shared machine a few calls wait for the
	// CPU for many milliseconds, and the median shows the typical call.
	mean := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(sum) / float64(len(d))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	b.ReportMetric(mean(bare), "bare-ns/op")
	b.ReportMetric(mean(pooled), "pooled-ns/op")
	b.ReportMetric(mean(cold), "cold-ns/op")
	b.ReportMetric(mean(pooled)/mean(bare), "pooled/bare")
	b.ReportMetric(median(pooled)/median(bare), "pooled/bare-p50")
	b.ReportMetric(mean(cold)/mean(bare), "cold/bare")
	b.ReportMetric(median(bare), "bare-p50-ns")
	b.ReportMetric(median(pooled), "pooled-p50-ns")
}

// BenchmarkProtectedHome alternates, through the pool, /bin/true in a
// project directory (nothing to protect) and in a home directory that
// holds the protected set and 50 other entries (a mount per entry, the
// protected paths read-only: see protect.go), and reports each and the
// ratio: what a session made in $HOME pays per call.
func BenchmarkProtectedHome(b *testing.B) {
	home := b.TempDir()
	for _, d := range []string{".config/ollie/sandbox", ".ssh", "proj", ".local/bin"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(home, fmt.Sprintf("file%02d", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(home, ".bashrc"), nil, 0o644)
	p, err := Profiles{Dirs: []string{"../../data/sandbox"}}.Load("default")
	if err != nil {
		b.Fatal(err)
	}
	policy := func(cwd string) *Policy {
		v := Vars{CWD: cwd, Home: home, TmpDir: b.TempDir(), ToolsPath: []string{},
			Getenv: func(string) (string, bool) { return "", false }}
		pol, err := p.Resolve(v)
		if err != nil {
			b.Fatal(err)
		}
		pol.Protect = ProtectedPaths(v)
		return pol
	}
	proj, inHome := policy(filepath.Join(home, "proj")), policy(home)
	if ops, err := plan(inHome.writable(), inHome.Protect); err != nil || len(ops) == 0 {
		b.Fatalf("the home directory's plan: %v %v", ops, err)
	}
	const size = 2
	pool := NewPool(size)
	defer pool.Close()
	var plain, home2 []time.Duration
	// Calls come seconds apart, at the model's pace: the pause after the
	// pool is full stands for that think time, shortened, in which the
	// helpers started for the last call settle (their stages start and
	// warm up), which Idle alone does not say.
	settle := func() {
		waitFull(b, pool, size)
		await.For(context.Background(), 100*time.Millisecond)
	}
	for b.Loop() {
		settle()
		t0 := time.Now()
		runPooledTrue(b, pool, proj)
		t1 := time.Now()
		settle()
		t2 := time.Now()
		runPooledTrue(b, pool, inHome)
		t3 := time.Now()
		plain = append(plain, t1.Sub(t0))
		home2 = append(home2, t3.Sub(t2))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2])
	}
	b.ReportMetric(median(plain), "project-p50-ns")
	b.ReportMetric(median(home2), "home-p50-ns")
	b.ReportMetric(median(home2)/median(plain), "home/project-p50")
}
