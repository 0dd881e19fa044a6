package remote

// BenchmarkHold1000: one desktop holding 1,000 hosts, the hosts simulated
// inside the benchmark process (internal/simhost: real SSH servers and the
// real 9P server, no olliesrv process), the desktop the real ollie-remote
// and its keeper. The goals of issue 33 are printed beside each figure;
// nothing here asserts a speed (docs/benchmarks.md reads them).
//
//	go test ./e2e/remote -run '^$' -bench 'BenchmarkHold1000' -benchtime 1x -timeout 40m -v

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/lab"
)

// The goals of issue 33 for 1,000 hosts.
const (
	goalUp        = 20 * time.Second
	goalStatus    = 5 * time.Second
	goalKeeperMem = 512 << 10 // bytes per held host
)

// simCPU is where CPU time went, sampled: the hosts (this process: their
// SSH servers and namespaces, and the little the benchmark itself does)
// and the keeper. The ollie-remote command's own is timedRun's.
type simCPU struct {
	hosts, keeper time.Duration
	keeperPid     int
}

func (sf *simFleet) cpuNow() simCPU {
	var self syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	u := simCPU{hosts: time.Duration(self.Utime.Nano() + self.Stime.Nano()), keeperPid: keeperPid(sf.dir)}
	if u.keeperPid != 0 {
		u.keeper = time.Duration(cpuTicks(u.keeperPid)) * 10 * time.Millisecond
	}
	return u
}

// since is the CPU used between two samples; a keeper that started in
// between counts from zero.
func (u simCPU) since(before simCPU) simCPU {
	keeper := u.keeper
	if u.keeperPid == before.keeperPid {
		keeper -= before.keeper
	}
	return simCPU{hosts: u.hosts - before.hosts, keeper: max(0, keeper), keeperPid: u.keeperPid}
}

// quiet waits until the keeper has settled after the work before (the
// approval channel registering on each host after an up, say), so that
// the next command's CPU is its own: two looks 500 ms apart within 20 ms
// of keeper CPU, or 20 s. It returns the keeper's CPU over the last look.
func (sf *simFleet) quiet() time.Duration {
	pid := keeperPid(sf.dir)
	last := cpuTicks(pid)
	var used int64
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		now := cpuTicks(pid)
		if used, last = now-last, now; used <= 2 {
			break
		}
	}
	return time.Duration(used) * 10 * time.Millisecond
}

// simOp is one command's figures: its wall time and CPU, the desktop's
// (the command and the keeper) apart from the hosts'.
type simOp struct {
	took, command, keeper, hosts time.Duration
}

func (o simOp) desktop() time.Duration { return o.command + o.keeper }

func (o simOp) String() string {
	return fmt.Sprintf("%.2fs; CPU: desktop %.2fs (the command %.2fs, the keeper %.2fs), hosts %.2fs",
		o.took.Seconds(), o.desktop().Seconds(), o.command.Seconds(), o.keeper.Seconds(), o.hosts.Seconds())
}

// timed runs ollie-remote with args, failing tb when it fails, and
// returns its output and figures.
func (sf *simFleet) timed(tb testing.TB, args ...string) (string, simOp) {
	tb.Helper()
	before := sf.cpuNow()
	out, took, ph, err := sf.timedRun(args...)
	cpu := sf.cpuNow().since(before)
	if err != nil {
		tb.Fatalf("ollie-remote %s: %v\n%s", clipArgs(args), err, failedLines(out))
	}
	return out, simOp{took: took, command: ph.cpu, keeper: cpu.keeper, hosts: cpu.hosts}
}

// up brings the first n hosts up and checks each is.
func (sf *simFleet) up(tb testing.TB, n int) simOp {
	tb.Helper()
	out, op := sf.timed(tb, append([]string{"-j", strconv.Itoa(n), "up"}, sf.names[:n]...)...)
	if got := strings.Count(out, ": up: ollie -H "); got != n {
		tb.Fatalf("up: %d hosts up, want %d\n%s", got, n, failedLines(out))
	}
	return op
}

// status reads the status of every host held and checks that each of
// the first n is there, connected, on the installed version.
func (sf *simFleet) status(tb testing.TB, n int) simOp {
	tb.Helper()
	out, op := sf.timed(tb, "status")
	if bad := sf.checkStatus(out, n, false); bad != "" {
		tb.Fatalf("status: a row is %q; want %s and connected\n%s", bad, sf.version, tailString(out, 4000))
	}
	return op
}

