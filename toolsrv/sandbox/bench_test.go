//go:build linux

package sandbox

import (
	"context"
	"os/exec"
	"testing"
	"time"
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
