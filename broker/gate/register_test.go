package gate_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/broker/gate"
	"ollie/internal/await"
)

// deskSock is a desktop broker on a socket in dir, as a keeper forwards
// one, whose person answers with decision, or holds every request until
// released.
type deskSock struct {
	path string
	ln   net.Listener
	mu   sync.Mutex
	seen []string // the tools asked about
	hold chan struct{}
}

func (d *deskSock) Approve(ctx context.Context, req *broker.Request) (broker.Answer, error) {
	d.mu.Lock()
	d.seen = append(d.seen, req.Tool)
	hold := d.hold
	d.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return broker.Answer{}, ctx.Err()
		}
	}
	return broker.Answer{Decision: broker.Once}, nil
}

func (d *deskSock) Password(ctx context.Context, req *broker.Request, attempt int, problem string) ([]byte, error) {
	return nil, broker.ErrDenied
}

func (d *deskSock) asked() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.seen)
}

func startDesktop(t *testing.T, path string) *deskSock {
	t.Helper()
	return startHolding(t, path, nil)
}

// startHolding starts a desktop that holds every request until hold is
// closed.
func startHolding(t *testing.T, path string, hold chan struct{}) *deskSock {
	t.Helper()
	d := &deskSock{path: path, hold: hold}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// sshd leaves its forwarded socket behind when the connection ends.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	d.ln = ln
	t.Cleanup(func() { ln.Close() })
	go (&desktop.Broker{Approver: d}).Serve("web1", ln)
	return d
}

// gateIn is a gate whose Dir is a fresh directory, serving on its socket.
func gateIn(t *testing.T) *lab {
	dir := t.TempDir()
	l := &lab{gate: gate.New(nil), gateSock: filepath.Join(dir, "elevate")}
	l.gate.Dir = dir
	gl, err := net.Listen("unix", l.gateSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gl.Close() })
	go l.gate.Serve(gl)
	return l
}

func (l *lab) askTool(t *testing.T, tool string) broker.Answer {
	t.Helper()
	cv, ans, err := l.ask(t, &broker.Request{Session: "s", Tool: tool})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	cv.Close("ran")
	return ans
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	await.Until(t, 5*time.Second, what, ok)
}

