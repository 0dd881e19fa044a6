package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/sshlab"
	"ollie/tunnel/fleet"
)

// fleetLab is n lab hosts whose agents' model is the scripted one here,
// answering each conversation on its own: a first call runs `id -un` in
// the shell tool, the answer after it names the user it printed, so that
// each host's answer is its own.
func fleetLab(t *testing.T, prefix string, n int, think time.Duration) (*remote, *fakellm.Server) {
	return fleetLabOf(t, sshlab.Config{Hosts: n, UserPrefix: prefix}, think)
}

func fleetLabOf(t *testing.T, cfg sshlab.Config, think time.Duration) (*remote, *fakellm.Server) {
	lab := sshlab.Start(t, cfg)
	r := newRemote(t, lab)
	llm := fakellm.Start(t)
	llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" {
			return fakellm.Response{Text: []string{"checked as ", strings.TrimSpace(last.Text()), "\nall is well"}, Delay: think / 3}
		}
		return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"command": "id -un"}`}}, Delay: think}
	})
	for _, h := range lab.Hosts {
		cfgDir := filepath.Join(h.Home, ".config", "ollie")
		os.MkdirAll(cfgDir, 0700)
		os.WriteFile(filepath.Join(cfgDir, "backends.json"),
			[]byte(`{"backends": {"fake": {"type": "openai", "url": "`+llm.URL+`/v1", "model": "fake-model"}}}`), 0600)
		exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), filepath.Join(h.Home, ".config")).Run()
	}
	return r, llm
}

// jsonResults reads fleet run -json's output: one object per host.
func jsonResults(t *testing.T, out string) map[string]fleet.JSONHost {
	t.Helper()
	got := map[string]fleet.JSONHost{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var j fleet.JSONHost
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("a -json line does not parse: %v: %q", err, line)
		}
		got[j.Host] = j
	}
	return got
}

var runIDRE = regexp.MustCompile(`\br[a-z2-9]{8}\b`)

// TestFleetRun: one goal on three lab hosts and an address where nothing
// listens. Each lab host deploys, runs its agent (a tool call, then an
// answer of its own) and finishes; the dead address is unreachable and
// alone in failing; the exit status says so, the run is kept, and
// ls and status show it.
func TestFleetRun(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orflt", 3, 0)
	cmd := r.cmd("fleet", "run", "-json", "-connect-timeout", "5s", "h11,h12,h13,127.0.0.1:1", "check who runs here")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("fleet run with one unreachable host: %v (want exit status 1)\n%s", err, out)
	}
	res := jsonResults(t, string(out))
	if len(res) != 4 {
		t.Fatalf("%d JSON results, want 4:\n%s", len(res), out)
	}
	for i, h := range []string{"h11", "h12", "h13"} {
		j := res[h]
		user := fmt.Sprintf("orflt%d", 11+i)
		if j.Result != "done" || !strings.Contains(j.Answer, "checked as "+user) || j.Steps != 2 || j.ToolCalls != 1 || j.Tokens == 0 || j.Version == "" {
			t.Errorf("%s: %+v; want done, its own answer (checked as %s), 2 steps, 1 tool call, tokens counted, the version deployed", h, j, user)
		}
	}
	if j := res["127.0.0.1:1"]; j.Result != "unreachable" || !strings.Contains(j.Error, "refused") {
		t.Errorf("the dead address: %+v; want unreachable, saying the connection was refused", j)
	}
	id := runIDRE.FindString(res["h11"].Run)
	if id == "" {
		t.Fatalf("no run ID in the results: %+v", res["h11"])
	}

	ls := r.must("fleet", "ls")
	if !strings.Contains(ls, id) || !strings.Contains(ls, "finished") || !strings.Contains(ls, "check who runs here") {
		t.Errorf("fleet ls does not list run %s as finished:\n%s", id, ls)
	}
	st, err := r.run("fleet", "status", id)
	if err == nil {
		t.Errorf("fleet status of a run with an unreachable host exited 0")
	}
	for _, h := range []string{"h11", "h12", "h13"} {
		row := tableRow(st, h)
		if len(row) < 2 || row[1] != "done" {
			t.Errorf("fleet status: %s's row is %q:\n%s", h, row, st)
		}
	}
	// On each host, the session is named after the run.
	for i := range 3 {
		h := r.lab.Host(i)
		ls, err := r.lab.SSH(fmt.Sprintf("h%d", 11+i), ".local/bin/ollie", "ls", "session").CombinedOutput()
		if err != nil || !strings.Contains(string(ls), "fleet-"+id) {
			t.Errorf("%s: no session fleet-%s: %v\n%s", h.User, id, err, ls)
		}
	}
}

// TestFleetLines: without a terminal, a host-prefixed line per change of
// state; with -follow, every line of every host's chat too; then the
// results table, and under it why h12 is degraded (its user's login
// shell, dash, reads no file for ssh commands).
func TestFleetLines(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLabOf(t, sshlab.Config{Hosts: 2, UserPrefix: "orfll", Shell: map[int]string{1: "/bin/dash"}}, 300*time.Millisecond)
	out := r.must("fleet", "run", "-follow", "h11,h12", "check who runs here")
	for _, want := range []string{"h11: [connecting]", "h12: [thinking]", "h11: [done in ", "h11| → shell", "h12| checked as orfll12",
		"HOST", "RESULT", "TOOL CALLS"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet run -follow printed no %q:\n%s", want, out)
		}
	}
	row := tableRow(out, "h12")
	if len(row) < 7 || row[1] != "done" || row[3] != "2" || row[4] != "1" {
		t.Errorf("the results row of h12 is %q, want done with 2 steps and 1 tool call:\n%s", row, out)
	}
	if !strings.Contains(out, "h12: degraded: ssh h12 ollie is not found") || !strings.Contains(out, "ssh h12 .local/bin/ollie") || strings.Contains(out, "h11: degraded") {
		t.Errorf("the table does not say h12 (and only h12) is degraded, and what to type:\n%s", out)
	}
}

// startFleet starts fleet run in the background and returns its output as
// it comes and a channel that yields its exit once it ended.
func startFleet(t *testing.T, r *remote, args ...string) (*output, *exec.Cmd, chan error) {
	t.Helper()
	cmd := r.cmd(append([]string{"fleet", "run"}, args...)...)
	lw := &output{}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return lw, cmd, done
}

// waitOutput waits until out holds every one of want.
func waitOutput(t *testing.T, lw *output, within time.Duration, want ...string) {
	t.Helper()
	await.Until(t, within, fmt.Sprintf("fleet run printed not all of %q", want), func() bool {
		s := lw.String()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}, lw.String)
}

// output is a command's output as it comes.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestFleetDetachAttach: a run detached (two Ctrl-C 0.3 s apart, as a
// person presses them: issue 31) goes on on the hosts, not interrupted;
// with the keeper killed meanwhile, fleet attach picks the run up from
// its record and sees every host finish.
func TestFleetDetachAttach(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orfla", 2, 1500*time.Millisecond)
	lw, cmd, done := startFleet(t, r, "h11,h12", "check who runs here")
	waitOutput(t, lw, time.Minute, "h11: [thinking]", "h12: [thinking]")
	cmd.Process.Signal(os.Interrupt)
	// The gap between the two presses is the point: a person's, not a
	// machine's.
	await.For(t.Context(), 300*time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	if err := <-done; err != nil {
		t.Fatalf("a detached run exited %v:\n%s", err, lw)
	}
	id := runIDRE.FindString(lw.String())
	if !strings.Contains(lw.String(), "detached: the agents go on; ollie-remote fleet attach "+id) {
		t.Errorf("a detach does not say how to come back:\n%s", lw)
	}
	// The keeper goes too, as after a reboot of the desktop.
	exec.Command("pkill", "-KILL", "-f", "__keeper -dir "+r.dir).Run()
	await.Until(t, 10*time.Second, "the keeper outlived its kill", func() bool {
		return exec.Command("pgrep", "-f", "__keeper -dir "+r.dir).Run() != nil
	})
	out, err := r.run("fleet", "attach", id)
	if err != nil {
		t.Fatalf("fleet attach %s: %v\n%s\nthe run before:\n%s", id, err, out, lw)
	}
	for _, h := range []string{"h11", "h12"} {
		row := tableRow(out, h)
		if len(row) < 7 || row[1] != "done" || !strings.Contains(out, "checked as orfla"+h[1:]) {
			t.Errorf("after attach, %s's row is %q:\n%s", h, row, out)
		}
	}
	if ls := r.must("fleet", "ls"); !strings.Contains(ls, id) || !strings.Contains(ls, "finished") {
		t.Errorf("fleet ls after the attach:\n%s", ls)
	}
}

// TestFleetInterrupt: Ctrl-C once stops every agent of the run, says so,
// and the results say interrupted.
func TestFleetInterrupt(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orfli", 2, 3*time.Second)
	// The hosts as separate words (issue 31): both are targets, and the
	// goal is the last word alone.
	lw, cmd, done := startFleet(t, r, "h11", "h12", "check who runs here")
	waitOutput(t, lw, time.Minute, "h11: [thinking]", "h12: [thinking]")
	cmd.Process.Signal(os.Interrupt)
	err := <-done
	if exitCode(err) != 1 {
		t.Errorf("an interrupted run exited %v, want 1", err)
	}
	if !strings.Contains(lw.String(), "interrupting every agent of run") {
		t.Errorf("Ctrl-C did not say it interrupts the agents:\n%s", lw)
	}
	for _, h := range []string{"h11", "h12"} {
		if row := tableRow(lw.String(), h); len(row) < 2 || row[1] != "interrupted" {
			t.Errorf("%s's row is %q, want interrupted:\n%s", h, row, lw)
		}
	}
	if ls := r.must("fleet", "ls"); !strings.HasSuffix(strings.TrimSpace(ls), "\tcheck who runs here") && !strings.HasSuffix(strings.TrimSpace(ls), " check who runs here") || strings.Contains(ls, "h12 check") {
		t.Errorf("the run's goal is not the last word alone:\n%s", ls)
	}
}

// TestFleetHostTrouble: what one host suffers stays its own. h12 goes
// down mid-run and is reported lost; h13's daemon is killed mid-run and
// the run picks its durable session up and finishes it; h14's host key
// changed and it fails saying so; h11 finishes as if nothing happened.
func TestFleetHostTrouble(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orflx", 4, 2*time.Second)
	// h14 now answers with another key than known_hosts holds: h11's.
	kh, _ := os.ReadFile(r.lab.KnownHosts)
	h14 := r.lab.Host(3)
	os.WriteFile(r.lab.KnownHosts, []byte(strings.ReplaceAll(string(kh), h14.HostKeyPub, r.lab.Host(0).HostKeyPub)), 0644)

	lw, _, done := startFleet(t, r, "-follow", "-lost-after", "4s", "h11,h12,h13,h14", "check who runs here")
	waitOutput(t, lw, time.Minute, "h12: [thinking]", "h13: [thinking]")
	r.lab.Host(1).Stop()
	exec.Command("pkill", "-KILL", "-u", r.lab.Host(2).User, "olliesrv").Run()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run did not end:\n%s", lw)
	}
	out := lw.String()
	if exitCode(err) != 1 {
		t.Errorf("a run with a lost host exited %v, want 1", err)
	}
	for h, want := range map[string]string{"h11": "done", "h12": "lost", "h13": "done", "h14": "failed"} {
		if row := tableRow(out, h); len(row) < 2 || row[1] != want {
			t.Errorf("%s's row is %q, want %s", h, row, want)
		}
	}
	for _, want := range []string{"h13: olliesrv restarted during the run; its session was picked up", "checked as orflx13", "host key"} {
		if !strings.Contains(out, want) {
			t.Errorf("the run's output has no %q", want)
		}
	}
	// -follow passes h13's chat on across its daemon's restart: its
	// answer once (issue 30).
	if n := strings.Count(out, "h13| checked as orflx13"); n != 1 {
		t.Errorf("-follow passed h13's answer on %d times, want once", n)
	}
	if t.Failed() {
		t.Logf("the run:\n%s", out)
	}
}

// TestFleetAskBecomePass: a run on three hosts whose agents each call a
// sudo tool. At a terminal, the run asks the sudo password once (-K); the
// three hosts' requests come as one list, approved for every listed host
// at once; each host's sudo gets the password from the run's memory. After
// the run the password is on no host: no file, no process's argv or
// environment.
func TestFleetAskBecomePass(t *testing.T) {
	// Not in parallel: it answers prompts at a real terminal, on time.
	pwb := make([]byte, 12)
	rand.Read(pwb)
	password := "Pw-" + hex.EncodeToString(pwb)
	lab := sshlab.Start(t, sshlab.Config{Hosts: 3, UserPrefix: "orflk", Password: password, Sudoers: true})
	r := newRemote(t, lab)
	data := copyData(t, map[string]string{
		"root_id.meta": `{"description": "Print the user id the tool runs as.", "sudo": true, "readOnly": true}`,
		"root_id":      "#!/bin/sh\nid -u\n",
	})
	llm := fakellm.Start(t)
	// The three tool calls are held until the three hosts asked, so that
	// their approvals arrive together.
	var mu sync.Mutex
	asked := 0
	all := make(chan struct{})
	llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" {
			return fakellm.Text("uid " + strings.TrimSpace(last.Text()))
		}
		mu.Lock()
		if asked++; asked == 3 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(30 * time.Second):
		}
		return fakellm.ToolCall("root_id", `{}`)
	})
	for _, h := range lab.Hosts {
		cfgDir := filepath.Join(h.Home, ".config", "ollie")
		os.MkdirAll(cfgDir, 0700)
		os.WriteFile(filepath.Join(cfgDir, "backends.json"),
			[]byte(`{"backends": {"fake": {"type": "openai", "url": "`+llm.URL+`/v1", "model": "fake-model"}}}`), 0600)
		exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), filepath.Join(h.Home, ".config")).Run()
	}

	cmd := r.cmd("fleet", "run", "-ask-become-pass", "h11,h12,h13", "who am I as root?")
	cmd.Args[6] = data // -data
	cmd.Env = append(cmd.Env, "NO_COLOR=1")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 140})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	scr := watchTerminal(tty)
	scr.waitFor(t, "BECOME password for run ")
	tty.Write([]byte(password + "\r"))
	waitScreen(t, scr, time.Minute, "[e]very listed host (3)")
	tty.Write([]byte("e\r"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run did not end:\n%s", scr)
	}
	if err != nil {
		t.Errorf("the run exited %v", err)
	}
	// The terminal's last bytes may still be on their way to the reader.
	rowsDone := func(screen string) bool {
		for _, h := range []string{"h11", "h12", "h13"} {
			if row := tableRow(strings.ReplaceAll(screen, "\r", ""), h); len(row) < 8 {
				return false
			}
		}
		return true
	}
	rowsCtx, rowsCancel := context.WithTimeout(t.Context(), 5*time.Second)
	await.Poll(rowsCtx, func() bool { return rowsDone(scr.String()) })
	rowsCancel()
	screen := scr.String()
	for _, h := range []string{"h11", "h12", "h13"} {
		if row := tableRow(strings.ReplaceAll(screen, "\r", ""), h); len(row) < 7 || row[1] != "done" || row[6] != "uid" || row[7] != "0" {
			t.Errorf("%s's row is %q, want done with the answer uid 0", h, row)
		}
	}
	if n := strings.Count(screen, "sudo password for"); n != 0 {
		t.Errorf("a host's password was asked %d times on the terminal, want none (-K)", n)
	}
	if strings.Contains(screen, password) {
		t.Error("the password was echoed on the terminal")
	}
	if t.Failed() {
		t.Logf("the terminal:\n%s", screen)
	}
	r.must("down", "-stop-daemon", "-all")
	for _, h := range lab.Hosts {
		searchFor(t, password, h.Home)
	}
	searchFor(t, password, "/tmp", "/var/log", r.dir)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(b, []byte(password)) {
				t.Errorf("the password is in %s/%s", p, f)
			}
		}
	}
}

// waitScreen waits for what to appear on a terminal.
func waitScreen(t *testing.T, scr *terminalScreen, within time.Duration, what string) {
	t.Helper()
	await.Until(t, within, fmt.Sprintf("the terminal showed no %q", what), func() bool {
		return strings.Contains(scr.String(), what)
	}, scr.String)
}

// TestFleetInventory: hosts known only to an Ansible inventory (address,
// port, user and key in its vars; the ssh config has no entry for them)
// run a goal by group, with no -known-hosts; an empty group and a
// pattern that matches nothing are usage errors that name them.
func TestFleetInventory(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orfly", 3, 0)
	var b strings.Builder
	b.WriteString("[web]\n")
	for i, h := range r.lab.Hosts {
		if i == 2 {
			b.WriteString("[db]\n")
		}
		fmt.Fprintf(&b, "%s-%c ansible_host=%s ansible_port=%d ansible_user=%s ansible_ssh_private_key_file=%s\n",
			map[bool]string{true: "db", false: "web"}[i == 2], 'a'+rune(i), h.Addr, h.Port, h.User, r.lab.ClientKey)
	}
	b.WriteString("[prod:children]\nweb\ndb\n[empty]\n")
	inv := filepath.Join(t.TempDir(), "hosts.ini")
	os.WriteFile(inv, []byte(b.String()), 0644)

	fleetCmd := func(args ...string) (string, int) {
		// No -known-hosts: the hosts' keys are in the known_hosts file
		// the ssh config names for its own hosts (issue 31, item 3).
		cmd := r.cmd(append([]string{"fleet", "run", "-i", inv}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	out, code := fleetCmd("-json", "@web", "check who runs here")
	res := jsonResults(t, out)
	if code != 0 || len(res) != 2 {
		t.Fatalf("fleet run -i %s @web: exit %d, %d results, want 0 and 2:\n%s", inv, code, len(res), out)
	}
	for i, h := range []string{"web-a", "web-b"} {
		if j := res[h]; j.Result != "done" || !strings.Contains(j.Answer, fmt.Sprintf("checked as orfly%d", 11+i)) {
			t.Errorf("%s: %+v", h, j)
		}
	}
	out, code = fleetCmd("@prod", "check who runs here")
	if code != 0 || !strings.Contains(out, "on 3 hosts (hosts from ") || !strings.Contains(out, "db-c") {
		t.Errorf("@prod (web and db as children): exit %d\n%s", code, out)
	}
	for _, bad := range []string{"@empty", "nope*"} {
		out, code := fleetCmd(bad, "check who runs here")
		if code != 2 || !strings.Contains(out, strings.TrimPrefix(bad, "@")) {
			t.Errorf("fleet run %s: exit %d, want 2 with an error naming it:\n%s", bad, code, out)
		}
	}
}

// TestFleetThroughBusyBastion: five hosts reached through one jump host
// whose sshd takes one unauthenticated connection at a time (MaxStartups
// 1; the others are dropped at once): every host still runs, since a
// refused handshake is retried after a jittered wait rather than failing
// the host. How many were dropped is logged: it depends on how the
// handshakes overlapped.
func TestFleetThroughBusyBastion(t *testing.T) {
	// Not in parallel: it restarts its bastion's sshd on the same port, which a lab starting beside it may take.
	r, _ := fleetLab(t, "orflm", 6, 0)
	// h11 is the bastion for h12…h16; only it is strict.
	cfg, _ := os.ReadFile(r.lab.Host(0).SshdConfig)
	os.WriteFile(r.lab.Host(0).SshdConfig, append([]byte("MaxStartups 1\n"), cfg...), 0644)
	r.lab.Host(0).Restart()
	var b strings.Builder
	for i := 1; i < 6; i++ {
		h := r.lab.Host(i)
		fmt.Fprintf(&b, "via-%d ansible_host=%s ansible_port=%d ansible_user=%s ansible_ssh_private_key_file=%s ansible_ssh_common_args='-J h11'\n",
			i, h.Addr, h.Port, h.User, r.lab.ClientKey)
	}
	inv := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(inv, []byte("[behind]\n"+b.String()), 0644)
	out, err := r.cmd("-known-hosts", r.lab.KnownHosts, "fleet", "run", "-json", "-i", inv, "@behind", "check who runs here").CombinedOutput()
	res := jsonResults(t, string(out))
	if err != nil || len(res) != 5 {
		t.Fatalf("fleet run through the bastion: %v, %d results:\n%s", err, len(res), out)
	}
	for i := 1; i < 6; i++ {
		if j := res[fmt.Sprintf("via-%d", i)]; j.Result != "done" || !strings.Contains(j.Answer, fmt.Sprintf("orflm%d", 11+i)) {
			t.Errorf("via-%d: %+v", i, j)
		}
	}
	log, _ := os.ReadFile(r.lab.Host(0).Log)
	t.Logf("the bastion dropped %d connections past MaxStartups", bytes.Count(log, []byte("past MaxStartups")))
}

// TestFleetStop: fleet stop interrupts the agents of a run nobody
// watches; the run is kept as stopped.
func TestFleetStop(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orfls", 2, 4*time.Second)
	lw, cmd, done := startFleet(t, r, "h11,h12", "check who runs here")
	waitOutput(t, lw, time.Minute, "h11: [thinking]", "h12: [thinking]")
	cmd.Process.Signal(syscall.SIGTERM)
	<-done
	id := runIDRE.FindString(lw.String())
	out, err := r.run("fleet", "stop", id)
	if err != nil || !strings.Contains(out, "run "+id+" stopped") {
		t.Fatalf("fleet stop %s: %v\n%s", id, err, out)
	}
	for _, h := range []string{"h11", "h12"} {
		if row := tableRow(out, h); len(row) < 2 || row[1] != "interrupted" {
			t.Errorf("%s's row after stop: %q", h, row)
		}
		st, err := r.lab.SSH(h, ".local/bin/ollie", "read", "session/fleet-"+id+"/agent/a/state").CombinedOutput()
		if err != nil || strings.TrimSpace(string(st)) != "idle" {
			t.Errorf("%s's agent after stop: %q %v, want idle", h, st, err)
		}
	}
	if ls := r.must("fleet", "ls"); !strings.Contains(ls, id) || !strings.Contains(ls, "stopped") {
		t.Errorf("fleet ls after stop:\n%s", ls)
	}
}

// TestFleetNamespace: after a run, the desktop's namespace (ollie -H
// fleet) shows the hosts, the run, and every host's namespace under
// host/NAME, which a glob reads across; a session made there with
// remote=HOST runs on that host, and the index says so.
func TestFleetNamespace(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	r, _ := fleetLab(t, "orfln", 2, 0)
	out := r.must("fleet", "run", "-json", "h11,h12", "check who runs here")
	id := runIDRE.FindString(out)
	ollie := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(binDir, "olliesrv"), append([]string{"ollie", "-H", "fleet"}, args...)...)
		cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "XDG_STATE_HOME="+filepath.Join(r.dir, "state"))
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	got, err := ollie("read", "host/*/session/*/agent/*/state")
	want := fmt.Sprintf("host/h11/session/fleet-%s/agent/a/state: idle\nhost/h12/session/fleet-%s/agent/a/state: idle\n", id, id)
	if err != nil || got != want {
		t.Errorf("ollie -H fleet read 'host/*/session/*/agent/*/state': %v\n%s\nwant:\n%s", err, got, want)
	}
	if got, err := ollie("read", "host/idx"); err != nil || !strings.Contains(got, "h11\tconnected\t") || !strings.Contains(got, "h12\tconnected\t") {
		t.Errorf("host/idx: %v\n%s", err, got)
	}
	if got, err := ollie("read", "run/"+id+"/status"); err != nil || !strings.Contains(got, "state finished\n") || !strings.Contains(got, "finished 2\n") {
		t.Errorf("run/%s/status: %v\n%s", id, err, got)
	}
	cmd := exec.Command(filepath.Join(binDir, "olliesrv"), "ollie", "-H", "fleet", "rdwr", "session/new")
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir)
	cmd.Stdin = strings.NewReader("name=adhoc remote=h12")
	if b, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "adhoc" {
		t.Fatalf("session/new remote=h12: %v %s", err, b)
	}
	idx, err := ollie("read", "session/idx")
	if err != nil || !strings.Contains(idx, "\tadhoc\tfalse\ttrue\th12\t") || !strings.Contains(idx, "\tfleet-"+id+"\tfalse\ttrue\th11\t") {
		t.Errorf("session/idx: %v\n%s", err, idx)
	}
	if b, err := r.lab.SSH("h12", ".local/bin/ollie", "ls", "session/adhoc").CombinedOutput(); err != nil {
		t.Errorf("h12 has no session adhoc: %v %s", err, b)
	}
}
