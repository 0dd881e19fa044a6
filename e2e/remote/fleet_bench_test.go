package remote

// The benchmarks of issue #15 (fleet runs), on hosts inside the test
// process (internal/demohost): no root, no sshd, and as many hosts as the
// machine can run olliesrv daemons for. Each runs the real ollie-remote
// binary; the peers run in the same benchmark, interleaved iteration by
// iteration. Nothing here asserts a speed: the figures and their reading
// are in docs/benchmarks.md.
//
//	go test ./e2e/remote -run '^$' -bench 'Fleet|Hold200' -benchtime 1x -v
//
// BenchmarkFleetPeers needs parallel-ssh (pssh) and ansible (ansible-core):
// in the lab tier (OLLIE_LAB=1) a missing one fails it, elsewhere it skips.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/lab"
)

// think is how long the scripted model takes to answer each request.
const think = 200 * time.Millisecond

// fleetGoal is the goal of every benchmarked run.
const fleetGoal = "check where you are"

// fleetRun runs ollie-remote fleet run on the first n hosts, checks that
// every host finished with its own answer, and returns the wall time of
// the command. Its phases and CPU go to the log.
func (d *demoFleet) fleetRun(b *testing.B, n int, jobs int) time.Duration {
	b.Helper()
	before := d.cpuNow()
	out, took, ph, err := d.timedRun("fleet", "run", "-j", strconv.Itoa(jobs), strings.Join(d.hosts(n), ","), fleetGoal)
	cpu := d.cpuNow().since(before)
	if err != nil {
		b.Fatalf("fleet run on %d hosts: %v\n%s", n, err, tailString(out, 4000))
	}
	d.checkAnswers(b, out, n)
	b.Logf("fleet run, %d hosts: %.2fs; %s; %s", n, took.Seconds(), ph, cpu)
	return took
}

// checkAnswers checks the results table: each of the first n hosts done,
// its answer naming its own home (pwd, as the tool ran it there).
func (d *demoFleet) checkAnswers(tb testing.TB, out string, n int) {
	tb.Helper()
	// The table comes after the lines of the run.
	table := out
	if i := strings.LastIndex(out, "\nHOST "); i >= 0 {
		table = out[i:]
	}
	for _, h := range d.fleet.Hosts[:n] {
		row := tableRow(table, h.Name)
		if len(row) < 7 || row[1] != "done" || row[3] != "2" || row[4] != "1" || !strings.Contains(strings.Join(row, " "), "checked in "+h.Home) {
			tb.Fatalf("%s's result is %q; want done in 2 steps with 1 tool call, answering checked in %s\n%s", h.Name, row, h.Home, tailString(out, 4000))
		}
	}
}

