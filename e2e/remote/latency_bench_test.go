package remote

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/internal/sshlab"
)

// BenchmarkDeployOverLatency deploys to one host behind a link with a
// 20 ms round trip (a TCP relay that delays each direction by 10 ms), cold,
// beside rsync -a of the same files over the same link, in the same run.
// On loopback every protocol looks fast; a round trip per SFTP write is
// what a real fleet pays.
func BenchmarkDeployOverLatency(b *testing.B) {
	if buildFailed != nil {
		b.Fatal(buildFailed)
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		b.Fatal("rsync not found: apt-get install rsync")
	}
	lab := sshlab.Start(b, sshlab.Config{Hosts: 1, UserPrefix: "orlat"})
	h := lab.Host(0)
	port := newSlowLink(10*time.Millisecond, 0).relay(b, fmt.Sprintf("%s:%d", h.Addr, h.Port))
	dir := b.TempDir()
	known := filepath.Join(dir, "known_hosts")
	key := strings.Fields(h.HostKeyPub)
	os.WriteFile(known, []byte(fmt.Sprintf("[127.0.0.1]:%d %s %s\n", port, key[0], key[1])), 0600)
	cfg := filepath.Join(dir, "ssh_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf("Host far\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  UserKnownHostsFile %s\n  BatchMode yes\n",
		port, h.User, lab.ClientKey, known)), 0600)
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0755)
	exec.Command("cp", "-a", filepath.Join(binDir, "olliesrv"), src).Run()
	exec.Command("cp", "-a", dataDir, filepath.Join(src, "data")).Run()

	var td, tr time.Duration
	for i := range b.N {
		freshHome(b, h)
		os.RemoveAll(filepath.Join(h.Home, "bench-rsync"))
		deploy := func() {
			t0 := time.Now()
			out, err := exec.Command(remoteBin, "-F", cfg, "-bin", binDir, "-data", dataDir, "deploy", "far").CombinedOutput()
			td += time.Since(t0)
			if err != nil {
				b.Fatalf("deploy: %v\n%s", err, out)
			}
		}
		rsync := func() {
			t0 := time.Now()
			out, err := exec.Command("rsync", "-a", "-e", "ssh -F "+cfg, src+"/", "far:bench-rsync/").CombinedOutput()
			tr += time.Since(t0)
			if err != nil {
				b.Fatalf("rsync: %v\n%s", err, out)
			}
		}
		if i%2 == 0 {
			deploy()
			rsync()
		} else {
			rsync()
			deploy()
		}
	}
	n := float64(b.N)
	b.ReportMetric(td.Seconds()/n, "deploy-s/op")
	b.ReportMetric(tr.Seconds()/n, "rsync-s/op")
	b.ReportMetric(td.Seconds()/tr.Seconds(), "deploy/rsync")
	b.ReportMetric(0, "ns/op")
}
