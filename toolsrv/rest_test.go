package toolsrv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/await"
)

// current is the process serving now (nil while the session rests).
func (c *Child) current() *childRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run
}

// restNow has an idle child rest at once, as its timer would.
func (c *Child) restNow() {
	c.mu.Lock()
	c.used = time.Time{}
	c.mu.Unlock()
	c.rest()
}

func restingChild(t *testing.T, idle time.Duration, load []string) *Child {
	t.Helper()
	r, _ := runner(t, map[string][2]string{
		"echo":   {echoMeta, "#!/bin/sh\ncat\n"},
		"ticker": {`{"description": "Tick."}`, "#!/bin/sh\nwhile true; do echo tick; sleep 0.05; done\n"},
	})
	os.Setenv("OLLIE_DATA", "../data")
	t.Cleanup(func() { os.Unsetenv("OLLIE_DATA") })
	// Yolo: no sandbox helpers, whose start (under -race above all)
	// would be most of each test's time; resting does not depend on them.
	c, err := Spawn(context.Background(), SpawnConfig{Cwd: r.Cwd, SessionID: "s1", ToolsPath: r.ToolsPath, Tools: load,
		Stderr: os.Stderr, IdleAfter: idle, Yolo: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestChildRests: an idle session's tool server stops, leaving no process
// and no socket directory, and its next use starts it again with what the
// session had: the tools it loaded since, a revision that moved on. One
// started and never used (a session restored, then left) rests too.
func TestChildRests(t *testing.T) {
	c := restingChild(t, 300*time.Millisecond, []string{"echo"})
	ctx := context.Background()
	await.Until(t, 10*time.Second, "the unused child resting", func() bool { return c.current() == nil })
	if _, err := c.RdWr(ctx, "ctl", []byte("load ticker")); err != nil {
		t.Fatal(err)
	}
	rev, err := c.ReadFile(ctx, "revision")
	if err != nil {
		t.Fatal(err)
	}
	first := c.current()
	pid := first.cmd.Process.Pid
	await.Until(t, 10*time.Second, "the idle child resting", func() bool { return c.current() == nil })
	if alive(pid) {
		t.Errorf("the rested child %d still runs", pid)
	}
	if _, err := os.Stat(first.dir); !os.IsNotExist(err) {
		t.Errorf("its socket directory %s is still there: %v", first.dir, err)
	}

	res, err := c.Call(ctx, "echo", json.RawMessage(`{"text": "after a rest"}`))
	if err != nil || res.Failed || !strings.Contains(res.Output, "after a rest") {
		t.Fatalf("the call after the rest: %+v %v", res, err)
	}
	second := c.current()
	if second == nil || second.cmd.Process.Pid == pid || second.dir == first.dir || second.secret == first.secret {
		t.Fatalf("the call after the rest did not start a new run: %+v", second)
	}
	tools, err := c.ReadFile(ctx, "tools")
	if err != nil || string(tools) != "echo\tEcho the arguments.\nticker\tTick.\n" {
		t.Errorf("tools after the rest = %q %v: the tool loaded before it is lost", tools, err)
	}
	rev2, err := c.ReadFile(ctx, "revision")
	var a, b uint64
	fmt.Sscan(string(rev), &a)
	fmt.Sscan(string(rev2), &b)
	if err != nil || b <= a {
		t.Errorf("revision went from %d to %d (%v) across the rest: it must move on", a, b, err)
	}
}

// TestChildRestsNotWithBackground: a session with a background process
// keeps its tool server (the process would die with it), and ids given
// after a rest never name an earlier process again.
func TestChildRestsNotWithBackground(t *testing.T) {
	c := restingChild(t, time.Hour, nil)
	ctx := context.Background()
	id, err := c.Start(ctx, "ticker", nil)
	if err != nil {
		t.Fatal(err)
	}
	run := c.current()
	c.restNow()
	if c.current() != run || !alive(run.cmd.Process.Pid) {
		t.Fatal("the tool server rested while its background process ran")
	}
	if _, err := c.RdWr(ctx, "proc/"+id+"/ctl", []byte("kill")); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the ticker ending", func() bool {
		s, _ := c.ReadFile(ctx, "proc/"+id+"/status")
		return !strings.HasPrefix(string(s), "running")
	})
	// Ended but not yet collected: its output can still be read.
	c.restNow()
	if c.current() != run {
		t.Fatal("the tool server rested while it held an ended process's output")
	}
	if _, err := c.RdWr(ctx, "proc/"+id+"/ctl", []byte("dismiss")); err != nil {
		t.Fatal(err)
	}
	c.restNow()
	if c.current() != nil {
		t.Fatal("the tool server did not rest with no background process left")
	}
	id2, err := c.Start(ctx, "ticker", nil)
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id {
		t.Errorf("a process after the rest took the id %s of one before it", id)
	}
	c.RdWr(ctx, "proc/"+id2+"/ctl", []byte("kill"))
}

// TestChildRestsUnderLoad: rests racing calls lose none of them.
func TestChildRestsUnderLoad(t *testing.T) {
	c := restingChild(t, time.Millisecond, []string{"echo"})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for g := range 3 {
		wg.Go(func() {
			for i := range 6 {
				text := fmt.Sprintf("g%d-%d", g, i)
				res, err := c.Call(ctx, "echo", json.RawMessage(`{"text": "`+text+`"}`))
				if err == nil && (res.Failed || !strings.Contains(res.Output, text)) {
					err = fmt.Errorf("%s: %+v", text, res)
				}
				if err != nil {
					errs <- err
				}
				if i%3 == 0 {
					await.Until(t, 10*time.Second, "a rest", func() bool { return c.current() == nil })
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestChildRestartsAfterDeath: a tool server that died is started again
// by the session's next operation.
func TestChildRestartsAfterDeath(t *testing.T) {
	c := restingChild(t, 0, []string{"echo"})
	ctx := context.Background()
	run := c.current()
	run.cmd.Process.Kill()
	<-run.exited
	res, err := c.Call(ctx, "echo", json.RawMessage(`{"text": "again"}`))
	if err != nil || res.Failed || !strings.Contains(res.Output, "again") {
		t.Fatalf("the call after the death: %+v %v", res, err)
	}
	if now := c.current(); now == nil || now == run {
		t.Fatal("no new run")
	}
}

// TestChildRestSquatted: another local user who makes the rested run's
// directory again, with a socket of theirs in it, gets no connection and
// no secret: each run has a fresh directory of its own.
func TestChildRestSquatted(t *testing.T) {
	c := restingChild(t, time.Hour, []string{"echo"})
	ctx := context.Background()
	first := c.current()
	c.restNow()
	if c.current() != nil {
		t.Fatal("no rest")
	}
	if err := os.Mkdir(first.dir, 0777); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(first.dir)
	l, err := net.Listen("unix", filepath.Join(first.dir, "toolsrv"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		if conn, err := l.Accept(); err == nil {
			dialled <- struct{}{}
			conn.Close()
		}
	}()
	res, err := c.Call(ctx, "echo", json.RawMessage(`{"text": "mine"}`))
	if err != nil || !strings.Contains(res.Output, "mine") {
		t.Fatalf("call: %+v %v", res, err)
	}
	select {
	case <-dialled:
		t.Fatal("the session dialled the squatter's socket")
	default:
	}
	if now := c.current(); now.dir == first.dir || !strings.HasPrefix(filepath.Base(now.dir), "ollie-tools-") {
		t.Errorf("the new run's directory %s", now.dir)
	}
}

func TestSpilledIn(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), make([]byte, 1000), 0600)
	os.Mkdir(filepath.Join(dir, "d"), 0700)
	os.WriteFile(filepath.Join(dir, "d", "b"), make([]byte, 24), 0600)
	os.Symlink("/etc/passwd", filepath.Join(dir, "l"))
	if n := spilledIn(dir); n != 1024 {
		t.Errorf("spilledIn = %d, want 1024", n)
	}
}

// BenchmarkCallAfterRest is what a session's rest costs its next call: a
// call of /bin/true through the session's tool server just started again
// (the process, its tools, a helper started for the call), and a call
// on the running server right after it, beside a bare fork/exec of
// /bin/true, alternating in one loop. The rest itself is not timed.
func BenchmarkCallAfterRest(b *testing.B) {
	r, _ := runner(b, map[string][2]string{"truth": {`{"description": "True.", "cmd": "/bin/true"}`, ""}})
	os.Setenv("OLLIE_DATA", "../data")
	b.Cleanup(func() { os.Unsetenv("OLLIE_DATA") })
	c, err := Spawn(context.Background(), SpawnConfig{Cwd: r.Cwd, SessionID: "s1", ToolsPath: r.ToolsPath, Stderr: os.Stderr, IdleAfter: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	call := func() {
		if res, err := c.Call(ctx, "truth", json.RawMessage(`{}`)); err != nil || res.Failed {
			b.Fatalf("call: %+v %v", res, err)
		}
	}
	var bare, rested, running time.Duration
	for b.Loop() {
		c.restNow()
		t0 := time.Now()
		cmd := exec.Command("/bin/true")
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		call()
		t2 := time.Now()
		call()
		t3 := time.Now()
		bare, rested, running = bare+t1.Sub(t0), rested+t2.Sub(t1), running+t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(bare)/n, "bare-ns/op")
	b.ReportMetric(float64(rested)/n, "after-rest-ns/op")
	b.ReportMetric(float64(running)/n, "running-ns/op")
	b.ReportMetric(float64(rested)/float64(bare), "after-rest/bare")
	b.ReportMetric(float64(running)/float64(bare), "running/bare")
}

// TestDeclsKept: the declarations are read from the tool server once, and
// again after anything that can change them: a ctl write, a restart.
func TestDeclsKept(t *testing.T) {
	c := restingChild(t, time.Hour, []string{"echo"})
	ctx := context.Background()
	names := func() string {
		t.Helper()
		ds, err := c.Decls(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return strings.Join(out, " ")
	}
	if got := names(); got != "echo" {
		t.Fatalf("decls %q", got)
	}
	reads := func() int { return int(c.schemaReads.Load()) }
	before := reads()
	names()
	names()
	if n := reads() - before; n != 0 {
		t.Errorf("%d schema reads for kept declarations, want 0", n)
	}
	if _, err := c.RdWr(ctx, "ctl", []byte("load ticker")); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "echo ticker" {
		t.Errorf("decls after ctl load = %q", got)
	}
	if _, err := c.RdWr(ctx, "ctl", []byte("unload nothing-such")); err == nil {
		t.Fatal("unloading an unknown tool succeeded")
	}
	if got := names(); got != "echo ticker" {
		t.Errorf("decls after a failed ctl = %q", got)
	}
	c.restNow()
	os.Remove(filepath.Join(c.cfg.ToolsPath[0], "ticker.meta"))
	if got := names(); got != "echo" {
		t.Errorf("decls after a restart that found ticker gone = %q", got)
	}
}
