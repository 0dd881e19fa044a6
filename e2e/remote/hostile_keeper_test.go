package remote

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/await"
)

// Finding 4 of issue 11: a host exhausting the keeper, through deploy and
// through the 9P proxy (tunnel/resume) in front of its namespace.

// TestHostileProbeFlood: the deploy probe prints 1 GiB.
func TestHostileProbeFlood(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{ManifestFlood: 1 << 30, Manifest: hl.manifest})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	out, err, took := d.run(60*time.Second, "deploy", bad, good)
	t.Logf("deploy took %v: %v\n%s", took.Round(time.Millisecond), err, out)
	checkDeployRows(t, out, bad, good)
	checkClean(t, "deploy", out)
	d.finish("a probe printing 1 GiB")
}

// TestHostileProbeHang: the deploy probe never returns. h11 is deployed
// to over a connection of its own, h12 through the keeper that holds it:
// h11 fails at deploy's deadline for a step and h12's result comes.
func TestHostileProbeHang(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{ManifestHang: true})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(good)
	// deploy's deadline for each remote step, shortened from 30 s.
	out, err, took := d.run(15*time.Second, "-timeout", "2s", "deploy", bad, good)
	t.Logf("figure: deploy %s %s with a probe that never returns: %v after %v\n%s", bad, good, err, took.Round(time.Millisecond), out)
	checkDeployRows(t, out, bad, good)
	checkProbeTimedOut(t, out, bad)
	checkClean(t, "deploy", out)
	d.finish("a probe that never returns")
}

// TestHostileProbeHangKept: as TestHostileProbeHang, with both hosts held
// by the keeper, which deploys over the connections it holds.
func TestHostileProbeHangKept(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{ManifestHang: true})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	out, err, took := d.run(15*time.Second, "-timeout", "2s", "deploy", bad, good)
	t.Logf("figure: deploy %s %s through the keeper with a probe that never returns: %v after %v\n%s", bad, good, err, took.Round(time.Millisecond), out)
	checkDeployRows(t, out, bad, good)
	checkProbeTimedOut(t, out, bad)
	checkClean(t, "deploy", out)
	d.finish("a probe that never returns, through the keeper")
}

