package host

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/broker"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// bypass/broker keeps a registration per connection: writing a path adds
// one (first), -PATH removes that one and its socket, reading lists them
// newest first; each change is an event. A daemon that starts removes the
// broker sockets of connections gone.
func TestBypassBrokerRegistrations(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	// A socket an SSH connection gone left behind, before the daemon ran.
	stale := filepath.Join(dir, "broker-stale")
	sl, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	sl.(*net.UnixListener).SetUnlinkOnClose(false)
	sl.Close()
	old := time.Now().Add(-time.Minute)
	os.Chtimes(stale, old, old)

	d, err := Start(Config{StateDir: t.TempDir(), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	if _, err := os.Lstat(stale); err == nil {
		t.Error("the stale broker socket was not removed at start")
	}
	fs := nstest.Attach(t, d.Socket, "admin")
	events := d.ns.bus.Subscribe("bypass.broker")
	defer events.Close()

	var socks []string
	for _, name := range []string{"broker-a", "broker-b"} {
		p := filepath.Join(dir, name)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		socks = append(socks, p)
		if err := nstest.WriteFile(fs, "bypass/broker", p+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	if got := nstest.ReadFile(t, fs, "bypass/broker"); got != socks[1]+"\n"+socks[0]+"\n" {
		t.Errorf("bypass/broker = %q, want b then a", got)
	}
	if err := nstest.WriteFile(fs, "bypass/broker", "-"+socks[1]); err != nil {
		t.Fatal(err)
	}
	if got := nstest.ReadFile(t, fs, "bypass/broker"); got != socks[0]+"\n" {
		t.Errorf("after -b: %q, want a alone", got)
	}
	if _, err := os.Lstat(socks[1]); err == nil {
		t.Error("the removed registration's socket is still there")
	}
	for _, bad := range []string{"", filepath.Join(dir, "nothing")} {
		if err := nstest.WriteFile(fs, "bypass/broker", bad); err == nil {
			t.Errorf("writing %q was accepted", bad)
		}
	}
	var got []string
	for len(got) < 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		evs, err := events.Events(ctx)
		cancel()
		if err != nil {
			t.Fatalf("events %q, then %v", got, err)
		}
		for _, ev := range evs {
			got = append(got, ev.Topic+" "+ev.Data)
		}
	}
	want := []string{"bypass.broker +" + socks[0], "bypass.broker +" + socks[1], "bypass.broker -" + socks[1]}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want %q", got, want)
	}
}

// A daemon that stops denies the requests parked in bypass/pending at
// once, saying why, instead of leaving them unanswered.
func TestShutdownDeniesParked(t *testing.T) {
	dir := nstest.ShortTempDir(t)
	d, err := Start(Config{StateDir: t.TempDir(), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.Shutdown(context.Background())
		}
	})
	c, err := net.Dial("unix", filepath.Join(dir, "elevate"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		ans broker.Answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, ans, err := broker.Ask(ctx, c, &broker.Request{Session: "s", Tool: "fix", Executable: "/bin/true", Cwd: "/"})
		done <- result{ans, err}
	}()
	await.Until(t, 5*time.Second, "the request parking", func() bool { return len(d.gate.Pending()) > 0 })
	// The bound is the point, and generous: a Shutdown that left the
	// parked request to ctx, or to its own time-out (5 min), would take
	// a minute or more.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	stopped = true
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Shutdown took %v", took)
	}
	select {
	case r := <-done:
		if r.err != nil || r.ans.Decision != broker.Deny || !strings.Contains(r.ans.Reason, "stopped") {
			t.Errorf("the parked request got %+v %v, want a denial saying olliesrv stopped", r.ans, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked request was left unanswered")
	}
}

// "PATH key=HEX" registers PATH with a key for its broker: the key is
// shown nowhere (bypass/broker, events) and a bad one is refused without
// quoting it, since it is a secret a person may have pasted.
func TestBypassBrokerKey(t *testing.T) {
	d := startTestDaemon(t)
	dir := filepath.Dir(d.Socket)
	fs := nstest.Attach(t, d.Socket, "admin")
	events := d.ns.bus.Subscribe("bypass.broker")
	defer events.Close()
	p := filepath.Join(dir, "broker-k")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	const key = "cafe1133445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	for _, bad := range []string{
		p + " key=0011",                               // short
		p + " key=" + strings.Repeat("zz", 16),        // not hex
		p + " key=" + key + "0",                       // odd
		p + " key=" + strings.Repeat("ab", 65),        // long
		filepath.Join(dir, "nothing") + " key=" + key, // no socket
	} {
		err := nstest.WriteFile(fs, "bypass/broker", bad)
		if err == nil {
			t.Errorf("writing %q was accepted", bad)
			continue
		}
		_, k, _ := strings.Cut(bad, "key=")
		if strings.Contains(err.Error(), k[:min(len(k), 8)]) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
	if err := nstest.WriteFile(fs, "bypass/broker", "+"+p+" key="+key+"\n"); err != nil {
		t.Fatal(err)
	}
	if got := nstest.ReadFile(t, fs, "bypass/broker"); got != p+"\n" {
		t.Errorf("bypass/broker = %q, want the path alone", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	evs, err := events.Events(ctx)
	cancel()
	if err != nil || len(evs) != 1 || evs[0].Data != "+"+p {
		t.Errorf("events %+v %v, want +%s alone", evs, err, p)
	}
}