// fleetRun runs a goal on the first n hosts and checks that every one
// finished with its own answer, in one step.
func (sf *simFleet) fleetRun(tb testing.TB, n int) simOp {
	tb.Helper()
	out, op := sf.timed(tb, "fleet", "run", strings.Join(sf.names[:n], ","), "check where you are")
	table := out[max(0, strings.LastIndex(out, "\nHOST ")):]
	for _, h := range sf.names[:n] {
		row := tableRow(table, h)
		if len(row) < 7 || row[1] != "done" || row[3] != "1" || row[4] != "0" || strings.Join(row[6:], " ") != simAnswer(h, "") {
			tb.Fatalf("%s's result is %q; want done in 1 step, no tool call, answering %q\n%s", h, row, simAnswer(h, ""), tailString(out, 4000))
		}
	}
	return op
}

// loadAvg is the machine's load average, as uptime shows it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// verdict says whether a figure met its goal.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// BenchmarkHold1000 holds 1,000 simulated hosts from one keeper.
//
// up+status: ollie-remote -j 1000 up of all of them, the keeper killed
// before (so it connects to each: an SSH handshake, olliesrv start, the
// approval channel's forward and registration), then ollie-remote status
// (every row checked: connected, on the installed version). Goals: up
// under 20 s, status under 5 s.
//
// memory: the keeper's resident size (RSS, and PSS beside it) holding one
// host, then all 1,000, then after status; per host is (at 1,000 − at 1)
// / 999. Goal: at most 512 KiB per held host. Beside it, the keeper's
// CPU over 10 s of holding them idle, and what a simulated host costs this
// process.
//
// fleet: ollie-remote fleet run of a trivial goal (each host's agent
// answers at once) on 10, 100 and 1,000 held hosts, in a rotating order,
// each once the keeper is quiet; the desktop's CPU (the command and the keeper) per host at each size,
// which should not grow with the fleet, and the hosts' CPU apart.
func BenchmarkHold1000(b *testing.B) {
	const n = 1000
	var self0 int64
	self0, _ = procMem(os.Getpid())
	sf := startSimFleet(b, n)
	started, _ := procMem(os.Getpid())
	b.Logf("%d simulated hosts started: this process %s → %s; load %s", n, mib(self0), mib(started), loadAvg())

	b.Run("up+status", func(b *testing.B) {
		var up, st simOp
		for range b.N {
			sf.killKeeper()
			u := sf.up(b, n)
			s := sf.status(b, n)
			b.Logf("up of %d: %s; load %s", n, u, loadAvg())
			b.Logf("status of %d: %s", n, s)
			up, st = addOp(up, u), addOp(st, s)
		}
		N := time.Duration(b.N)
		b.Logf("up: %.2fs a run (goal < %v: %s); status: %.2fs (goal < %v: %s)",
			(up.took / N).Seconds(), goalUp, verdict(up.took/N < goalUp), (st.took / N).Seconds(), goalStatus, verdict(st.took/N < goalStatus))
		b.ReportMetric((up.took / N).Seconds(), "up-s/op")
		b.ReportMetric((st.took / N).Seconds(), "status-s/op")
		b.ReportMetric((up.desktop() / N).Seconds(), "up-desktop-cpu-s/op")
		b.ReportMetric((up.hosts / N).Seconds(), "up-hosts-cpu-s/op")
		b.ReportMetric((st.desktop() / N).Seconds(), "status-desktop-cpu-s/op")
		b.ReportMetric((st.hosts / N).Seconds(), "status-hosts-cpu-s/op")
		b.ReportMetric(0, "ns/op")
	})

	b.Run("memory", func(b *testing.B) { sf.holdMemory(b, n, self0) })
	b.Run("fleet", func(b *testing.B) { sf.fleetScaling(b, []int{10, 100, n}) })
}

func addOp(a, b simOp) simOp {
	return simOp{took: a.took + b.took, command: a.command + b.command, keeper: a.keeper + b.keeper, hosts: a.hosts + b.hosts}
}

