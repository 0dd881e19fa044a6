package remote

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/sshlab"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
)

// TestDeployArrivedDamaged damages files between the moment deploy hashes
// them and the moment the host commits them, as a bad link or disk would:
// what the host receives does not match the plan. The host refuses them,
// the version does not become current, and deploy sends them again; when
// they arrive damaged twice it fails saying so, leaving the host as it was.
func TestDeployArrivedDamaged(t *testing.T) {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "ordmg"})
	h := lab.Host(0)
	freshHome(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tunnel.Dial(ctx, h.Name, tunnel.Options{ConfigFile: lab.ConfigFile})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The desktop's files, where the test can change them behind
	// deploy's back.
	bins, data := t.TempDir(), t.TempDir()
	copyTree(t, dataDir, data)
	orig, err := os.ReadFile(filepath.Join(binDir, "olliesrv"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(bins, "olliesrv")
	meta := filepath.Join(data, "tools", "shell.meta")
	goodMeta, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(h.Home, ".local/share/ollie")
	plat := runtime.GOOS + "/" + runtime.GOARCH

	// progress records what deploy says, and runs then (once) when deploy
	// says it sends the damaged files again.
	type progress struct {
		mu    sync.Mutex
		said  []string
		then  func()
		retry bool
	}
	say := func(p *progress) func(string) {
		return func(s string) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.said = append(p.said, s)
			if strings.Contains(s, "arrived damaged, sending them again") {
				p.retry = true
				if p.then != nil {
					p.then()
					p.then = nil
				}
			}
		}
	}

	// Damaged once: the binary (a byte appended: it still runs, and runs
	// its own commit) and a data file. The retry sends them whole.
	os.WriteFile(bin, orig, 0755)
	b, err := deploy.LoadBundle(bins, data, plat)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, append(append([]byte(nil), orig...), 0), 0755)
	os.WriteFile(meta, append(append([]byte(nil), goodMeta...), '#'), 0644)
	p := &progress{then: func() {
		os.WriteFile(bin, orig, 0755)
		os.WriteFile(meta, goodMeta, 0644)
	}}
	res := deploy.Push(ctx, c, b, 3, deploy.Deadlines{}, say(p))
	if res.Err != "" || !p.retry {
		t.Fatalf("deploy with files damaged once: err %q, retried %v, said %q", res.Err, p.retry, p.said)
	}
	checkDeployed(t, h, bin)
	ver := deploy.VersionOf(b.Bins[plat])

	// Damaged every time: a new version, and a changed data file.
	next := append(append([]byte(nil), orig...), "\x00next"...)
	os.WriteFile(bin, next, 0755)
	os.WriteFile(meta, append(append([]byte(nil), goodMeta...), '\n'), 0644)
	b, err = deploy.LoadBundle(bins, data, plat)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, append(next, 0), 0755)
	os.WriteFile(meta, append(append([]byte(nil), goodMeta...), "\n#"...), 0644)
	p = &progress{}
	res = deploy.Push(ctx, c, b, 3, deploy.Deadlines{}, say(p))
	if !strings.Contains(res.Err, "arrived damaged twice") || !strings.Contains(res.Err, "data/tools/shell.meta") || !p.retry {
		t.Errorf("deploy with files damaged every time: err %q, retried %v: want it to fail after one retry, naming the files", res.Err, p.retry)
	}
	if cur, _ := os.Readlink(filepath.Join(root, "current")); cur != ver {
		t.Errorf("current → %q after damaged uploads, want %q still", cur, ver)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "data/tools/shell.meta")); string(got) != string(goodMeta) {
		t.Errorf("the host's data/tools/shell.meta is now %q, want what was deployed before", got)
	}
	newVer := deploy.VersionOf(b.Bins[plat])
	if _, err := os.Stat(filepath.Join(root, newVer, "olliesrv")); err == nil {
		t.Errorf("the damaged binary was committed as %s/olliesrv", newVer)
	}
	os.WriteFile(meta, goodMeta, 0644)
	os.WriteFile(bin, orig, 0755)
	checkDeployed(t, h, bin)
}