// A host reached from two desktops asks the newest registration; one
// gone is dropped (its socket removed) and the other asked; removing one
// leaves the other.
func TestGateRegistrations(t *testing.T) {
	l := gateIn(t)
	dir := l.gate.Dir
	laptop := startDesktop(t, filepath.Join(dir, "broker-laptop"))
	work := startDesktop(t, filepath.Join(dir, "broker-work"))
	for _, d := range []*deskSock{laptop, work} {
		if err := l.gate.Register(d.path); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.gate.Register(filepath.Join(dir, "elevate-not-there")); err == nil {
		t.Error("a path that is not a socket was registered")
	}
	if got := l.gate.Brokers(); !slices.Equal(got, []string{work.path, laptop.path}) {
		t.Fatalf("registrations %q, want the newest first", got)
	}
	if ans := l.askTool(t, "one"); ans.Decision != broker.Once || !slices.Equal(work.asked(), []string{"one"}) || len(laptop.asked()) != 0 {
		t.Fatalf("%+v: work asked %q, laptop %q; want the newest (work) asked", ans, work.asked(), laptop.asked())
	}
	// Registering the laptop again puts it first.
	l.gate.Register(laptop.path)
	l.askTool(t, "two")
	if !slices.Equal(laptop.asked(), []string{"two"}) {
		t.Fatalf("laptop asked %q after registering again", laptop.asked())
	}
	// The laptop's connection ends: its socket stays, nobody listens.
	laptop.ln.Close()
	if ans := l.askTool(t, "three"); ans.Decision != broker.Once || !slices.Equal(work.asked(), []string{"one", "three"}) {
		t.Fatalf("%+v: work asked %q; want the request to fall back to it", ans, work.asked())
	}
	if got := l.gate.Brokers(); !slices.Equal(got, []string{work.path}) {
		t.Errorf("registrations %q after the laptop went: want only work", got)
	}
	if _, err := os.Lstat(laptop.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead broker's socket is still there: %v", err)
	}
	// A keeper going down removes its own, and no other.
	other := startDesktop(t, filepath.Join(dir, "broker-other"))
	l.gate.Register(other.path)
	l.gate.Unregister(other.path)
	if got := l.gate.Brokers(); !slices.Equal(got, []string{work.path}) {
		t.Errorf("registrations %q after removing another: want work's kept", got)
	}
	if _, err := os.Lstat(other.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a removed broker's socket is still there: %v", err)
	}
	// Only ollie-remote's sockets in the namespace directory are removed.
	outside := startDesktop(t, filepath.Join(t.TempDir(), "broker-x"))
	l.gate.Register(outside.path)
	l.gate.Unregister(outside.path)
	if _, err := os.Lstat(outside.path); err != nil {
		t.Errorf("a socket outside the namespace directory was removed: %v", err)
	}
}

// Sweep removes the broker sockets nobody listens on, not a live one, not
// one just made, nothing else.
func TestGateSweep(t *testing.T) {
	l := gateIn(t)
	dir := l.gate.Dir
	old := time.Now().Add(-time.Minute)
	dead := startDesktop(t, filepath.Join(dir, "broker-dead"))
	dead.ln.Close()
	os.Chtimes(dead.path, old, old)
	fresh := startDesktop(t, filepath.Join(dir, "broker-fresh"))
	fresh.ln.Close()
	live := startDesktop(t, filepath.Join(dir, "broker-live"))
	os.Chtimes(live.path, old, old)
	l.gate.Register(live.path)
	plain := filepath.Join(dir, "broker-notes")
	os.WriteFile(plain, nil, 0600)
	os.Chtimes(plain, old, old)
	l.gate.Sweep()
	for path, want := range map[string]bool{dead.path: false, fresh.path: true, live.path: true, plain: true} {
		if _, err := os.Lstat(path); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(path), err == nil, want)
		}
	}
	if got := l.gate.Brokers(); !slices.Equal(got, []string{live.path}) {
		t.Errorf("registrations %q", got)
	}
}

