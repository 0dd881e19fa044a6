package remote

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/demohost"
	"ollie/internal/simhost"
	"ollie/tunnel/deploy"
)

// simFleet is n simulated hosts inside the test process (internal/simhost:
// real SSH servers on 127.0.0.1, each serving its namespace with the real
// 9P server, no olliesrv process), on the version -bin and -data deploy,
// driven by the real ollie-remote and its keeper as demoFleet's hosts are:
// demoFleet's command, its timing and its keeper's end serve both.
type simFleet struct {
	*demoFleet
	sim     *simhost.Fleet
	version string // what every host has deployed
}

// simAnswer is what a simulated host's agent answers: its own name, so
// that a run's results show every host's own answer.
func simAnswer(host, prompt string) string { return "all is well on " + host }

func startSimFleet(tb testing.TB, n int) *simFleet {
	tb.Helper()
	if buildFailed != nil {
		tb.Fatal(buildFailed)
	}
	raiseFileLimit(tb)
	installed, err := deploy.LoadBundle(binDir, dataDir, runtime.GOOS+"/"+runtime.GOARCH)
	if err != nil {
		tb.Fatal(err)
	}
	// Short: the keeper's sockets and each host's are under it.
	dir, err := os.MkdirTemp("", "osf")
	if err != nil {
		tb.Fatal(err)
	}
	d := &demoFleet{tb: tb, dir: filepath.Join(dir, "r"), state: filepath.Join(dir, "state"), key: filepath.Join(dir, "id_ed25519")}
	pub, err := demohost.NewClientKey(d.key)
	if err != nil {
		tb.Fatal(err)
	}
	sf := &simFleet{demoFleet: d, version: deploy.VersionOf(installed.Bins[runtime.GOOS+"/"+runtime.GOARCH])}
	sf.sim, err = simhost.Start(filepath.Join(dir, "h"), n, pub, &simhost.Options{Installed: installed, Answer: simAnswer})
	if err != nil {
		tb.Fatal(err)
	}
	d.files, err = sf.sim.WriteClientFiles(dir, d.key)
	if err != nil {
		sf.sim.Close()
		tb.Fatal(err)
	}
	d.names = sf.sim.Names()
	tb.Cleanup(func() {
		// The hosts end with the test process; what the keeper held on
		// them goes with them, so no down is needed.
		d.killKeeper()
		sf.sim.Close()
		os.RemoveAll(dir)
	})
	return sf
}

// raiseFileLimit lets this process and the ollie-remote and keeper it
// starts hold a thousand hosts' connections and sockets: the soft limit
// of open files goes to the hard one (children inherit it).
func raiseFileLimit(tb testing.TB) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			tb.Fatal(err)
		}
	}
}

// checkStatus checks ollie-remote status's rows of the first n hosts:
// each on the installed version, connected, its sessions and agents as
// the host counts them, and (approvals, when set) this desktop's broker
// registered there. It returns the first row that is not so, "" when all
// are.
func (sf *simFleet) checkStatus(out string, n int, approvals bool) string {
	for _, h := range sf.names[:n] {
		// HOST VERSION UPTIME SESSIONS AGENTS APPROVALS MODEL TUNNEL, the
		// model "host's own" two words.
		row := tableRow(out, h)
		if len(row) != 9 || row[1] != sf.version || row[len(row)-1] != "connected" || approvals && row[5] != "ok" {
			return strings.Join(row, " ")
		}
		if _, err := strconv.Atoi(row[3]); err != nil {
			return strings.Join(row, " ")
		}
	}
	return ""
}

// TestSimFleet runs up, status, a fleet run and down on 20 simulated
// hosts with the real ollie-remote: the path BenchmarkHold1000 times. Up
// starts every host's namespace through the keeper's own start script,
// status shows all 20 held on the installed version with this desktop's
// approvals registered, a fleet run finds every host up to date (the
// deploy probe) and gets each host's own answer, and down -stop-daemon
// stops one.
func TestSimFleet(t *testing.T) {
	const n = 20
	sf := startSimFleet(t, n)
	out := sf.must(append([]string{"-j", strconv.Itoa(n), "up"}, sf.names...)...)
	for _, h := range sf.sim.Hosts {
		if !strings.Contains(out, h.Name+": up: ollie -H "+h.Name) || !h.Running() {
			t.Fatalf("%s is not up (its namespace runs: %v)\n%s", h.Name, h.Running(), out)
		}
	}
	// The keeper registers its broker on each host once up has answered.
	var bad string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out = sf.must("status")
		if bad = sf.checkStatus(out, n, true); bad == "" || time.Now().After(deadline) {
			break
		}
	}
	if bad != "" {
		t.Fatalf("status: a row is %q; want %s, connected, approvals ok\n%s", bad, sf.version, out)
	}

	out = sf.must("fleet", "run", "-json", "-j", strconv.Itoa(n), strings.Join(sf.names, ","), "check where you are")
	res := jsonResults(t, out)
	for _, h := range sf.names {
		j := res[h]
		if j.Result != "done" || j.Answer != simAnswer(h, "") || j.Steps != 1 || j.ToolCalls != 0 || j.Version != sf.version {
			t.Errorf("%s: %+v; want done, answering %q, in 1 step with no tool call, on %s", h, j, simAnswer(h, ""), sf.version)
		}
	}
	out = sf.must("status")
	for _, h := range sf.names {
		if row := tableRow(out, h); len(row) < 5 || row[3] != "1" || row[4] != "1" {
			t.Errorf("status after the run: %s's row is %q, want the run's session and agent", h, row)
		}
	}

	out = sf.must("down", "-stop-daemon", sf.names[0])
	if !strings.Contains(out, sf.names[0]+": down, olliesrv stopped") || sf.sim.Hosts[0].Running() {
		t.Errorf("down -stop-daemon %s: its namespace runs: %v\n%s", sf.names[0], sf.sim.Hosts[0].Running(), out)
	}
	if !sf.sim.Hosts[1].Running() {
		t.Errorf("down -stop-daemon %s stopped %s's namespace too", sf.names[0], sf.names[1])
	}
}