// BenchmarkFleetRun times ollie-remote fleet run on 1, 10 and 50 hosts
// (a rotating order in each iteration), with a scripted model that thinks
// 200 ms before each reply: a shell tool call (pwd), then the answer, so
// two model requests and one tool call per host, 400 ms of thinking.
// The hosts are on this version and their daemons run, as between runs;
// held: the keeper holds them already (ollie-remote up); cold: the keeper
// was killed before each run (a desktop after a reboot), so the run
// connects to every host. -j 50: every host is set up at once.
func BenchmarkFleetRun(b *testing.B) {
	d := startDemoFleet(b, 50)
	d.model(think, true)
	d.seed(50)
	d.must(append([]string{"-j", "50", "up"}, d.hosts(50)...)...)
	sizes := []int{1, 10, 50}
	for _, mode := range []string{"held", "cold"} {
		b.Run(mode, func(b *testing.B) {
			took := make([]time.Duration, len(sizes))
			for i := range b.N {
				for k := range sizes {
					j := (i + k) % len(sizes)
					if mode == "cold" {
						d.killKeeper()
					} else {
						d.must(append([]string{"-j", "50", "up"}, d.hosts(50)...)...)
					}
					took[j] += d.fleetRun(b, sizes[j], 50)
				}
			}
			for j, n := range sizes {
				b.ReportMetric(took[j].Seconds()/float64(b.N), fmt.Sprintf("%dhosts-s/op", n))
			}
			b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "10/1")
			b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "50/1")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkFleetPeers runs one trivial command on the same 50 hosts
// through the peers, each connecting afresh: parallel-ssh -p 50 true,
// ansible -f 50 -m command -a true (its ssh control sockets in a new
// directory each time, so it connects anew too); beside them ollie-remote
// fleet run (the scripted model of BenchmarkFleetRun) and a bare
// ollie-remote up, both after the keeper was killed, with -j 50. The
// hosts' daemons run, as sshd does on a peer's hosts.
func BenchmarkFleetPeers(b *testing.B) {
	for _, tool := range []struct{ cmd, pkg string }{{"parallel-ssh", "pssh"}, {"ansible", "ansible-core"}} {
		_, err := exec.LookPath(tool.cmd)
		lab.Need(b, err == nil, fmt.Sprintf("%s, the peer, is not installed: apt-get install %s", tool.cmd, tool.pkg))
	}
	const n = 50
	d := startDemoFleet(b, n)
	d.model(think, true)
	d.seed(n)
	d.must(append([]string{"-j", "50", "up"}, d.hosts(n)...)...)
	p := d.peers(b)

	var tFleet, tUp, tPssh, tAnsible time.Duration
	for i := range b.N {
		ops := []func(){
			func() { d.killKeeper(); tFleet += d.fleetRun(b, n, n) },
			func() { d.killKeeper(); tUp += d.up(b, n) },
			func() { tPssh += p.pssh(b) },
			func() { tAnsible += p.ansible(b) },
		}
		for k := range ops {
			ops[(i+k)%len(ops)]()
		}
	}
	N := float64(b.N)
	b.ReportMetric(tFleet.Seconds()/N, "fleet-s/op")
	b.ReportMetric(tUp.Seconds()/N, "up-s/op")
	b.ReportMetric(tPssh.Seconds()/N, "pssh-s/op")
	b.ReportMetric(tAnsible.Seconds()/N, "ansible-s/op")
	b.ReportMetric(tFleet.Seconds()/tPssh.Seconds(), "fleet/pssh")
	b.ReportMetric(tFleet.Seconds()/tAnsible.Seconds(), "fleet/ansible")
	b.ReportMetric(tUp.Seconds()/tPssh.Seconds(), "up/pssh")
	b.ReportMetric(tUp.Seconds()/tAnsible.Seconds(), "up/ansible")
	b.ReportMetric(0, "ns/op")
}

// up runs ollie-remote -j n up on the first n hosts, checks that each is
// up, and returns its wall time.
func (d *demoFleet) up(tb testing.TB, n int) time.Duration {
	tb.Helper()
	before := d.cpuNow()
	out, took, ph, err := d.timedRun(append([]string{"-j", strconv.Itoa(n), "up"}, d.hosts(n)...)...)
	if got := strings.Count(out, ": up: ollie -H "); err != nil || got != n {
		tb.Fatalf("up: %v; %d hosts up, want %d\n%s", err, got, n, failedLines(out))
	}
	tb.Logf("up, %d hosts: %.2fs; up's own CPU %.1fs; %s", n, took.Seconds(), ph.cpu.Seconds(), d.cpuNow().since(before))
	return took
}

// failedLines are the lines of out that say FAILED, or its tail.
func failedLines(out string) string {
	var failed []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "FAILED") {
			failed = append(failed, line)
		}
	}
	if len(failed) == 0 {
		return tailString(out, 4000)
	}
	return strings.Join(failed, "\n")
}

// peerFiles are what parallel-ssh and ansible are given to reach the
// hosts: the same ssh config, key and known_hosts as ollie-remote's.
type peerFiles struct {
	d         *demoFleet
	hostsFile string // parallel-ssh -h: a name a line (the ssh config's aliases)
	inventory string // ansible -i: INI, each host's address and port
	cfg       string // ANSIBLE_CONFIG: ours alone, not /etc/ansible's
	dir       string
}

