package desktop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/broker"
	"ollie/internal/await"
	"ollie/internal/termsafe"
)

const runName = "fleet-r1a2b"

// runRig is a desktop as a fleet run uses it, over the real sockets: the
// keeper's broker (KeeperBroker) serving a forwarded socket per host, and
// relaying to a RunBroker on TerminalSocket, whose terminal is a pty the
// test reads and types into.
type runRig struct {
	t      *testing.T
	dir    string
	master *os.File
	tty    *os.File
	socks  map[string]string

	smu    sync.Mutex
	screen bytes.Buffer

	lmu     sync.Mutex
	logs    bytes.Buffer // the keeper's log and the run broker's
	paused  atomic.Int32 // Pause calls less Resume calls
	pauses  atomic.Int32
	rb      *RunBroker
	started chan error
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// newRunRig serves hosts through the keeper; StartRunBroker runs in the
// background (it may be asking the BECOME password) until r.rb is set.
func newRunRig(t *testing.T, cfg RunConfig, hosts ...string) *runRig {
	dir, err := os.MkdirTemp("", "orb") // short: socket paths are bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("OLLIE_REMOTE_DIR", dir)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no policy file: ask about everything
	for _, v := range []string{"OLLIE_ASKPASS", "SSH_ASKPASS", "DISPLAY", "WAYLAND_DISPLAY"} {
		t.Setenv(v, "") // the keeper's own approver is Nobody
	}
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	r := &runRig{t: t, dir: dir, master: master, tty: tty, socks: map[string]string{}, started: make(chan error, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			r.smu.Lock()
			r.screen.Write(buf[:n])
			r.smu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	log := slog.New(slog.NewTextHandler(lockedWriter{&r.lmu, &r.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keeper := KeeperBroker(log)
	for _, h := range hosts {
		p := filepath.Join(dir, "fwd-"+h)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go ServeApprovals(keeper, h, l, nil)
		r.socks[h] = p
	}

	cfg.In, cfg.Out, cfg.Log = tty, tty, log
	cfg.Pause = func() { r.pauses.Add(1); r.paused.Add(1) }
	cfg.Resume = func() { r.paused.Add(-1) }
	go func() {
		rb, err := StartRunBroker(context.Background(), cfg)
		r.smu.Lock()
		r.rb = rb
		r.smu.Unlock()
		r.started <- err
	}()
	t.Cleanup(func() {
		if rb := r.broker(); rb != nil {
			rb.Close()
		}
		master.Close()
		tty.Close()
	})
	return r
}

// waitStarted waits for StartRunBroker.
func (r *runRig) waitStarted() *RunBroker {
	r.t.Helper()
	select {
	case err := <-r.started:
		if err != nil {
			r.t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		r.t.Fatal("StartRunBroker did not return")
	}
	return r.broker()
}

func (r *runRig) broker() *RunBroker {
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.rb
}

func (r *runRig) shown() string {
	r.smu.Lock()
	defer r.smu.Unlock()
	return strings.ReplaceAll(r.screen.String(), "\r\n", "\n")
}

func (r *runRig) logText() string {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	return r.logs.String()
}

// waitShown waits until the terminal shows want n times in all.
func (r *runRig) waitShown(want string, n int) {
	r.t.Helper()
	waitUntil(r.t, fmt.Sprintf("%q shown %d times; the terminal shows:\n%s", want, n, r.shown()), func() bool {
		return strings.Count(r.shown(), want) >= n
	})
}

// question waits for the k-th question asked on the terminal (1-based)
// and returns it: what was shown after the one before, up to its end.
func (r *runRig) question(k int) string {
	r.t.Helper()
	var q string
	waitUntil(r.t, fmt.Sprintf("question %d; the terminal shows:\n%s", k, r.shown()), func() bool {
		s, n := r.shown(), 0
		for {
			i, j := strings.Index(s, "[d]eny? "), strings.Index(s, "every listed host? ")
			end := -1
			switch {
			case i >= 0 && (j < 0 || i < j):
				end = i + len("[d]eny? ")
			case j >= 0:
				end = j + len("every listed host? ")
			default:
				return false
			}
			if n++; n == k {
				q = s[:end]
				return true
			}
			s = s[end:]
		}
	})
	return q
}

func (r *runRig) typeLine(s string) {
	r.t.Helper()
	if _, err := r.master.Write([]byte(s + "\r")); err != nil {
		r.t.Fatal(err)
	}
}

// asked is a host's request as the host sees it.
type asked struct {
	cv  *broker.Conversation
	ans broker.Answer
	err error
}

// ask sends req from host, as its gate would, and returns where its
// answer arrives.
func (r *runRig) ask(host string, req *broker.Request) chan asked {
	r.t.Helper()
	c, err := net.Dial("unix", r.socks[host])
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	out := make(chan asked, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cv, ans, err := broker.Ask(ctx, c, req)
		out <- asked{cv, ans, err}
	}()
	return out
}

// waiting is how many of the run's requests wait in a group not shown yet.
func (rb *RunBroker) waiting() int {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	n := 0
	for _, g := range rb.open {
		n += len(g.live())
	}
	return n
}

// runReq is a request from the run's session, as a host's toolsrv fills
// it in.
func runReq(tool string, sudo bool, args string) *broker.Request {
	return &broker.Request{
		ID: broker.NewID(), Session: "5f0c-uuid", SessionName: runName, Agent: "a1", AgentName: "fleet",
		Tool: tool, Variant: -1, Executable: "/usr/bin/apt-get", Args: json.RawMessage(args), Cwd: "/root", Sudo: sudo,
	}
}

func answer(t *testing.T, ch chan asked, what string) asked {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer", what)
	}
	return asked{}
}

func noAnswer(t *testing.T, ch chan asked, what string) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s was answered (%+v, %v) without being asked", what, a.ans, a.err)
	case <-time.After(200 * time.Millisecond):
	}
}

const (
	runList    = "ollie: 3 hosts of run fleet-r1a2b ask to run `apt_upgrade` with sudo:\n"
	runChoices = "approve: [o]nce for web1 / [e]very listed host (3) / [n]o for web1 / [d]eny every listed host? "
)

// TestRunBrokerGroupsHosts: three hosts of the run asking the same sudo
// tool are shown as one list and "every listed host" approves exactly
// them; a fourth host of the run asking while the list is up, a host
// outside the run and another session of a run host are each asked on
// their own, afterwards.
func TestRunBrokerGroupsHosts(t *testing.T) {
	r := newRunRig(t, RunConfig{Session: runName, Hosts: []string{"web1", "web2", "web3", "web4"}, Window: time.Second},
		"web1", "web2", "web3", "web4", "db9")
	rb := r.waitStarted()

	var first []chan asked
	for i, h := range []string{"web1", "web2", "web3"} {
		first = append(first, r.ask(h, runReq("apt_upgrade", true, fmt.Sprintf(`{"only":"pkg-%s"}`, h))))
		waitUntil(t, fmt.Sprintf("%d requests waiting to be shown together", i+1), func() bool { return rb.waiting() == i+1 })
	}
	r.waitShown(runChoices, 1)
	screen := r.shown()
	list := screen[strings.Index(screen, "ollie: "):]
	want := runList +
		"  runs:     \"/usr/bin/apt-get\", web1 says\n" +
		"  1. web1 says: args \"{\\\"only\\\":\\\"pkg-web1\\\"}\"\n" +
		"  2. web2 says: args \"{\\\"only\\\":\\\"pkg-web2\\\"}\"\n" +
		"  3. web3 says: args \"{\\\"only\\\":\\\"pkg-web3\\\"}\"\n" +
		runChoices
	if list != want {
		t.Errorf("the list shows:\n%s\nwant:\n%s", list, want)
	}
	if r.paused.Load() != 1 {
		t.Errorf("the live view is not paused while the list shows (%d)", r.paused.Load())
	}
	if w := rb.Waiting("web2"); w != "apt_upgrade" {
		t.Errorf("Waiting(web2) = %q while its request is listed, want apt_upgrade", w)
	}

	// Asked after the list was drawn: none of them is on it.
	web4 := r.ask("web4", runReq("apt_upgrade", true, `{"only":"pkg-web4"}`))
	db9 := r.ask("db9", runReq("apt_upgrade", true, `{"only":"pkg-db9"}`))
	other := runReq("apt_upgrade", true, `{}`)
	other.SessionName = "mine"
	web1Other := r.ask("web1", other)
	waitUntil(t, "web4 received", func() bool { return rb.waiting() >= 1 })
	waitUntil(t, "db9 and web1's other session in the queue", func() bool { return len(rb.queue.Pending()) == 2 })

	r.typeLine("e")
	for i, ch := range first {
		if a := answer(t, ch, fmt.Sprintf("web%d", i+1)); a.ans.Decision != broker.Once {
			t.Errorf("web%d: %+v, want once", i+1, a.ans)
		}
	}
	noAnswer(t, web4, "web4, asking after the list was drawn,")
	if w := rb.Waiting("web1"); w != "" {
		t.Errorf("Waiting(web1) = %q once its request was answered", w)
	}
	// Then each on its own, one at a time: db9 and web1's other session
	// from the queue, web4 after its window, in whatever order they took
	// their turns.
	for k := 2; k <= 4; k++ {
		q := r.question(k)
		switch {
		case strings.Contains(q, "every listed host"):
			t.Fatalf("a second list:\n%s", q)
		case strings.HasSuffix(q, "(apt_upgrade on db9) / [d]eny? "):
			r.typeLine("o")
			if a := answer(t, db9, "db9"); a.ans.Decision != broker.Once {
				t.Errorf("db9: %+v", a.ans)
			}
		case strings.HasSuffix(q, "(apt_upgrade on web1) / [d]eny? ") && strings.Contains(q, `session:  "mine" ("5f0c-uuid")`):
			r.typeLine("d")
			if a := answer(t, web1Other, "web1's other session"); a.ans.Decision != broker.Deny {
				t.Errorf("web1's other session: %+v", a.ans)
			}
		case strings.HasSuffix(q, "(apt_upgrade on web4) / [d]eny? "):
			r.typeLine("d")
			if a := answer(t, web4, "web4"); a.ans.Decision != broker.Deny {
				t.Errorf("web4: %+v, want deny: it was not on the list approved", a.ans)
			}
		default:
			t.Fatalf("question %d is not one asked:\n%s", k, q)
		}
	}
	if n := strings.Count(r.shown(), "[e]very listed host"); n != 1 {
		t.Errorf("%d lists shown, want 1:\n%s", n, r.shown())
	}
	waitUntil(t, "the live view resumed", func() bool { return r.paused.Load() == 0 })
}

// TestRunBrokerGroupWindow: a request of the run alone is shown after the
// window, as "ollie-remote broker" asks; what arrives while it is up is
// gathered into one list, by what it asks (a tool without sudo is not
// grouped with it with sudo); a list answered one host at a time is shown
// again without that host, and its last request on its own.
func TestRunBrokerGroupWindow(t *testing.T) {
	const window = 300 * time.Millisecond
	r := newRunRig(t, RunConfig{Session: runName, Hosts: []string{"web1", "web2", "web3"}}, "web1", "web2", "web3")
	rb := r.waitStarted()

	start := time.Now()
	web1 := r.ask("web1", runReq("apt_upgrade", true, `{}`))
	r.waitShown("(apt_upgrade on web1) / [d]eny? ", 1)
	if d := time.Since(start); d < window {
		t.Errorf("a request alone was shown after %v, before the window (%v) passed", d, window)
	}
	// While web1's prompt is up, for longer than the window.
	web2 := r.ask("web2", runReq("apt_upgrade", true, `{}`))
	web3 := r.ask("web3", runReq("apt_upgrade", true, `{}`))
	web2NoSudo := r.ask("web2", runReq("apt_upgrade", false, `{}`))
	waitUntil(t, "three requests gathered", func() bool { return rb.waiting() == 3 })
	// The pause is the point: web1's prompt stays up past the window,
	// and what came meanwhile must still be gathered, not shown alone.
	await.For(t.Context(), 2*window)
	r.typeLine("o")
	if a := answer(t, web1, "web1"); a.ans.Decision != broker.Once {
		t.Errorf("web1: %+v", a.ans)
	}

	// The list of two and the request without sudo, in the order they
	// took their turns; the list down to one host is asked on its own.
	const list = "ollie: 2 hosts of run fleet-r1a2b ask to run `apt_upgrade` with sudo:\n"
	lists := 0
	for k := 2; k <= 4; k++ {
		q := r.question(k)
		switch {
		case strings.HasSuffix(q, "approve: [o]nce for web2 / [e]very listed host (2) / [n]o for web2 / [d]eny every listed host? ") ||
			strings.HasSuffix(q, "approve: [o]nce for web3 / [e]very listed host (2) / [n]o for web3 / [d]eny every listed host? "):
			lists++
			if !strings.Contains(q, list) || strings.Count(q, ". web") != 2 {
				t.Errorf("web2 and web3 were not listed together:\n%s", q)
			}
			r.typeLine("n") // no for the first only
		case strings.Contains(q, "ollie: web2 asks to run outside its sandbox"):
			r.typeLine("d")
			if a := answer(t, web2NoSudo, "web2 without sudo"); a.ans.Decision != broker.Deny {
				t.Errorf("web2 without sudo: %+v", a.ans)
			}
		case strings.HasSuffix(q, "(apt_upgrade on web2) / [d]eny? ") || strings.HasSuffix(q, "(apt_upgrade on web3) / [d]eny? "):
			r.typeLine("o")
		default:
			t.Fatalf("question %d is not one asked:\n%s", k, q)
		}
	}
	a2, a3 := answer(t, web2, "web2"), answer(t, web3, "web3")
	if lists != 1 || a2.ans.Decision == a3.ans.Decision {
		t.Errorf("%d lists; web2 %+v, web3 %+v: want one list, the first listed denied, the other approved on its own", lists, a2.ans, a3.ans)
	}
}

// TestRunBrokerBecomePass: with AskBecomePass the password asked when the
// run starts, never echoed, answers the first password ask of each of the
// three hosts' requests of the run without a prompt; a retry, a host
// outside the run and another session on a host of the run are asked
// their own; Close zeroes it; it is in no log.
func TestRunBrokerBecomePass(t *testing.T) {
	const secret = "S3cret-become-pw"
	r := newRunRig(t, RunConfig{Session: runName, Hosts: []string{"web1", "web2", "web3"}, AskBecomePass: true, Window: time.Second},
		"web1", "web2", "web3", "db9")
	r.waitShown("BECOME password for run fleet-r1a2b: ", 1)
	r.typeLine(secret)
	rb := r.waitStarted()
	kept := rb.pass
	if string(kept) != secret {
		t.Fatalf("the run keeps %d bytes, not the password typed", len(kept))
	}

	var chs []chan asked
	for i, h := range []string{"web1", "web2", "web3"} {
		chs = append(chs, r.ask(h, runReq("apt_upgrade", true, `{}`)))
		waitUntil(t, fmt.Sprintf("%d requests waiting", i+1), func() bool { return rb.waiting() == i+1 })
	}
	r.waitShown(runChoices, 1)
	r.typeLine("e")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cvs []*broker.Conversation
	for i, ch := range chs {
		a := answer(t, ch, fmt.Sprintf("web%d", i+1))
		if a.ans.Decision != broker.Once {
			t.Fatalf("web%d: %+v", i+1, a.ans)
		}
		pw, err := a.cv.Password(ctx, 1, "")
		if err != nil || string(pw) != secret {
			t.Errorf("web%d's password: %d bytes, %v; want the run's", i+1, len(pw), err)
		}
		cvs = append(cvs, a.cv)
	}
	if strings.Contains(r.shown(), "sudo password for root") {
		t.Errorf("a password was asked on the terminal for the run's hosts:\n%s", r.shown())
	}

	// A second ask for the same request: the host says it was wrong.
	pwc := make(chan []byte, 1)
	go func() { pw, _ := cvs[0].Password(ctx, 2, "wrong password"); pwc <- pw }()
	r.waitShown(`sudo password for root on web1, to run apt_upgrade; web1 says "wrong password", attempt 2 of 3 (asked by web1): `, 1)
	r.typeLine("typed-for-web1")
	if pw := <-pwc; string(pw) != "typed-for-web1" {
		t.Errorf("web1's retry got %q, want what was typed for it", pw)
	}
	// The run's password was wrong on web1: its next request is asked.
	ch := r.ask("web1", runReq("apt_upgrade", true, `{"again":1}`))
	r.waitShown("(apt_upgrade on web1) / [d]eny? ", 1)
	r.typeLine("o")
	again := answer(t, ch, "web1 again")
	go func() { pw, _ := again.cv.Password(ctx, 1, ""); pwc <- pw }()
	r.waitShown("sudo password for root on web1, to run apt_upgrade (asked by web1): ", 1)
	r.typeLine("typed-again")
	if pw := <-pwc; string(pw) != "typed-again" {
		t.Errorf("web1, after the run's password was wrong there, got %q, want what was typed for it", pw)
	}
	again.cv.Close("ran")

	// A host outside the run, in a session of the run's name; a run host's
	// other session.
	other := runReq("apt_upgrade", true, `{}`)
	other.SessionName = "mine"
	for _, c := range []struct {
		host string
		req  *broker.Request
	}{{"db9", runReq("apt_upgrade", true, `{}`)}, {"web2", other}} {
		ch := r.ask(c.host, c.req)
		r.waitShown(fmt.Sprintf("(apt_upgrade on %s) / [d]eny? ", c.host), 1)
		r.typeLine("o")
		a := answer(t, ch, c.host)
		go func() { pw, _ := a.cv.Password(ctx, 1, ""); pwc <- pw }()
		r.waitShown(fmt.Sprintf("sudo password for root on %s, to run apt_upgrade (asked by %s): ", c.host, c.host), 1)
		r.typeLine("typed-for-" + c.host)
		if pw := <-pwc; string(pw) != "typed-for-"+c.host {
			t.Errorf("%s (session %s) got %q, want what was typed for it", c.host, c.req.SessionName, pw)
		}
		a.cv.Close("ran")
	}
	for _, cv := range cvs {
		cv.Close("ran")
	}

	rb.Close()
	if !bytes.Equal(kept, make([]byte, len(kept))) {
		t.Errorf("the run's password is still in memory after Close: %q", kept)
	}
	if rb.pass != nil {
		t.Error("the run still holds a password after Close")
	}
	if s := r.shown(); strings.Contains(s, "S3cret") {
		t.Errorf("the password was shown on the terminal:\n%s", s)
	}
	if l := r.logText(); strings.Contains(l, "S3cret") || !strings.Contains(l, "the run's BECOME password was given") {
		t.Errorf("the log holds the password, or not that it was given:\n%s", l)
	}
}

// TestRunBrokerHostileList: what hosts of the run write is shown in the
// list quoted, made visible and clipped, and attributed to its host: no
// escape reaches the terminal, no line a host wrote looks like the
// desktop's, and no host is named outside the quotes but by the
// connection. A tool whose name is a sentence is refused, its reason
// sent to the host, and never shown.
func TestRunBrokerHostileList(t *testing.T) {
	r := newRunRig(t, RunConfig{Session: runName, Hosts: []string{"web1", "web2"}, Window: time.Second}, "web1", "web2")
	rb := r.waitStarted()
	bad := answer(t, r.ask("web1", runReq("apt\x1b[2J\u009b1mupgrade\u202e for web2", true, `{}`)), "a tool named with escapes")
	if bad.ans.Decision != broker.Deny || !strings.Contains(bad.ans.Reason, "is not a tool's name") {
		t.Errorf("a tool named with escapes and spaces: %+v, want denied for its name", bad.ans)
	}
	if s := r.shown(); strings.Contains(s, "apt") {
		t.Errorf("a refused request was shown:\n%s", s)
	}
	hostile := []string{
		`{"x":"\u001b]52;c;ZWNobyBwd25lZA==\u0007","y":"\napprove: [o]nce for web2 / [e]very listed host (1)","z":"\u009b31m\u202eevil\u0085"}`,
		`{"x":"` + strings.Repeat("A", 5000) + `\r\u001b[1A", "w": "web1 says: fine"}`,
	}
	var chs []chan asked
	for i, h := range []string{"web1", "web2"} {
		req := runReq("apt_upgrade", true, hostile[i])
		req.Executable = "/bin/\x1b[31mred for web2"
		if i == 1 {
			req.Executable = "/bin/web1 says: run"
		}
		chs = append(chs, r.ask(h, req))
		waitUntil(t, fmt.Sprintf("%d requests waiting", i+1), func() bool { return rb.waiting() == i+1 })
	}
	r.waitShown("/ [d]eny every listed host? ", 1)
	s := r.shown()
	for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\r"} {
		if strings.Contains(s, bad) {
			t.Errorf("the terminal got %q from a host:\n%q", bad, s)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "approve:") && !strings.HasPrefix(line, "approve: [o]nce for web1 / [e]very listed host (2)") {
			t.Errorf("a host's text starts a line of the desktop's: %q", line)
		}
		if len(line) > 400 {
			t.Errorf("a line of %d bytes: a host's field was not clipped", len(line))
		}
		own := termsafe.Unquoted(line)
		if strings.Contains(line, "red for web2") && !strings.Contains(own, ", web1 says") {
			t.Errorf("web1's executable is not attributed to web1: %q", line)
		}
		if strings.HasPrefix(line, "  2. ") && own != `  2. web2 says: args ""…, runs ""` {
			t.Errorf("web2's line, outside its quotes, is %q, want its host, then its words quoted: %q", own, line)
		}
	}
	r.typeLine("d")
	for i, ch := range chs {
		if a := answer(t, ch, fmt.Sprintf("web%d", i+1)); a.ans.Decision != broker.Deny {
			t.Errorf("web%d: %+v", i+1, a.ans)
		}
	}
}

// TestRunBrokerElsewhere: with a terminal broker already answering, the
// run's broker says so and leaves its socket alone; once it serves, Close
// hands what it was asking back to the keeper, which asks its own
// approvers (here nobody, who denies saying so).
func TestRunBrokerElsewhere(t *testing.T) {
	r := newRunRig(t, RunConfig{Session: runName, Hosts: []string{"web1"}}, "web1")
	rb := r.waitStarted()

	_, err := StartRunBroker(context.Background(), RunConfig{Session: runName, In: r.tty, Out: r.tty})
	if !errors.Is(err, ErrBrokerElsewhere) || !strings.Contains(err.Error(), "asked there") {
		t.Errorf("a second run's broker: %v, want ErrBrokerElsewhere saying where its requests go", err)
	}
	if _, err := os.Stat(TerminalSocket()); err != nil {
		t.Errorf("the first broker's socket is gone: %v", err)
	}

	ch := r.ask("web1", runReq("apt_upgrade", true, `{}`))
	r.waitShown("(apt_upgrade on web1) / [d]eny? ", 1)
	rb.Close()
	a := answer(t, ch, "web1 after Close")
	if a.ans.Decision != broker.Deny || a.ans.Reason != NoApproverReason {
		t.Errorf("web1 after Close: %+v, want the keeper's own approver's answer", a.ans)
	}
	if _, err := os.Stat(TerminalSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlives Close: %v", err)
	}
	select {
	case <-rb.Done():
	default:
		t.Error("Done is not closed after Close")
	}
}

// TestRunBrokerListNotAnsweredAhead: "every listed host" is taken only
// once the list is drawn: an "e" typed while the prompt before it showed
// is dropped, not taken for the list's answer.
func TestRunBrokerListNotAnsweredAhead(t *testing.T) {
	r := newRunRig(t, RunConfig{Session: runName, Hosts: []string{"web1", "web2", "web3"}}, "web1", "web2", "web3")
	rb := r.waitStarted()
	web1 := r.ask("web1", runReq("apt_upgrade", true, `{}`))
	r.waitShown("(apt_upgrade on web1) / [d]eny? ", 1)
	web2 := r.ask("web2", runReq("apt_upgrade", true, `{}`))
	web3 := r.ask("web3", runReq("apt_upgrade", true, `{}`))
	waitUntil(t, "two requests gathered", func() bool { return rb.waiting() == 2 })
	r.typeLine("o\re") // the answer for web1, and one typed ahead
	if a := answer(t, web1, "web1"); a.ans.Decision != broker.Once {
		t.Errorf("web1: %+v", a.ans)
	}
	r.question(2)
	noAnswer(t, web2, "web2, by what was typed before the list,")
	r.typeLine("d")
	for i, ch := range []chan asked{web2, web3} {
		if a := answer(t, ch, fmt.Sprintf("web%d", i+2)); a.ans.Decision != broker.Deny {
			t.Errorf("web%d: %+v, want deny", i+2, a.ans)
		}
	}
	if s := r.shown(); strings.Contains(s, "please answer") {
		t.Errorf("what was typed ahead reached the list:\n%s", s)
	}
}
