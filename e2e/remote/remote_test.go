package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/creack/pty"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/sshlab"
	"ollie/ns/client"
)

// The tests run the real binaries: ollie-remote (which starts its keeper
// by re-executing itself) and the static olliesrv it deploys.
var (
	binDir      string // olliesrv for this platform, as make build leaves it
	remoteBin   string // ollie-remote
	dataDir, _  = filepath.Abs("../../data")
	buildFailed error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ollie-remote-test-")
	if err != nil {
		panic(err)
	}
	binDir = filepath.Join(dir, "bin")
	remoteBin = filepath.Join(binDir, "ollie-remote")
	for _, b := range [][]string{{"olliesrv", "../../cmd/olliesrv"}, {"ollie-remote", "../../cmd/ollie-remote"}} {
		cmd := exec.Command("go", "build", "-buildvcs=false", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(binDir, b[0]), b[1])
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildFailed = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// remote runs ollie-remote with the lab's ssh config and a private
// directory for its sockets.
type remote struct {
	t   testing.TB
	lab *sshlab.Lab
	dir string // OLLIE_REMOTE_DIR
	bin string // -bin
}

func newRemote(t testing.TB, lab *sshlab.Lab) *remote {
	if buildFailed != nil {
		t.Fatal(buildFailed)
	}
	for _, h := range lab.Hosts {
		freshHome(t, h)
	}
	dir, err := os.MkdirTemp("", "or")
	if err != nil {
		t.Fatal(err)
	}
	r := &remote{t: t, lab: lab, dir: dir, bin: binDir}
	t.Cleanup(func() {
		r.run("down", "-all")
		os.RemoveAll(dir)
	})
	return r
}

func (r *remote) cmd(args ...string) *exec.Cmd {
	full := append([]string{"-F", r.lab.ConfigFile, "-bin", r.bin, "-data", dataDir}, args...)
	cmd := exec.Command(remoteBin, full...)
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "SSH_AUTH_SOCK=", "XDG_STATE_HOME="+filepath.Join(r.dir, "state"))
	return cmd
}

func (r *remote) run(args ...string) (string, error) {
	out, err := r.cmd(args...).CombinedOutput()
	return string(out), err
}

func (r *remote) must(args ...string) string {
	r.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		r.t.Fatalf("ollie-remote %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// stockHome gives a lab user a stock Debian home again: no ollie, no
// daemon running, the skeleton's .bashrc.
func stockHome(h *sshlab.Host) {
	exec.Command("pkill", "-KILL", "-u", h.User, "olliesrv").Run()
	for _, p := range []string{".local", ".config", ".bashrc", ".zshenv"} {
		os.RemoveAll(filepath.Join(h.Home, p))
	}
	if b, err := os.ReadFile("/etc/skel/.bashrc"); err == nil {
		os.WriteFile(filepath.Join(h.Home, ".bashrc"), b, 0644)
		os.Chown(filepath.Join(h.Home, ".bashrc"), h.UID, h.GID)
	}
}

// freshHome gives a lab user (shared with earlier runs) a stock Debian
// home again, with no daemon running.
func freshHome(t testing.TB, h *sshlab.Host) {
	stockHome(h)
	t.Cleanup(func() { exec.Command("pkill", "-KILL", "-u", h.User, "olliesrv").Run() })
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tableRow finds host's row in a deploy table.
func tableRow(out, host string) []string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == host {
			return f
		}
	}
	return nil
}

// checkDeployed compares every data file and the binary on a host with the
// desktop's.
func checkDeployed(t *testing.T, h *sshlab.Host, bin string) {
	t.Helper()
	root := filepath.Join(h.Home, ".local/share/ollie")
	cur, err := os.Readlink(filepath.Join(root, "current"))
	if err != nil {
		t.Fatalf("%s: no current link: %v", h.Name, err)
	}
	if got, want := sha(t, filepath.Join(root, cur, "olliesrv")), sha(t, bin); got != want {
		t.Errorf("%s: olliesrv hash %s, want %s", h.Name, got, want)
	}
	if cur != sha(t, bin)[:12] {
		t.Errorf("%s: current → %s, want the binary's hash prefix", h.Name, cur)
	}
	n := 0
	filepath.WalkDir(dataDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dataDir, p)
		remote := filepath.Join(root, "data", rel)
		if sha(t, remote) != sha(t, p) {
			t.Errorf("%s: data/%s differs", h.Name, rel)
		}
		lfi, _ := os.Stat(p)
		rfi, _ := os.Stat(remote)
		if lfi.Mode().Perm() != rfi.Mode().Perm() {
			t.Errorf("%s: data/%s mode %v, want %v", h.Name, rel, rfi.Mode().Perm(), lfi.Mode().Perm())
		}
		n++
		return nil
	})
	if n < 10 {
		t.Fatalf("only %d data files", n)
	}
	var leftovers []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".ollie-tmp-") {
			leftovers = append(leftovers, p)
		}
		return nil
	})
	if len(leftovers) > 0 {
		t.Errorf("%s: upload leftovers: %v", h.Name, leftovers)
	}
}