func (d *demoFleet) peers(tb testing.TB) *peerFiles {
	p := &peerFiles{d: d, dir: tb.TempDir()}
	p.hostsFile = filepath.Join(p.dir, "hosts")
	p.inventory = filepath.Join(p.dir, "inventory.ini")
	p.cfg = filepath.Join(p.dir, "ansible.cfg")
	var inv strings.Builder
	inv.WriteString("[demo]\n")
	for _, h := range d.fleet.Hosts {
		fmt.Fprintf(&inv, "%s ansible_host=%s ansible_port=%d\n", h.Name, h.Addr, h.Port)
	}
	fmt.Fprintf(&inv, "\n[demo:vars]\nansible_user=%s\nansible_ssh_private_key_file=%s\n", d.fleet.Hosts[0].User, d.key)
	fmt.Fprintf(&inv, "ansible_ssh_common_args='-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes'\n", d.files.KnownHosts)
	// Where Python is, as an inventory for a known fleet says; without
	// it ansible first runs a discovery script on every host.
	inv.WriteString("ansible_python_interpreter=/usr/bin/python3\n")
	for _, f := range []struct{ name, text string }{
		{p.hostsFile, strings.Join(d.names, "\n") + "\n"},
		{p.inventory, inv.String()},
		{p.cfg, "[defaults]\nhost_key_checking = True\nnocolor = True\n"},
	} {
		if err := os.WriteFile(f.name, []byte(f.text), 0600); err != nil {
			tb.Fatal(err)
		}
	}
	return p
}

// pssh runs parallel-ssh -p 50 true on every host and checks each
// succeeded.
func (p *peerFiles) pssh(tb testing.TB) time.Duration {
	tb.Helper()
	cmd := exec.Command("parallel-ssh", "-h", p.hostsFile, "-p", strconv.Itoa(len(p.d.names)), "-t", "0", "-x", "-F "+p.d.files.Config, "true")
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=")
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(t0)
	if n := strings.Count(string(out), "[SUCCESS]"); err != nil || n != len(p.d.names) {
		tb.Fatalf("parallel-ssh: %v, %d hosts succeeded of %d\n%s", err, n, len(p.d.names), tailString(string(out), 4000))
	}
	tb.Logf("parallel-ssh -p %d true: %.2fs", len(p.d.names), took.Seconds())
	return took
}

// ansibleChanged is a host's line when its command ran.
var ansibleChanged = regexp.MustCompile(`(?m)^demo\d+ \| CHANGED \| rc=0 >>`)

// ansible runs ansible -f 50 -m command -a true on every host and checks
// each ran it. Its ssh connections are OpenSSH's with ControlPersist, as
// ansible makes them by default: in a new control directory each time,
// whose masters are ended afterwards.
func (p *peerFiles) ansible(tb testing.TB) time.Duration {
	tb.Helper()
	ctl, err := os.MkdirTemp("", "oac")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(ctl)
	defer endSSHMasters(ctl)
	cmd := exec.Command("ansible", "-i", p.inventory, "demo", "-f", strconv.Itoa(len(p.d.names)), "-m", "command", "-a", "true")
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=", "ANSIBLE_CONFIG="+p.cfg, "ANSIBLE_SSH_CONTROL_PATH_DIR="+ctl,
		"ANSIBLE_LOCAL_TEMP="+filepath.Join(ctl, "tmp"), "ANSIBLE_HOME="+filepath.Join(p.dir, "ansible-home"))
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(t0)
	if n := len(ansibleChanged.FindAll(out, -1)); err != nil || n != len(p.d.names) {
		tb.Fatalf("ansible: %v, %d hosts ran the command of %d\n%s", err, n, len(p.d.names), tailString(string(out), 4000))
	}
	tb.Logf("ansible -f %d -m command -a true: %.2fs", len(p.d.names), took.Seconds())
	return took
}

// endSSHMasters ends the ssh control masters (ControlPersist) whose
// sockets are in dir: they would hold their connections for a minute
// more, and take the machine from the next peer.
func endSSHMasters(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err := os.ReadFile(p + "/cmdline")
		if err != nil || !strings.HasPrefix(string(cmd), "ssh") || !strings.Contains(string(cmd), dir) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
			if proc, err := os.FindProcess(pid); err == nil {
				proc.Kill()
			}
		}
	}
}

