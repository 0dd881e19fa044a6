package olliesrv

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/lab"
	"ollie/internal/nstest"
)

// BenchmarkIdleSessions is what an idle session costs a host (issue 33's
// goal: at most 2 MB and no process of its own): the real olliesrv with
// the starter tools, one session, then n, each made and left idle; the
// daemon's whole process tree (the daemon, each session's tool server,
// their sandbox helpers and stages) counted once it has settled, by
// processes and by proportional set size (a page shared by k processes
// counted 1/k, so the binary's text is not counted once per process).
// Per idle session is (tree at n − tree at 1) / (n − 1).
func BenchmarkIdleSessions(b *testing.B) {
	const n = 11
	data, _ := filepath.Abs("../../data")
	for b.Loop() {
		dir := nstest.ShortTempDir(b)
		// Helpers go after 2 s without a call here (a minute by default),
		// and the tool servers after 2 s too (five minutes), so that the
		// settled tree is the idle one.
		srv, log := startBinary(b, dir, "OLLIE_DATA="+data, "OLLIE_HELPERS_IDLE=2s", "OLLIE_TOOLSRV_IDLE=2s")
		work := b.TempDir()
		tree := func(sessions int) (procs int, pss int64) {
			// Settled: the same processes for three seconds, past the
			// helpers' and the tool servers' idle time.
			var last []int
			changed := time.Now()
			await.Until(b, 30*time.Second, fmt.Sprintf("the tree of %d sessions settling", sessions), func() bool {
				now := descendants(srv.Process.Pid)
				if !slices.Equal(now, last) {
					last, changed = now, time.Now()
				}
				return time.Since(changed) > 3*time.Second
			}, func() string {
				return fmt.Sprintf("processes %v, last change %s ago\n%s", last, time.Since(changed), log.String())
			})
			all := append([]int{srv.Process.Pid}, last...)
			return len(all), lab.PSS(all)
		}
		// A session's tool server starts with its first use (here, its
		// list of tools) and stays: an idle session is one used before.
		newSession := func(i int) {
			if out, code := runBinary(b, dir, fmt.Sprintf("name=idle%d cwd=%s", i, work), "rdwr", "session/new"); code != 0 {
				b.Fatalf("session/new: %d %q", code, out)
			}
			if out, code := runBinary(b, dir, "", "read", fmt.Sprintf("session/idle%d/tools", i)); code != 0 || out == "" {
				b.Fatalf("session tools: %d %q", code, out)
			}
		}
		newSession(0)
		p1, m1 := tree(1)
		for i := 1; i < n; i++ {
			newSession(i)
		}
		pn, mn := tree(n)
		perProcs := float64(pn-p1) / (n - 1)
		perMB := float64(mn-m1) / (n - 1) / 1e6
		b.ReportMetric(perProcs, "procs/idle-session")
		b.ReportMetric(perMB, "PSS-MB/idle-session")
		b.ReportMetric(float64(m1)/1e6, "PSS-MB-1-session")
		b.Logf("one session: %d processes, %.1f MB PSS; %d sessions: %d processes, %.1f MB; per idle session %.1f processes (goal 0), %.1f MB (goal ≤ 2 MB)",
			p1, float64(m1)/1e6, n, pn, float64(mn)/1e6, perProcs, perMB)
		srv.Process.Kill()
		srv.Wait()
	}
}

// descendants are pid's descendants, sorted.
func descendants(pid int) []int {
	out := slices.Collect(maps.Keys(lab.Descendants(pid)))
	slices.Sort(out)
	return out
}