// olliesrvPids are the user's daemons (not their toolsrv children).
func olliesrvPids(t *testing.T, user string) []string {
	out, _ := exec.Command("pgrep", "-u", user, "-f", "olliesrv serve$").Output()
	return strings.Fields(string(out))
}

func TestDeploy(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 3, UserPrefix: "ordep"})
	r := newRemote(t, lab)
	bin := filepath.Join(binDir, "olliesrv")
	// A binary for another platform that must not be chosen.
	os.MkdirAll(filepath.Join(r.bin, "linux-arm64"), 0755)
	os.WriteFile(filepath.Join(r.bin, "linux-arm64", "olliesrv"), []byte("not for this host"), 0755)

	out := r.must("deploy", "h11", "h12", "h13")
	for _, h := range lab.Hosts {
		row := tableRow(out, h.Name)
		if row == nil || row[1] != "linux/amd64" && row[1] != "linux/arm64" || row[len(row)-1] != "ok" {
			t.Errorf("%s: table row %q\n%s", h.Name, row, out)
		}
		checkDeployed(t, h, bin)
		b, _ := os.ReadFile(filepath.Join(h.Home, ".bashrc"))
		if !strings.HasPrefix(string(b), "# added by ollie-remote") {
			t.Errorf("%s: .bashrc does not start with the PATH line:\n%.200s", h.Name, b)
		}
	}
	if !strings.Contains(out, "installed ~/.local/bin/ollie") || !strings.Contains(out, "put ~/.local/bin on PATH at the top of ~/.bashrc") {
		t.Errorf("deploy does not say what it changed:\n%s", out)
	}

	// A second deploy sends nothing.
	out = r.must("deploy", "h11", "h12", "h13")
	for _, h := range lab.Hosts {
		if row := tableRow(out, h.Name); row == nil || row[3] != "0" || !strings.Contains(strings.Join(row, " "), "up to date") {
			t.Errorf("%s: redeploy row %q\n%s", h.Name, row, out)
		}
	}

	checkDeployRepairs(t, r, lab, bin)

	// ssh host ollie, with the real OpenSSH client and no tty: the
	// daemon starts on first use and outlives the connection.
	if pids := olliesrvPids(t, lab.Host(0).User); len(pids) != 0 {
		t.Fatalf("olliesrv runs before first use: %v", pids)
	}
	ls, err := lab.SSH("h11", "ollie", "ls", "/").CombinedOutput()
	if err != nil || !strings.Contains(string(ls), "session/") {
		t.Fatalf("ssh h11 ollie ls /: %v\n%s", err, ls)
	}
	cmd := lab.SSH("h11", "ollie", "rdwr", "session/new")
	cmd.Stdin = strings.NewReader("name=kept")
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "kept" {
		t.Fatalf("ssh h11 ollie rdwr session/new: %v %q", err, out)
	}
	if out, err := lab.SSH("h11", "ollie", "ls", "session").CombinedOutput(); err != nil || !strings.Contains(string(out), "kept/") {
		t.Errorf("ssh h11 ollie ls session: %v %q", err, out)
	}
	interactive(t, lab)
	before := olliesrvPids(t, lab.Host(0).User)
	if len(before) != 1 {
		t.Fatalf("olliesrv processes after first use: %v", before)
	}

	// An upgrade: a new build (here the same program with other bytes)
	// becomes current, the daemon restarts on it, the session survives,
	// and one daemon runs.
	var versions []string
	for i := range 3 {
		nb := filepath.Join(t.TempDir(), "bin")
		os.MkdirAll(nb, 0755)
		data, _ := os.ReadFile(bin)
		os.WriteFile(filepath.Join(nb, "olliesrv"), append(data, fmt.Sprintf("\x00upgrade %d", i)...), 0755)
		r.bin = nb
		out = r.must("deploy", "h11")
		checkDeployed(t, lab.Host(0), filepath.Join(nb, "olliesrv"))
		versions = append(versions, sha(t, filepath.Join(nb, "olliesrv"))[:12])
		if i == 0 && !strings.Contains(out, "restarted olliesrv") {
			t.Errorf("the upgrade did not restart the daemon:\n%s", out)
		}
	}
	after := olliesrvPids(t, lab.Host(0).User)
	if len(after) != 1 || after[0] == before[0] {
		t.Errorf("olliesrv processes before the upgrades %v, after %v: want one, another", before, after)
	}
	if out, err := lab.SSH("h11", "ollie", "ls", "session").CombinedOutput(); err != nil || !strings.Contains(string(out), "kept/") {
		t.Errorf("the session did not survive the upgrade: %v %q", err, out)
	}
	ents, _ := os.ReadDir(filepath.Join(lab.Host(0).Home, ".local/share/ollie"))
	var kept []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "data" {
			kept = append(kept, e.Name())
		}
	}
	if len(kept) != 3 || !strings.Contains(strings.Join(kept, " "), versions[2]) {
		t.Errorf("versions kept on the host: %v, want 3 with %s", kept, versions[2])
	}
	lab.SSH("h11", ".local/share/ollie/current/olliesrv", "stop").Run()
}

