package remote

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/ns/client"
)

// Issue 30: the keeper keeps its hosts' daemons running. These run real
// sshd hosts, the real keeper and olliesrv (sudoLab, reregister_test.go).

// lockPID is the pid the host's namespace lock names, if that process
// lives; 0 otherwise.
func lockPID(hostSock string) int {
	b, err := os.ReadFile(hostSock + ".lock")
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == 0 {
		return 0
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return 0
	}
	return pid
}

// backWithBroker waits until a daemon other than old answers on hostSock
// and lists a broker, and returns how long that took.
func backWithBroker(t *testing.T, hostSock string, old int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	await.Until(t, within, fmt.Sprintf("no daemon with a broker on the host after pid %d's end", old), func() bool {
		bs, pid, err := brokers(hostSock)
		return err == nil && pid != 0 && pid != old && len(bs) > 0
	})
	return time.Since(start)
}

func keeperLog(r *remote) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "keeper.log"))
	return string(b)
}

// A held host's olliesrv, SIGKILLed, is started again by the keeper and
// its approvals registered again within 2 s; status says so, with the
// cause. Then a daemon killed as soon as it starts, again and again: the
// keeper starts it at once three times, then less and less often, and
// logs the crash loop once.
func TestKeeperRestartsDeadDaemon(t *testing.T) {
	_, writePolicy := testPolicy(t)
	writePolicy("budget:\n  prompts_per_minute: 1000\n")
	s := newSudoLab(t, "orrst", 1)
	r := s.remotes[0]
	s.up(0)
	ns := filepath.Join(r.dir, "h11.ns")
	hostSock, pid := s.start()
	s.sudo(ns, "before", 0, 60*time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("keeper.log:\n%s", keeperLog(r))
		}
	}()

	// Nobody but the keeper starts it: no ollie command, no client.
	syscall.Kill(pid, syscall.SIGKILL)
	took := backWithBroker(t, hostSock, pid, 30*time.Second)
	t.Logf("SIGKILL to a new daemon with approvals registered: %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the daemon came back with approvals %v after its SIGKILL, want within 2s (3s allowed on a loaded machine)", took)
	}
	s.sudo(ns, "after", 0, 60*time.Second)
	out := r.must("status", "h11")
	if !strings.Contains(out, "olliesrv started again 1 time,") || !strings.Contains(out, fmt.Sprintf("olliesrv (pid %d) died without shutting down", pid)) {
		t.Errorf("status after one restart:\n%s", out)
	}
	if cell, row := approvalsColumn(t, r); cell != "ok" {
		t.Errorf("approvals after the restart: %q", row)
	}

	// The crash loop: for 20 s, every new daemon killed once it answers
	// (or after 5 s). A start is when its process began: a killed one
	// may linger as a zombie a while, so that is not when the next is
	// seen.
	var starts, kills []time.Time
	old := lockPID(hostSock)
	syscall.Kill(old, syscall.SIGKILL)
	kills = append(kills, time.Now())
	loop, endLoop := context.WithTimeout(t.Context(), 20*time.Second)
	defer endLoop()
	for {
		var p int
		var age time.Duration
		if !await.Poll(loop, func() bool {
			var err error
			p = lockPID(hostSock)
			if p == 0 || p == old {
				return false
			}
			age, err = procAge(p)
			return err == nil
		}) {
			break
		}
		starts = append(starts, time.Now().Add(-age))
		answers, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		await.Poll(answers, func() bool { _, answering, _ := brokers(hostSock); return answering == p })
		cancel()
		syscall.Kill(p, syscall.SIGKILL)
		kills = append(kills, time.Now())
		old = p
	}
	syscall.Kill(old, syscall.SIGKILL)
	var after []string
	for i := range starts {
		after = append(after, starts[i].Sub(kills[i]).Round(10*time.Millisecond).String())
	}
	t.Logf("a daemon killed once it answers, for 20 s: %d starts, each this long after the kill before: %s", len(starts), strings.Join(after, " "))
	// The restart above was the first of three at once in a minute, so
	// two more at once, then 2 s, 4 s, 8 s between: 5 in 20 s, where at
	// once every time would be dozens.
	if len(starts) < 4 || len(starts) > 7 {
		t.Errorf("%d starts in 20 s of a crash loop, want 4 to 7", len(starts))
	}
	for i := range starts {
		if d := starts[i].Sub(kills[i]); i <= 1 && d > 2*time.Second {
			t.Errorf("start %d came %v after its kill, want at once (2 s allowed)", i+1, d)
		}
		if i >= 2 && i <= 4 {
			if gap, want := starts[i].Sub(starts[i-1]), time.Second<<(i-1); gap < want*9/10 {
				t.Errorf("start %d came %v after the one before, want a backoff of %v", i+1, gap, want)
			}
		}
	}
	if n := strings.Count(keeperLog(r), "is in a crash loop"); n != 1 {
		t.Errorf("the crash loop was logged %d times, want once", n)
	}
	out = r.must("status", "h11")
	if !strings.Contains(out, "died without shutting down") || !strings.Contains(out, "crash loop") {
		t.Errorf("status in the crash loop:\n%s", out)
	}
	// Left alone, it comes back after the backoff (30 s at most).
	backWithBroker(t, hostSock, old, 60*time.Second)
	s.sudo(ns, "after-loop", 0, 60*time.Second)
}