// holdMemory measures what the keeper holds per host: RSS and PSS with
// one host, with n, and after status; and what the simulation costs this
// process per host (self0: its RSS before the hosts started).
func (sf *simFleet) holdMemory(b *testing.B, n int, self0 int64) {
	var held, heldPSS, afterStatus, simPerHost, idle float64
	for range b.N {
		sf.killKeeper()
		sf.up(b, 1)
		pid := keeperPid(sf.dir)
		rss1, pss1 := settledRSS(pid), lab.PSS([]int{pid})
		sf.up(b, n)
		rssN, pssN := settledRSS(pid), lab.PSS([]int{pid})
		// Holding, idle: keepalives and nothing else.
		sf.quiet()
		t0 := cpuTicks(pid)
		time.Sleep(10 * time.Second)
		idleCPU := float64(cpuTicks(pid)-t0) / 10 // ticks of 10 ms over 10 s: percent of one core
		sf.status(b, n)
		rssS := settledRSS(pid)
		if keeperPid(sf.dir) != pid {
			b.Fatal("the keeper changed during the measurement")
		}
		self, _ := procMem(os.Getpid())
		per := float64(rssN-rss1) / float64(n-1)
		b.Logf("keeper: RSS %s holding 1 host, %s holding %d (%.0f KiB a host; goal ≤ %d KiB: %s), %s after status; PSS %s → %s; idle, %.1f%% of a core; this process (the hosts) %s, %.0f KiB a host; load %s",
			mib(rss1), mib(rssN), n, per/1024, goalKeeperMem>>10, verdict(per <= goalKeeperMem), mib(rssS), mib(pss1), mib(pssN), idleCPU, mib(self), float64(self-self0)/float64(n)/1024, loadAvg())
		held += per
		heldPSS += float64(pssN-pss1) / float64(n-1)
		afterStatus += float64(rssS-rss1) / float64(n-1)
		simPerHost += float64(self-self0) / float64(n)
		idle += idleCPU
	}
	N := float64(b.N)
	b.ReportMetric(held/N/1024, "keeper-KiB/host")
	b.ReportMetric(heldPSS/N/1024, "keeper-PSS-KiB/host")
	b.ReportMetric(afterStatus/N/1024, "keeper-after-status-KiB/host")
	b.ReportMetric(simPerHost/N/1024, "simhost-KiB/host")
	b.ReportMetric(idle/N, "keeper-idle-cpu-%")
	b.ReportMetric(0, "ns/op")
}

// fleetScaling runs a fleet run on each of sizes held hosts, in a
// rotating order, and reports the desktop's CPU per host at each size.
func (sf *simFleet) fleetScaling(b *testing.B, sizes []int) {
	largest := sizes[len(sizes)-1]
	sf.up(b, largest)
	ops := make([]simOp, len(sizes))
	for i := range b.N {
		for k := range sizes {
			j := (i + k) % len(sizes)
			sf.quiet()
			op := sf.fleetRun(b, sizes[j])
			b.Logf("fleet run, %d hosts: %s; load %s", sizes[j], op, loadAvg())
			ops[j] = addOp(ops[j], op)
		}
	}
	N := time.Duration(b.N)
	var per []string
	for j, n := range sizes {
		o := ops[j]
		perHost := o.desktop().Seconds() * 1000 / float64(N) / float64(n)
		per = append(per, fmt.Sprintf("%d hosts %.2f ms", n, perHost))
		b.ReportMetric((o.took / N).Seconds(), fmt.Sprintf("%dhosts-s/op", n))
		b.ReportMetric(perHost, fmt.Sprintf("%dhosts-desktop-cpu-ms/host", n))
		b.ReportMetric(o.hosts.Seconds()*1000/float64(N)/float64(n), fmt.Sprintf("%dhosts-hosts-cpu-ms/host", n))
	}
	// Linear: the per-host cost of the largest run over the middle one's
	// (the smallest is mostly the command's own start).
	mid, last := len(sizes)-2, len(sizes)-1
	ratio := (ops[last].desktop().Seconds() / float64(sizes[last])) / (ops[mid].desktop().Seconds() / float64(sizes[mid]))
	b.Logf("the desktop's CPU per host: %s; %d/%d per host %.2f (1 is linear)", strings.Join(per, ", "), sizes[last], sizes[mid], ratio)
	b.ReportMetric(ratio, "desktop-per-host-ratio")
	b.ReportMetric(0, "ns/op")
}