// checkDeployRepairs damages h12's deployed data, removes a file of h13's
// and leaves it a stray tool and a retired skill: a deploy repairs the
// first two, removes the strays, sends h11 nothing, and says so.
func checkDeployRepairs(t *testing.T, r *remote, lab *sshlab.Lab, bin string) {
	t.Helper()
	h12, h13 := lab.Host(1), lab.Host(2)
	os.WriteFile(filepath.Join(h12.Home, ".local/share/ollie/data/tools/shell.meta"), []byte("{damaged"), 0644)
	os.Remove(filepath.Join(h13.Home, ".local/share/ollie/data/agents/default.json"))
	stray := filepath.Join(h13.Home, ".local/share/ollie/data/tools/stray.meta")
	os.WriteFile(stray, []byte("{}"), 0644)
	// A skill deleted on the desktop, in a folder of its own.
	straySkill := filepath.Join(h13.Home, ".local/share/ollie/data/skills/retired/SKILL.md")
	os.MkdirAll(filepath.Dir(straySkill), 0755)
	os.WriteFile(straySkill, []byte("---\nname: retired\ndescription: gone from the desktop\n---\n"), 0644)
	os.Chown(filepath.Dir(straySkill), h13.UID, h13.GID)
	os.Chown(straySkill, h13.UID, h13.GID)
	out := r.must("deploy", "h11", "h12", "h13")
	if row := tableRow(out, "h11"); row == nil || row[3] != "0" {
		t.Errorf("h11 sent something: %q", row)
	}
	for _, h := range []*sshlab.Host{h12, h13} {
		if row := tableRow(out, h.Name); row == nil || row[3] == "0" {
			t.Errorf("%s: nothing sent to repair it: %q\n%s", h.Name, row, out)
		}
		checkDeployed(t, h, bin)
	}
	if _, err := os.Stat(stray); err == nil {
		t.Error("a file no longer in data/ was left on the host")
	}
	if _, err := os.Stat(filepath.Dir(straySkill)); err == nil {
		t.Error("a skill no longer in data/skills was left on the host (or its folder)")
	}
	if !strings.Contains(out, "removed data/skills/retired/SKILL.md") {
		t.Errorf("deploy did not say it removed the retired skill:\n%s", out)
	}
}