// Requests parked while no broker was connected are asked on the desktop
// as soon as one registers, and a new identical one is asked there too,
// never left waiting behind the parked one.
func TestGateHandsOverParked(t *testing.T) {
	l := gateIn(t)
	results := make(chan broker.Answer, 3)
	for range 2 {
		go func() { results <- l.askTool(t, "fix") }()
	}
	waitFor(t, "the request to park", func() bool { return len(l.gate.Pending()) == 1 })
	waitFor(t, "the identical one to join it", func() bool { return gate.ParkedWaiters(l.gate) == 2 })
	hold := make(chan struct{})
	d := startHolding(t, filepath.Join(l.gate.Dir, "broker-1"), hold)
	if err := l.gate.Register(d.path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the parked requests to reach the desktop", func() bool { return len(d.asked()) == 2 })
	if p := l.gate.Pending(); len(p) != 0 {
		t.Errorf("%d still pending after a broker registered", len(p))
	}
	// While the desktop is asking, an identical request goes to it too.
	go func() { results <- l.askTool(t, "fix") }()
	waitFor(t, "the new request to reach the desktop", func() bool { return len(d.asked()) == 3 })
	if p := l.gate.Pending(); len(p) != 0 {
		t.Errorf("a new request parked while a broker is connected")
	}
	close(hold)
	for range 3 {
		select {
		case ans := <-results:
			if ans.Decision != broker.Once {
				t.Errorf("answer %+v", ans)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an answer was lost")
		}
	}
}

// Shutdown denies a parked request at once, waits for one the desktop is
// asking until its context ends, then denies it saying why.
func TestGateShutdown(t *testing.T) {
	l := gateIn(t)
	parked := make(chan broker.Answer, 1)
	go func() { parked <- l.askTool(t, "parked") }()
	waitFor(t, "the request to park", func() bool { return len(l.gate.Pending()) == 1 })
	first := make(chan struct{})
	d := startHolding(t, filepath.Join(l.gate.Dir, "broker-1"), first)
	// The parked one is handed to the desktop; answer it there.
	l.gate.Register(d.path)
	waitFor(t, "the parked request to reach the desktop", func() bool { return len(d.asked()) == 1 })
	d.mu.Lock()
	d.hold = make(chan struct{})
	d.mu.Unlock()
	close(first)
	if ans := <-parked; ans.Decision != broker.Once {
		t.Fatalf("handed over: %+v", ans)
	}

	// One asked on the desktop, one parked (with no broker left).
	asking := make(chan broker.Answer, 1)
	go func() { asking <- l.askTool(t, "asking") }()
	waitFor(t, "the desktop to be asked", func() bool { return len(d.asked()) == 2 })
	l.gate.Unregister(d.path)
	go func() { parked <- l.askTool(t, "parked2") }()
	waitFor(t, "the request to park", func() bool { return len(l.gate.Pending()) == 1 })

	// The desktop holds its request until the test ends: ctx's error says
	// Shutdown stopped waiting for it when ctx ended.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := l.gate.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want it to say it stopped waiting", err)
	}
	for name, ch := range map[string]chan broker.Answer{"parked": parked, "asking": asking} {
		select {
		case ans := <-ch:
			if ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "stopped") {
				t.Errorf("%s: %+v, want a denial saying olliesrv stopped", name, ans)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: left half-answered", name)
		}
	}
	if _, err := net.Dial("unix", l.gateSock); err == nil {
		t.Error("the gate still accepts after Shutdown")
	}
}

// Shutdown does not wait for a tool that was approved and runs: only for
// requests a desktop is being asked.
func TestGateShutdownSkipsRunningTools(t *testing.T) {
	l := gateIn(t)
	d := startDesktop(t, filepath.Join(l.gate.Dir, "broker-1"))
	l.gate.Register(d.path)
	cv, ans, err := l.ask(t, &broker.Request{Session: "s", Tool: "long"})
	if err != nil || ans.Decision != broker.Once {
		t.Fatalf("%+v %v", ans, err)
	}
	defer cv.Close("ran") // the tool runs until the test ends
	// The tool runs until the test ends: a Shutdown that waited for it
	// would return ctx's error.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.gate.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v; it waited for a running tool", err)
	}
}

// A registration's key goes with every request relayed to it, and the
// desktop asks only when it is the key it gave: a registration made with
// another (a process that is not olliesrv cannot know the desktop's) is
// never put to a person.
func TestGateRegisterKeyed(t *testing.T) {
	l := gateIn(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	d := &deskSock{path: filepath.Join(l.gate.Dir, "broker-keyed")}
	ln, err := net.Listen("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &desktop.Broker{Approver: d}
	go desktop.ServeApprovals(b, "web1", ln, key)

	if err := l.gate.RegisterKeyed(d.path, key); err != nil {
		t.Fatal(err)
	}
	if ans := l.askTool(t, "keyed"); ans.Decision != broker.Once {
		t.Errorf("with the desktop's key: %+v", ans)
	}
	if got := l.gate.Brokers(); !slices.Equal(got, []string{d.path}) {
		t.Errorf("Brokers() = %q", got)
	}

	// Registered again without it, then with another: the same socket,
	// whose broker refuses both.
	for _, k := range [][]byte{nil, []byte("fedcba9876543210fedcba9876543210")} {
		if err := l.gate.RegisterKeyed(d.path, k); err != nil {
			t.Fatal(err)
		}
		if ans := l.askTool(t, "unkeyed"); ans.Decision != broker.Deny {
			t.Errorf("key %q: %+v, want a denial", k, ans)
		}
	}
	if got := d.asked(); !slices.Equal(got, []string{"keyed"}) {
		t.Errorf("the person was asked about %q", got)
	}
	if r := b.Refused("web1"); r.Keyless != 2 {
		t.Errorf("refusals %+v, want two keyless", r)
	}
}
