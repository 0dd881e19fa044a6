package sandbox

import (
	"strings"
	"testing"

	"ollie/internal/lab"
)

// Issue #28 item 5: limits.memory bounds the whole call, not each of its
// processes: three processes of 300 MiB each, under a limit of 512 MiB,
// do not all live; one process of 300 MiB does. Through a helper started
// for the call and through the pool. The limit leaves room for the call's
// init (the stage, in a pid namespace of its own), which forks the tool
// under it: a race-built one maps 450 MiB of data (7 MiB resident).
func TestMemoryPerCall(t *testing.T) {
	requireLandlock(t, 3)
	_, err := memoryCgroupParent()
	lab.Need(t, err == nil, "a writable memory cgroup (root, or a delegated cgroup v2): "+errString(err))
	e := newEnv(t)
	pol := e.policyWith(t, func(p *Profile) { p.Limits = Limits{Memory: 512 << 20} })
	const hold = `/usr/bin/python3 -c 'import time; b = b"x" * (300 << 20); time.sleep(1.5); print("held")'`
	three := hold + " & " + hold + " & " + hold + " & wait"
	for _, via := range []string{"command", "pool"} {
		runIn := func(script string) result {
			if via == "pool" {
				return runPoolOnce(t, pol, e.cwd, script)
			}
			return sh(t, pol, e.cwd, script)
		}
		if r := runIn(hold); strings.Count(r.stdout, "held") != 1 {
			t.Errorf("%s: one process of 300 MiB: stdout %q, stderr %q", via, r.stdout, r.stderr)
		}
		if r := runIn(three); strings.Count(r.stdout, "held") == 3 {
			t.Errorf("%s: three processes of 300 MiB each all lived under a call limit of 512 MiB (stderr %q)", via, r.stderr)
		}
	}
	applied, _ := limitsEnforcement(Limits{Memory: 512 << 20})
	if all := strings.Join(applied, "\n"); !strings.Contains(all, "memory: 512MiB per call") {
		t.Errorf("enforcement %q does not say the memory limit is per call", all)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