func TestDeployErrors(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orerr"})
	r := newRemote(t, lab)

	// up on a host with nothing deployed says what to do.
	if out, err := r.run("up", "h12"); err == nil || !strings.Contains(out, "run ollie-remote deploy") || strings.Contains(out, "/bin/sh") {
		t.Errorf("up before deploy: %v\n%s", err, out)
	}

	// An unknown host key is refused with its fingerprint; --accept-new
	// adds it; a changed key is refused naming the file and line.
	known := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(known, nil, 0600)
	out, err := r.run("-known-hosts", known, "deploy", "h11")
	if err == nil || !strings.Contains(out, "SHA256:") || !strings.Contains(out, "--accept-new") {
		t.Errorf("unknown host: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(known); len(b) != 0 {
		t.Errorf("known_hosts written without --accept-new: %q", b)
	}
	r.must("-known-hosts", known, "-accept-new", "deploy", "h11")
	if b, _ := os.ReadFile(known); !strings.Contains(string(b), strings.Fields(lab.Host(0).HostKeyPub)[1]) {
		t.Errorf("known_hosts after --accept-new: %q", b)
	}
	r.must("-known-hosts", known, "deploy", "h11")

	other := strings.Fields(lab.Host(1).HostKeyPub)
	line := fmt.Sprintf("[%s]:%d %s %s\n", lab.Host(0).Addr, lab.Host(0).Port, other[0], other[1])
	os.WriteFile(known, []byte("# a comment\n"+line), 0600)
	out, err = r.run("-known-hosts", known, "-accept-new", "deploy", "h11")
	if err == nil || !strings.Contains(out, known+":2") && !regexp.MustCompile(regexp.QuoteMeta(known)+`.*line 2`).MatchString(out) {
		t.Errorf("changed host key: %v\n%s", err, out)
	}

	// A first connect that fails for a moment (sshd restarting) is tried
	// again.
	lab.Host(1).Stop()
	restarted := make(chan struct{})
	go func() {
		// The outage is the point: deploy's first connect finds no sshd.
		await.For(t.Context(), 300*time.Millisecond)
		lab.Host(1).Start()
		close(restarted)
	}()
	out, err = r.run("deploy", "h12")
	<-restarted
	if err != nil || !strings.Contains(out, "trying again") {
		t.Errorf("deploy while sshd restarts: %v\n%s", err, out)
	}

	// One host failing does not stop the others, and the table says so.
	out, err = r.run("deploy", "h12", "nosuchhost.invalid")
	if err == nil {
		t.Errorf("deploy with a bad host succeeded:\n%s", out)
	}
	if row := tableRow(out, "h12"); row == nil || row[6] != "ok," && row[6] != "ok" {
		t.Errorf("h12 row %q\n%s", row, out)
	}
	if row := tableRow(out, "nosuchhost.invalid"); row == nil || row[len(row)-1] != "FAILED" {
		t.Errorf("bad host row %q\n%s", row, out)
	}
	if strings.Contains(out, "nosuchhost.invalid: connecting failed") {
		t.Errorf("a name that does not resolve was tried again:\n%s", out)
	}
}

func TestDeployThroughProxyJump(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orjmp"})
	h12 := lab.Host(1)
	cfg, _ := os.ReadFile(lab.ConfigFile)
	// j12 is h12 reached through h11; its address is one h11 reaches.
	jump := fmt.Sprintf("Host j12\n  HostName %s\n  Port %d\n  User %s\n  ProxyJump h11\n  IdentityFile %s\n  UserKnownHostsFile %s\n",
		h12.Addr, h12.Port, h12.User, lab.ClientKey, lab.KnownHosts)
	file := filepath.Join(t.TempDir(), "config")
	os.WriteFile(file, append([]byte(jump), cfg...), 0600)
	r := newRemote(t, lab)
	t0 := time.Now()
	out, err := exec.Command(remoteBin, "-F", file, "-bin", r.bin, "-data", dataDir, "deploy", "j12").CombinedOutput()
	t.Logf("deploy took %v:\n%s", time.Since(t0), out)
	if err != nil {
		t.Fatalf("deploy through ProxyJump: %v\n%s", err, out)
	}
	checkDeployed(t, h12, filepath.Join(binDir, "olliesrv"))
	// Deploying to j12 logged in to h11, the jump host. (tunnel's
	// TestProxyJump checks the path itself, by who owns the socket.)
	if log, _ := os.ReadFile(lab.Host(0).Log); !bytes.Contains(log, []byte("Accepted publickey for "+lab.Host(0).User)) {
		t.Errorf("the jump host h11 saw no login:\n%s", log)
	}
}

// lineWatcher collects a stream and calls on for each new "line NNN" it
// sees.
type lineWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen int
	on   func(n int)
}

