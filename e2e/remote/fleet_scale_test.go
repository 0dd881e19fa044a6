package remote

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFleetScale: one goal on 50 hosts inside the test process
// (internal/demohost: no root, no sshd), each running its own olliesrv
// daemon. 45 hosts are on this version already, 5 have nothing: the run
// deploys to those and only probes the others. Every host finishes, with
// its own answer (its agent ran pwd in the shell tool, in its own home),
// in two steps and one tool call, on the version deployed; and each host
// has a daemon of its own.
func TestFleetScale(t *testing.T) {
	const n, fresh = 50, 5
	d := startDemoFleet(t, n)
	d.model(100*time.Millisecond, true)
	d.seed(n - fresh)
	t0 := time.Now()
	out, err := d.run("fleet", "run", "-json", "-j", "50", strings.Join(d.names, ","), "check where you are")
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("fleet run on %d hosts: %v\n%s", n, err, tailString(out, 6000))
	}
	res := jsonResults(t, out)
	if len(res) != n {
		t.Fatalf("%d JSON results, want %d:\n%s", len(res), n, tailString(out, 6000))
	}
	version := res[d.names[0]].Version
	for _, h := range d.fleet.Hosts {
		j := res[h.Name]
		if j.Result != "done" || j.Answer != "checked in "+h.Home+"\nall is well" || j.Steps != 2 || j.ToolCalls != 1 || j.Tokens == 0 || j.Version == "" || j.Version != version {
			t.Errorf("%s: %+v; want done, answering checked in %s, in 2 steps with 1 tool call, tokens counted, version %s", h.Name, j, h.Home, version)
		}
		if _, err := os.Stat(h.Home + "/.local/share/ollie/" + version + "/olliesrv"); err != nil {
			t.Errorf("%s: olliesrv %s is not deployed: %v", h.Name, version, err)
		}
	}
	if pids := d.daemonPids(); len(pids) != n {
		t.Errorf("%d olliesrv daemons serve the %d hosts, want one each", len(pids), n)
	}
	t.Logf("fleet run on %d hosts (%d deployed to): %.1fs", n, fresh, took.Seconds())
}