// BenchmarkHold200 brings 200 hosts up and reads their status, with
// ollie-remote up then ollie-remote status, and measures what holding
// them costs in memory: the keeper's resident size per held host, and the
// hosts' olliesrv daemons'. first: no daemon runs, so up starts 200 of
// them; again: they run (a desktop after a reboot), so up connects and
// finds them. The keeper is killed before each up.
func BenchmarkHold200(b *testing.B) {
	const n = 200
	d := startDemoFleet(b, n)
	d.seed(n)
	for _, mode := range []string{"first", "again"} {
		b.Run(mode, func(b *testing.B) {
			var tUp, tStatus time.Duration
			for range b.N {
				d.killKeeper()
				if mode == "first" {
					d.stopDaemons(b)
				}
				tUp += d.up(b, n)
				tStatus += d.status(b, n)
			}
			N := float64(b.N)
			b.ReportMetric(tUp.Seconds()/N, "up-s/op")
			b.ReportMetric(tStatus.Seconds()/N, "status-s/op")
			b.ReportMetric((tUp+tStatus).Seconds()/N, "up+status-s/op")
			b.ReportMetric(0, "ns/op")
		})
	}

	// Memory: the keeper holding one host, then all 200; the daemons.
	b.Run("memory", func(b *testing.B) {
		var held, afterStatus, daemonRSS, daemonPSS float64 // sums over the iterations
		for range b.N {
			d.killKeeper()
			d.must("up", d.names[0])
			pid := keeperPid(d.dir)
			rss1 := settledRSS(pid)
			d.up(b, n)
			rssN := settledRSS(pid)
			d.status(b, n)
			rssS := settledRSS(pid)
			if keeperPid(d.dir) != pid {
				b.Fatal("the keeper changed during the measurement")
			}
			daemons := d.daemonPids()
			if len(daemons) != n {
				b.Fatalf("%d olliesrv daemons run, want %d", len(daemons), n)
			}
			rss, pss := rssSum(daemons), lab.PSS(daemons)
			b.Logf("keeper RSS: %s holding 1 host, %s holding %d, %s after status; olliesrv daemons: RSS %s in all, PSS %s",
				mib(rss1), mib(rssN), n, mib(rssS), mib(rss), mib(pss))
			held += float64(rssN-rss1) / float64(n-1)
			afterStatus += float64(rssS-rss1) / float64(n-1)
			daemonRSS += float64(rss) / float64(n)
			daemonPSS += float64(pss) / float64(n)
		}
		N := float64(b.N)
		b.ReportMetric(held/N/1024, "keeper-KiB/host")
		b.ReportMetric(afterStatus/N/1024, "keeper-after-status-KiB/host")
		b.ReportMetric(daemonRSS/N/(1<<20), "olliesrv-RSS-MiB/host")
		b.ReportMetric(daemonPSS/N/(1<<20), "olliesrv-PSS-MiB/host")
		b.ReportMetric(0, "ns/op")
	})
}

// settledRSS is a process's resident size once it has stopped moving:
// two looks 200ms apart agree, or 10s have passed.
func settledRSS(pid int) int64 {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	rss, _ := procMem(pid)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		<-tick.C
		now, _ := procMem(pid)
		if now == rss {
			break
		}
		rss = now
	}
	return rss
}

// status runs ollie-remote status on the first n hosts, checks every one
// is connected and answered, and returns its wall time.
func (d *demoFleet) status(tb testing.TB, n int) time.Duration {
	tb.Helper()
	before := d.cpuNow()
	out, took, ph, err := d.timedRun(append([]string{"status"}, d.hosts(n)...)...)
	if err != nil {
		tb.Fatalf("status: %v\n%s", err, tailString(out, 4000))
	}
	for _, h := range d.hosts(n) {
		row := tableRow(out, h)
		if len(row) < 7 || row[1] == "-" || row[len(row)-1] != "connected" {
			tb.Fatalf("status: %s's row is %q, want its version and connected\n%s", h, row, tailString(out, 4000))
		}
	}
	tb.Logf("status, %d hosts: %.2fs; status's own CPU %.1fs; %s", n, took.Seconds(), ph.cpu.Seconds(), d.cpuNow().since(before))
	return took
}

// stopDaemons stops every host's olliesrv, a few at a time.
func (d *demoFleet) stopDaemons(tb testing.TB) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, h := range d.fleet.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := h.StopDaemon(ctx); err != nil {
				tb.Error(err)
			}
		}()
	}
	wg.Wait()
	if pids := d.daemonPids(); len(pids) > 0 {
		tb.Fatalf("%d daemons still run after olliesrv stop", len(pids))
	}
}