var lineRE = regexp.MustCompile(`line (\d{3})\n`)

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	ms := lineRE.FindAllSubmatch(w.buf.Bytes(), -1)
	var fresh []int
	for _, m := range ms[w.seen:] {
		n, _ := strconv.Atoi(string(m[1]))
		fresh = append(fresh, n)
	}
	w.seen = len(ms)
	w.mu.Unlock()
	for _, n := range fresh {
		w.on(n)
	}
	return len(p), nil
}

func TestUpResumesStream(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "orup"})
	r := newRemote(t, lab)
	h := lab.Host(0)
	r.must("deploy", "h11")

	// The host's agents use a scripted model on the desktop: a reply of
	// 300 numbered lines, streamed over about two seconds.
	llm := fakellm.Start(t)
	cfgDir := filepath.Join(h.Home, ".config", "ollie")
	os.MkdirAll(cfgDir, 0700)
	os.WriteFile(filepath.Join(cfgDir, "backends.json"),
		[]byte(`{"backends": {"fake": {"type": "openai", "url": "`+llm.URL+`/v1", "model": "fake-model"}}}`), 0600)
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), filepath.Join(h.Home, ".config")).Run()
	var chunks []string
	for i := range 300 {
		chunks = append(chunks, fmt.Sprintf("line %03d\n", i))
	}
	llm.Push(fakellm.Response{Text: chunks, Delay: 7 * time.Millisecond})

	out := r.must("up", "h11")
	if !strings.Contains(out, "up: ollie -H h11") {
		t.Fatalf("up said:\n%s", out)
	}
	sock := filepath.Join(r.dir, "h11.ns")
	c, err := client.DialAs(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.RdWr(ctx, "session/new", []byte("name=s")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RdWr(ctx, "session/s/agent/new", []byte("name=a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, "session/s/agent/a/prompt", []byte("count to 300")); err != nil {
		t.Fatal(err)
	}

	// Follow the chat; cut the SSH connection twice while it streams.
	kills := 0
	fctx, stop := context.WithCancel(ctx)
	w := &lineWatcher{on: func(n int) {
		if (n == 60 || n == 180) && kills < 2 {
			kills++
			if k := h.KillConnections(); k == 0 {
				t.Errorf("no ssh connection to kill at line %d", n)
			}
		}
		if n == 299 {
			stop()
		}
	}}
	err = c.Follow(fctx, "session/s/agent/a/chat", w)
	if ctx.Err() != nil {
		t.Fatalf("the stream did not finish: %v; got %d lines", err, w.seen)
	}
	var got []string
	for _, m := range lineRE.FindAllString(w.buf.String(), -1) {
		got = append(got, m)
	}
	if strings.Join(got, "") != strings.Join(chunks, "") {
		t.Errorf("after %d cuts the stream has %d numbered lines, want the 300 in order, once each:\n%s", kills, len(got), w.buf.String())
	}
	if kills != 2 {
		t.Errorf("%d cuts", kills)
	}

	klog, _ := os.ReadFile(filepath.Join(r.dir, "keeper.log"))
	if n := strings.Count(string(klog), "connection to the server lost"); n != 2 {
		t.Errorf("the keeper lost the namespace connection %d times, want 2:\n%s", n, klog)
	}
	// status shows the host; ollie -H reaches it.
	st := r.must("status", "h11")
	row := tableRow(st, "h11")
	if row == nil || row[3] != "1" || row[4] != "1" || !strings.Contains(st, "connected") {
		t.Errorf("status:\n%s", st)
	}
	ls := exec.Command(filepath.Join(binDir, "olliesrv"), "ollie", "-H", "h11", "ls", "session")
	ls.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir)
	if out, err := ls.CombinedOutput(); err != nil || !strings.Contains(string(out), "s/") {
		t.Errorf("ollie -H h11 ls session: %v %q", err, out)
	}

	// down stops forwarding and leaves the daemon; -stop-daemon stops it.
	c.Close()
	r.must("down", "h11")
	if _, err := os.Stat(sock); err == nil {
		t.Error("the socket is still there after down")
	}
	if pids := olliesrvPids(t, h.User); len(pids) != 1 {
		t.Errorf("daemons after down: %v", pids)
	}
	r.must("up", "h11")
	r.must("down", "-stop-daemon", "h11")
	if pids := olliesrvPids(t, h.User); len(pids) != 0 {
		t.Errorf("daemons after down -stop-daemon: %v", pids)
	}
}

// TestVariantsDifferByHost deploys the same .meta files to two hosts that
// differ in one capability (journalctl on PATH) and checks that each host
// resolves system_logs against its own.
func TestVariantsDifferByHost(t *testing.T) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orvar", Sshd: []string{"PermitUserEnvironment yes"}})
	r := newRemote(t, lab)
	h11, h12 := lab.Host(0), lab.Host(1)
	own := func(h *sshlab.Host, p string) {
		exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), p).Run()
	}
	// h11 has a journalctl first on its PATH.
	fake := filepath.Join(h11.Home, "fakebin")
	os.MkdirAll(fake, 0755)
	os.WriteFile(filepath.Join(fake, "journalctl"), []byte("#!/bin/sh\necho fake journal\n"), 0755)
	own(h11, fake)
	os.MkdirAll(filepath.Join(h11.Home, ".ssh"), 0700)
	os.WriteFile(filepath.Join(h11.Home, ".ssh", "environment"), []byte("PATH="+fake+":/usr/local/bin:/usr/bin:/bin\n"), 0600)
	own(h11, filepath.Join(h11.Home, ".ssh"))
	// h12's PATH has every command of this machine but journalctl.
	bin := filepath.Join(h12.Home, "pathbin")
	os.MkdirAll(bin, 0755)
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Name() != "journalctl" {
				os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(bin, e.Name()))
			}
		}
	}
	own(h12, bin)
	os.MkdirAll(filepath.Join(h12.Home, ".ssh"), 0700)
	os.WriteFile(filepath.Join(h12.Home, ".ssh", "environment"), []byte("PATH="+bin+"\n"), 0600)
	own(h12, filepath.Join(h12.Home, ".ssh"))

	r.must("deploy", "h11", "h12")
	tools := func(host string) string {
		out, err := lab.SSH(host, ".local/share/ollie/current/olliesrv", "tools").CombinedOutput()
		if err != nil {
			t.Fatalf("ssh %s olliesrv tools: %v\n%s", host, err, out)
		}
		return string(out)
	}
	logs := func(out string) string {
		i := strings.Index(out, "system_logs (")
		if i < 0 {
			t.Fatalf("no system_logs in:\n%s", out)
		}
		end := strings.Index(out[i:], "\n\n")
		if next := regexp.MustCompile(`\n[a-z_0-9]+ \(`).FindStringIndex(out[i+1:]); next != nil {
			end = next[0] + 1
		}
		if end < 0 {
			return out[i:]
		}
		return out[i : i+end]
	}
	a, b := logs(tools("h11")), logs(tools("h12"))
	t.Logf("h11:\n%s\nh12:\n%s", a, b)
	if !strings.Contains(a, "variants[0]") || !strings.Contains(a, "system_logs_journald") {
		t.Errorf("h11 (journalctl on PATH) resolved:\n%s", a)
	}
	if strings.Contains(b, "system_logs_journald") || !strings.Contains(b, `binary "journalctl" not found`) {
		t.Errorf("h12 (no journalctl) resolved:\n%s", b)
	}
}

// interactive runs "ssh -t h11 ollie" on a real terminal, lists the root
// and exits.
func interactive(t *testing.T, lab *sshlab.Lab) {
	t.Helper()
	cmd := lab.SSH("-t", "h11", "ollie")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	scr := watchTerminal(tty)
	waitFor := func(what string) { t.Helper(); scr.waitFor(t, what) }
	waitFor("ollie:/% ")
	tty.Write([]byte("ls session\r"))
	waitFor("kept/")
	tty.Write([]byte("exit\r"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ssh -t h11 ollie exited: %v", err)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Error("ssh -t h11 ollie did not exit after exit")
	}
}