// A daemon that cannot start again (its configuration broke while it
// ran) is tried again, and status says why it failed in the daemon's own
// words; mended, it is back within the 2 s between tries.
func TestKeeperRestartFailureSaysWhy(t *testing.T) {
	s := newSudoLab(t, "orrst3", 1)
	r := s.remotes[0]
	s.up(0)
	hostSock, pid := s.start()
	defer func() {
		if t.Failed() {
			t.Logf("keeper.log:\n%s", keeperLog(r))
		}
	}()
	conf := filepath.Join(s.h.Home, ".config", "ollie", "olliesrv.yaml")
	if err := os.WriteFile(conf, []byte("no_such_setting: 1\n"), 0600); err != nil {
		t.Fatal(err)
	}
	os.Chown(conf, s.h.UID, s.h.GID)
	syscall.Kill(pid, syscall.SIGKILL)
	await.Until(t, 10*time.Second, "the keeper did not try to start olliesrv again", func() bool {
		return strings.Contains(keeperLog(r), "did not start again")
	})
	out := r.must("status", "h11")
	if !strings.Contains(out, "starting it again failed") || !strings.Contains(out, "exited at once") || !strings.Contains(out, "no_such_setting") {
		t.Errorf("status does not say why olliesrv did not start:\n%s", out)
	}
	os.Remove(conf)
	took := backWithBroker(t, hostSock, pid, 40*time.Second)
	t.Logf("mended: a daemon with approvals %v later", took.Round(time.Millisecond))
	// Tried every 2 s; after three failures in a minute, less often.
	if took > 5*time.Second {
		t.Errorf("the daemon came back %v after its configuration was mended, want within 2 s (5 s allowed)", took)
	}
	if out := r.must("status", "h11"); !strings.Contains(out, "started again 1 time") || !strings.Contains(out, "failed start") {
		t.Errorf("status after the mend:\n%s", out)
	}
}

// A daemon stopped on purpose stays stopped: ctl kill on the host while
// the keeper holds it (status says why it is left alone), and down
// -stop-daemon.
func TestKeeperLeavesStoppedDaemon(t *testing.T) {
	s := newSudoLab(t, "orrst2", 1)
	r := s.remotes[0]
	s.up(0)
	hostSock, pid := s.start()
	defer func() {
		if t.Failed() {
			t.Logf("keeper.log:\n%s", keeperLog(r))
		}
	}()
	c, err := client.DialAs(hostSock, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c.RdWr(ctx, "ctl", []byte("kill"))
	cancel()
	c.Close()
	waitGone(t, pid)
	// The 5 s are the point: longer than the keeper takes to start a
	// daemon that died (2 s), so one it left alone shows.
	await.For(t.Context(), 5*time.Second)
	if p := lockPID(hostSock); p != 0 {
		t.Errorf("olliesrv was started again (pid %d) after ctl kill", p)
	}
	if out := r.must("status", "h11"); !strings.Contains(out, "olliesrv shut down on the host; the keeper does not start it") {
		t.Errorf("status after ctl kill:\n%s", out)
	}

	// Started again by hand, then down -stop-daemon while a client is
	// attached through the keeper: its redial must not start it either.
	_, pid = s.start()
	backWithBroker(t, hostSock, 0, 10*time.Second)
	attached, err := client.DialAs(filepath.Join(r.dir, "h11.ns"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer attached.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := attached.ReadAll(rctx, "status"); err != nil {
		t.Fatal(err)
	}
	rcancel()
	out := r.must("down", "-stop-daemon", "h11")
	if !strings.Contains(out, "olliesrv stopped") {
		t.Errorf("down -stop-daemon: %s", out)
	}
	waitGone(t, pid)
	// The 5 s are the point: longer than the keeper takes to start a
	// daemon that died (2 s), so one it left alone shows.
	await.For(t.Context(), 5*time.Second)
	if p := lockPID(hostSock); p != 0 {
		t.Errorf("olliesrv was started again (pid %d) after down -stop-daemon", p)
	}
	if strings.Contains(keeperLog(r), "started it again") {
		t.Errorf("the keeper started a daemon stopped on purpose")
	}
}
