package remote

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/sshlab"
)

// BenchmarkDeployOverSlowLink deploys to every lab host (nine, the lab's
// most, or OLLIE_BENCH_HOSTS) through one relay that adds a 20 ms round trip and carries at most
// 10 Mbit/s each way for all of them together, as a laptop's link would,
// beside rsync -az of the same files to the same hosts (all at once, as
// deploy goes) over the same relay, in the same run:
//
//   - cold: fresh homes, the whole binary and data;
//   - upgrade: a build that differs from the installed one by one string
//     (-X main.version), which deploy sends as a patch against the version
//     the host runs, and rsync as its rolling-checksum delta.
//
// The compressed forms are made once per version (and the patch once per
// pair of versions) and kept on the desktop, in a cache each run of the
// benchmark starts empty: cold and upgrade pay for making them, as the
// first deploy of a new build does. upgrade-cached is the same upgrade
// again with the patch already made, as for the next hosts or groups of
// a rollout, and cold-cached a cold deploy with the compressed binary
// already made. Each metric is per host set; wire-% is the share of the
// files' size that deploy put on the wire.
func BenchmarkDeployOverSlowLink(b *testing.B) {
	if buildFailed != nil {
		b.Fatal(buildFailed)
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		b.Fatal("rsync not found: apt-get install rsync")
	}
	// OLLIE_BENCH_HOSTS=1 shows what one host's own work costs, when
	// nine hosts do not share this machine's cores and disk.
	hosts := sshlab.MaxHosts
	if n, err := strconv.Atoi(os.Getenv("OLLIE_BENCH_HOSTS")); err == nil && n >= 1 && n <= sshlab.MaxHosts {
		hosts = n
	}
	lab := sshlab.Start(b, sshlab.Config{Hosts: hosts, UserPrefix: "orslow"})
	link := newSlowLink(10*time.Millisecond, 10_000_000)
	dir := b.TempDir()
	cfgFile, names := slowLinkConfig(b, lab, link, dir)
	bin2, ver2 := buildUpgrade(b, dir)
	srcFor := func(bin string) string {
		src := filepath.Join(dir, "src-"+filepath.Base(bin))
		if _, err := os.Stat(src); err != nil {
			os.MkdirAll(src, 0755)
			exec.Command("cp", "-a", filepath.Join(bin, "olliesrv"), src).Run()
			exec.Command("cp", "-a", dataDir, filepath.Join(src, "data")).Run()
		}
		return src
	}
	env := append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"), "OLLIE_REMOTE_DIR="+filepath.Join(dir, "remote"), "SSH_AUTH_SOCK=")
	run := func(bin string) (time.Duration, string) {
		t0 := time.Now()
		cmd := exec.Command(remoteBin, append([]string{"-F", cfgFile, "-bin", bin, "-data", dataDir, "deploy"}, names...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		took := time.Since(t0)
		if err != nil {
			b.Fatalf("deploy: %v\n%s", err, out)
		}
		return took, string(out)
	}
	deploy := func(bin string) (time.Duration, float64) {
		took, out := run(bin)
		return took, wireShare(b, out, names)
	}
	rsync := func(bin string) time.Duration {
		src := srcFor(bin)
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if out, err := exec.Command("rsync", "-az", "-e", "ssh -F "+cfgFile, src+"/", n+":bench-rsync/").CombinedOutput(); err != nil {
					b.Errorf("rsync to %s: %v\n%s", n, err, out)
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	var coldD, coldR, upD, upR, upWarm, coldWarm time.Duration
	var coldShare, upShare float64
	for i := range b.N {
		for _, h := range lab.Hosts {
			freshHome(b, h)
			os.RemoveAll(filepath.Join(h.Home, "bench-rsync"))
		}
		// Cold, then the upgrade; the order of the peers alternates.
		if i%2 == 0 {
			d, s := deploy(binDir)
			coldD, coldShare = coldD+d, coldShare+s
			coldR += rsync(binDir)
		} else {
			coldR += rsync(binDir)
			d, s := deploy(binDir)
			coldD, coldShare = coldD+d, coldShare+s
		}
		if i%2 == 0 {
			d, s := deploy(bin2)
			upD, upShare = upD+d, upShare+s
			upR += rsync(bin2)
		} else {
			upR += rsync(bin2)
			d, s := deploy(bin2)
			upD, upShare = upD+d, upShare+s
		}
		// The same upgrade once more, now that this desktop has made the
		// patch (the next hosts or groups of a rollout): back to the old
		// version and the new one's directory removed, untimed, then the
		// upgrade again.
		run(binDir)
		for _, h := range lab.Hosts {
			os.RemoveAll(filepath.Join(h.Home, ".local/share/ollie", ver2))
		}
		d, s := deploy(bin2)
		if s > 1 {
			b.Fatalf("the upgrade again put %.1f%% of the files on the wire: not a patch", s)
		}
		upWarm += d
		// And a cold host with the compressed binary already made.
		for _, h := range lab.Hosts {
			freshHome(b, h)
		}
		d, _ = deploy(binDir)
		coldWarm += d
	}
	n := float64(b.N)
	b.ReportMetric(coldD.Seconds()/n, "cold-deploy-s")
	b.ReportMetric(coldR.Seconds()/n, "cold-rsync-s")
	b.ReportMetric(coldD.Seconds()/coldR.Seconds(), "cold-deploy/rsync")
	b.ReportMetric(coldShare/n, "cold-wire-%")
	b.ReportMetric(upD.Seconds()/n, "upgrade-deploy-s")
	b.ReportMetric(upR.Seconds()/n, "upgrade-rsync-s")
	b.ReportMetric(upD.Seconds()/upR.Seconds(), "upgrade-deploy/rsync")
	b.ReportMetric(upShare/n, "upgrade-wire-%")
	b.ReportMetric(coldWarm.Seconds()/n, "cold-cached-s")
	b.ReportMetric(coldWarm.Seconds()/coldR.Seconds(), "cold-cached/rsync")
	b.ReportMetric(upWarm.Seconds()/n, "upgrade-cached-s")
	b.ReportMetric(upWarm.Seconds()/upR.Seconds(), "upgrade-cached/rsync")
	b.ReportMetric(0, "ns/op")
}

// slowLinkConfig relays every lab host over link and writes, in dir, an
// ssh config and known_hosts that reach each as far<name> through it. It
// returns the config file and the far names.
func slowLinkConfig(b testing.TB, lab *sshlab.Lab, link *slowLink, dir string) (cfgFile string, names []string) {
	var cfg, known strings.Builder
	for _, h := range lab.Hosts {
		port := link.relay(b, fmt.Sprintf("%s:%d", h.Addr, h.Port))
		key := strings.Fields(h.HostKeyPub)
		fmt.Fprintf(&known, "[127.0.0.1]:%d %s %s\n", port, key[0], key[1])
		fmt.Fprintf(&cfg, "Host far%s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  UserKnownHostsFile %s\n  BatchMode yes\n",
			h.Name, port, h.User, lab.ClientKey, filepath.Join(dir, "known_hosts"))
		names = append(names, "far"+h.Name)
	}
	os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(known.String()), 0600)
	cfgFile = filepath.Join(dir, "ssh_config")
	os.WriteFile(cfgFile, []byte(cfg.String()), 0600)
	return cfgFile, names
}

// buildUpgrade builds the upgrade, the same source with another version
// string, into dir/bin2, and returns that directory and its version.
func buildUpgrade(b *testing.B, dir string) (bin2, ver2 string) {
	bin2 = filepath.Join(dir, "bin2")
	build := exec.Command("go", "build", "-buildvcs=false", "-trimpath", "-ldflags", "-s -w -X main.version=bench-upgrade", "-o", filepath.Join(bin2, "olliesrv"), "../../cmd/olliesrv")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the upgrade: %v\n%s", err, out)
	}
	sum, err := os.ReadFile(filepath.Join(bin2, "olliesrv"))
	if err != nil {
		b.Fatal(err)
	}
	ver2 = fmt.Sprintf("%x", sha256.Sum256(sum))[:12]
	return bin2, ver2
}

// wireShare is the mean share of the files' size that deploy's table says
// went on the wire to each host ("6.6 MiB (22.8% of 29.1 MiB)").
func wireShare(b *testing.B, out string, hosts []string) float64 {
	var sum float64
	for _, h := range hosts {
		row := tableRow(out, h)
		found := false
		for i, f := range row {
			var v float64
			if _, err := fmt.Sscanf(f, "(%f%%", &v); err == nil && i+1 < len(row) && row[i+1] == "of" {
				sum, found = sum+v, true
			}
		}
		if !found {
			b.Fatalf("no share of the size for %s in:\n%s", h, out)
		}
	}
	return sum / float64(len(hosts))
}

// slowLink is a relay's link: each direction delayed by delay, and all
// connections together carrying at most bits per second each way (no
// limit when 0).
type slowLink struct {
	delay time.Duration
	bps   float64
	mu    sync.Mutex
	free  [2]time.Time // when each direction's link is next free
}

func newSlowLink(delay time.Duration, bps float64) *slowLink {
	return &slowLink{delay: delay, bps: bps}
}

// send reserves the link for n bytes in direction dir and says when they
// have arrived at the far end.
func (l *slowLink) send(dir, n int) time.Time {
	if l.bps == 0 {
		return time.Now().Add(l.delay)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	start := time.Now()
	if l.free[dir].After(start) {
		start = l.free[dir]
	}
	l.free[dir] = start.Add(time.Duration(float64(n*8) / l.bps * float64(time.Second)))
	return l.free[dir].Add(l.delay)
}

// relay relays TCP connections to target over the link, and returns its
// port.
func (l *slowLink) relay(b testing.TB, target string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	pipe := func(dst, src net.Conn, dir int) {
		type chunk struct {
			at time.Time
			p  []byte
		}
		q := make(chan chunk, 1<<14)
		go func() {
			defer dst.Close()
			for c := range q {
				time.Sleep(time.Until(c.at))
				if _, err := dst.Write(c.p); err != nil {
					return
				}
			}
		}()
		defer close(q)
		for {
			// Small chunks: the link is shared fairly among connections.
			p := make([]byte, 16<<10)
			n, err := src.Read(p)
			if n > 0 {
				q <- chunk{l.send(dir, n), p[:n]}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go pipe(s, c, 0)
			go pipe(c, s, 1)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