// TestHostileMsize: Rversion says msize 4 GiB, then a reply of 128 MiB
// follows, on each of 3 connections.
func TestHostileMsize(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{NineP: "msize", MsizeFrame: 128 << 20})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	for i := 0; i < 3; i++ {
		c, msize, err := rawVersion(filepath.Join(d.r.dir, bad+".ns"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		t.Logf("connection %d: the keeper answered Tversion with msize %d", i, msize)
	}
	// Not for a while, but until the keeper has dropped three floods.
	hl.waitEvent(t, `(?s)(msize flood stopped.*){3}`, 30*time.Second)
	t.Logf("the fake's log:\n%s", grepLines(hl.fakeEvents(), "msize flood"))
	d.finish("msize 4 GiB on 3 connections")
}

// TestHostileUnexpectedReplies: endless replies to tags nobody sent.
func TestHostileUnexpectedReplies(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{NineP: "tags"})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	before := d.keeperLogSize()
	c, _, err := rawVersion(filepath.Join(d.r.dir, bad+".ns"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The 4 s of replies nobody asked for are the point: what the keeper
	// logs and drops over a while.
	await.For(t.Context(), 4*time.Second)
	grew := d.keeperLogSize() - before
	broken := strings.Count(hl.fakeEvents(), "tags: connection broken")
	t.Logf("figure: replies to unknown tags for 4 s: keeper.log grew %d bytes; the keeper dropped the connection %d times", grew, broken)
	if grew > 256<<10 {
		t.Errorf("keeper.log grew by %d bytes in 4 s of unexpected replies", grew)
	}
	if broken == 0 {
		t.Errorf("the keeper never dropped a connection sending replies to tags nobody sent:\n%s", tailString(d.keeperLog(), 2000))
	}
	d.finish("replies to unknown tags")
}

// TestHostileRedial: a server that fails right after Tversion.
func TestHostileRedial(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{NineP: "drop"})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	c, _, err := rawVersion(filepath.Join(d.r.dir, bad+".ns"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	await.Until(t, 10*time.Second, "the keeper never dialled the server", func() bool { return countAccepts(hl.fakeEvents()) > 0 })
	n0 := countAccepts(hl.fakeEvents())
	// The 5 s are the window the dials are counted over.
	await.For(t.Context(), 5*time.Second)
	n := countAccepts(hl.fakeEvents()) - n0
	t.Logf("figure: a server failing after Tversion: %d connections in 5 s", n)
	if n > 30 {
		t.Errorf("the keeper dialled a server that fails at once %d times in 5 s: no back-off", n)
	}
	d.finish("a server failing after Tversion")
}

// TestHostileOllieHang: a server that never answers.
func TestHostileOllieHang(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{NineP: "silent"})
	// ollie's time-outs, shortened from 10 s and 30 s.
	d := hl.desk(t, "OLLIE_HANDSHAKE_TIMEOUT=2s", "OLLIE_TIMEOUT=3s")
	d.startBroker()
	d.mustUp(bad, good)
	out, err, took := d.ollie(15*time.Second, "-H", bad, "ls", "/")
	t.Logf("figure: ollie -H %s ls / against a server that never answers: %v after %v\n%s", bad, err, took.Round(time.Millisecond), out)
	if err == nil || strings.Contains(err.Error(), "still running") || !strings.Contains(out, "no answer to the 9P handshake within 2s") {
		t.Errorf("ollie -H %s against a server that never answers: %v after %v, want the error of its 2 s handshake time-out", bad, err, took)
	}
	checkClean(t, "ollie -H", out)
	d.finish("a server that never answers")
}

func grepLines(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var acceptRE = regexp.MustCompile(`(?m)^\d+ accept \d+$`)

func countAccepts(log string) int { return len(acceptRE.FindAllString(log, -1)) }

// checkProbeTimedOut: the message names the deadline that ended bad's
// probe, -timeout's 2 s, not the default (which run's 15 s would cut short).
func checkProbeTimedOut(t *testing.T, out, bad string) {
	t.Helper()
	if !strings.Contains(out, bad+": FAILED: probing the host: timed out after 2s") {
		t.Errorf("no time-out of 2 s named for %s:\n%s", bad, out)
	}
}

// TestHostileKeeperBounded (issue 29, item 2): h11 answers the keeper's
// watch of its events with replies to tags never sent, without end, and
// every file the desktop reads of it (status, bypass/broker, session/idx,
// the listing of bypass/pending) is endless. For 30 s the desktop reads h11
// through the fleet namespace and its own socket while h12 asks for
// approvals: the keeper stays under 64 MiB, h12 is answered within 2 s
// each time, and status names what h11 did.
func TestHostileKeeperBounded(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{NineP: "wrongtags"})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	if _, err := d.brokerPath(good, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	const bound = 64 << 20
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for _, args := range [][]string{
		{"-H", "fleet", "cat", "host/idx"},
		{"-H", "fleet", "cat", "session/idx"},
		{"-H", "fleet", "ls", "bypass/pending"},
		{"-H", bad, "cat", "status"},
	} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d.discard(3*time.Second, args...)
			}
		}()
	}
	// Three asks, 12 s apart: the desktop's budget for a host is 3
	// prompts a minute.
	start := time.Now()
	asks, slowest := 0, time.Duration(0)
	for ; asks < 3; asks++ {
		if asks > 0 {
			await.For(t.Context(), 12*time.Second)
		}
		delay, err := d.promptDelay(2 * time.Second)
		if err != nil {
			t.Errorf("ask %d: %v", asks+1, err)
			break
		}
		slowest = max(slowest, delay)
		if d.keeper.Peak() > bound {
			break
		}
	}
	// The 30 s are the attack's length, the keeper's peak its figure.
	await.For(t.Context(), 30*time.Second-time.Since(start))
	close(stop)
	readers.Wait()
	peak := d.keeper.Peak()
	t.Logf("figure: 30 s of replies to tags never sent and endless files from %s: keeper peak %s (idle %s); %d approvals of %s, the slowest shown after %v",
		bad, mib(peak), mib(d.keeper.idle), asks, good, slowest.Round(time.Millisecond))
	if peak > bound {
		t.Errorf("the keeper reached %s, over %s", mib(peak), mib(bound))
	}
	out, err, _ := d.run(30*time.Second, "status")
	t.Logf("status: %v\n%s", err, out)
	if row := tableRow(out, bad); row == nil || !strings.Contains(out, "broke the 9P protocol") {
		t.Errorf("status does not say that %s broke the 9P protocol:\n%s", bad, out)
	}
}

// promptDelay has the honest host ask through its gate, as an agent's
// call does, and returns how long its prompt took to show on the
// terminal broker's screen, the ssh command that asks included; an error
// if it did not within within.
func (d *desk) promptDelay(within time.Duration) (time.Duration, error) {
	n := len(d.screen.seen())
	t0 := time.Now()
	said := make(chan string, 1)
	go func() {
		out, _ := askThroughGate(d.t, d.hl.lab, d.hl.good.Name, honestTool, `{"thought":"honest"}`)
		said <- out
	}()
	showing, cancel := context.WithDeadline(context.Background(), t0.Add(within))
	defer cancel()
	var at time.Time
	if await.Poll(showing, func() bool {
		for _, p := range d.screen.seen()[n:] {
			if strings.Contains(p.seg, honestTool) {
				at = p.at
				return true
			}
		}
		return false
	}) {
		<-said // denied by the responder: the tool ends
		return at.Sub(t0), nil
	}
	select {
	case out := <-said:
		return 0, fmt.Errorf("the honest host's request was not shown; the tool said %q", out)
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("the honest host's request was not shown within %v", within)
	}
}

// discard runs ollie on the desktop for at most within, its output
// thrown away: an endless file is read without keeping it.
func (d *desk) discard(within time.Duration, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cc := exec.CommandContext(ctx, filepath.Join(binDir, "olliesrv"), append([]string{"ollie"}, args...)...)
	cc.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+d.r.dir)
	cc.Stdout, cc.Stderr = io.Discard, io.Discard
	cc.WaitDelay = time.Second
	cc.Run()
}
