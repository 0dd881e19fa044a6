package main

import "testing"

// TestJobs: deploy works on every host named at once unless -j says
// otherwise; a ninth host waiting for one of eight to finish doubled a
// cold deploy's time.
func TestJobs(t *testing.T) {
	for _, c := range []struct {
		cmd   string
		given bool
		j, n  int
		want  int
	}{
		{"deploy", false, 8, 9, 9},
		{"deploy", false, 8, 3, 8},
		{"deploy", false, 8, 500, maxDeployJobs},
		{"deploy", true, 2, 9, 2},
		{"up", false, 8, 9, 8},
		{"status", false, 8, 100, 8},
	} {
		if got := jobs(c.cmd, c.given, c.j, c.n); got != c.want {
			t.Errorf("jobs(%q, given %v, -j %d, %d hosts) = %d, want %d", c.cmd, c.given, c.j, c.n, got, c.want)
		}
	}
}
