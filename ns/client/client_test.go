package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/ns"
	"ollie/ns/nsdir"
	"ollie/ns/stream"
)

// fixture is a real ns.Server on a Unix socket, serving a small tree with
// one file of each kind.
type fixture struct {
	sock   string
	srv    *ns.Server
	stream *stream.Stream
	bus    *ns.Bus

	mu     sync.Mutex
	writes []string // each request the log file received

	slowStarted chan struct{} // the slow rdwr handler is running
	slowEnded   chan error    // ... and returned, with its context's error
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{
		stream:      stream.NewStream(0),
		bus:         &ns.Bus{},
		slowStarted: make(chan struct{}, 1),
		slowEnded:   make(chan error, 1),
	}
	f.stream.Write([]byte("start\n"))
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	ended := stream.NewStream(0)
	ended.Write([]byte("all of it\n"))
	ended.Close()
	sessions := map[string]string{"s1": "alpha", "s2": "beta"} // id → name
	each := &ns.Each{
		List: func(ctx context.Context, c *ns.Call) ([]ns.Entry, error) {
			return []ns.Entry{{Name: "alpha", Key: "s1"}, {Name: "beta", Key: "s2"}}, nil
		},
		Lookup: func(ctx context.Context, c *ns.Call, name string) (ns.Entry, bool) {
			for id, n := range sessions {
				if name == id || name == n {
					return ns.Entry{Name: n, Key: id}, true
				}
			}
			return ns.Entry{}, false
		},
	}
	root := ns.Dir("", 0555, "",
		ns.ReadFile("hello", 0444, "A greeting.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			return []byte("hello\n"), nil
		}),
		ns.ReadFile("big", 0444, "Larger than one read.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			return big, nil
		}),
		ns.ReadFile("whoami", 0444, "The attached user.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			return []byte(c.User + "\n"), nil
		}),
		ns.WriteFile("log", 0222, "Records each request.", func(ctx context.Context, c *ns.Call, data []byte) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.writes = append(f.writes, string(data))
			return nil
		}),
		ns.RdWrFile("echo", 0666, "Answers got: REQUEST.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			return append([]byte("got: "), req...), nil
		}),
		ns.RdWrFile("fail", 0666, "Always fails.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			return nil, errors.New("fail: no good")
		}),
		ns.RdWrFile("slow", 0666, "Answers when interrupted.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			f.slowStarted <- struct{}{}
			<-ctx.Done()
			f.slowEnded <- ctx.Err()
			return nil, ctx.Err()
		}),
		ns.StreamFile("stream", 0444, "Never ends by itself.", func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
			return f.stream, nil
		}),
		ns.StreamFile("ended", 0444, "A stream already closed.", func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
			return ended, nil
		}),
		&ns.Node{Name: "event", Mode: 0666, Doc: "Events.", Subscribe: func(ctx context.Context, c *ns.Call, filter []byte) (ns.Source, error) {
			return f.bus.Subscribe(strings.Fields(string(filter))...), nil
		}},
		ns.Dir("session", 0555, "Sessions.",
			ns.Dynamic("sname", 0555, "A session.", each,
				ns.ReadFile("id", 0444, "Its ID.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
					return []byte(c.Key("sname") + "\n"), nil
				}),
			),
		),
	)
	tree, err := ns.NewTree(root, "owner", "owner")
	if err != nil {
		t.Fatal(err)
	}
	f.srv = &ns.Server{Tree: tree, Trace: traceW(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Identify: func(uname, aname string) string {
			if aname == "alice-token" {
				return "alice"
			}
			return ""
		}}
	f.sock = listenUnix(t, f.srv)
	return f
}

// listenUnix serves srv on a Unix socket in a fresh directory, also set as
// $NAMESPACE, until the test ends.
func listenUnix(t *testing.T, srv *ns.Server) string {
	t.Helper()
	// t.TempDir paths can be too long for a socket address.
	dir, err := os.MkdirTemp("", "nsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("NAMESPACE", dir)
	sock := filepath.Join(dir, nsdir.Service)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeUnix(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return sock
}

func (f *fixture) dial(t *testing.T) *Conn {
	t.Helper()
	c, err := DialAs(f.sock, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) logged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.writes)
}

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond until it holds or the test has waited too long.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, 5*time.Second, what, cond)
}

// wait returns what errc yields, failing the test if it takes too long.
func wait(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

func TestFiles(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx := context.Background()

	if b, err := c.ReadAll(ctx, "hello"); err != nil || string(b) != "hello\n" {
		t.Errorf("ReadAll hello = %q, %v", b, err)
	}
	if b, err := c.ReadAll(ctx, "/session/../big"); err != nil || len(b) != 300<<10 || !bytes.HasPrefix(b, []byte("0123")) {
		t.Errorf("ReadAll big = %d bytes, %v", len(b), err)
	}
	if b, err := c.ReadAll(ctx, "ended"); err != nil || string(b) != "all of it\n" {
		t.Errorf("ReadAll ended = %q, %v", b, err)
	}
	if b, err := c.ReadAll(ctx, "session/alpha/id"); err != nil || string(b) != "s1\n" {
		t.Errorf("ReadAll session/alpha/id = %q, %v", b, err)
	}
	if b, err := c.ReadAll(ctx, "whoami"); err != nil || string(b) != "admin\n" {
		t.Errorf("ReadAll whoami = %q, %v", b, err)
	}

	// Each Write is one request, however large; larger than the iounit it
	// is split.
	large := strings.Repeat("x", 200<<10)
	for _, data := range []string{"one\n", "", "two words\n", large} {
		if err := c.Write(ctx, "log", []byte(data)); err != nil {
			t.Fatalf("Write %.10q: %v", data, err)
		}
	}
	got := f.logged()
	iounit := c.w.iounit()
	want := []string{"one\n", "", "two words\n", large[:iounit], large[iounit:]}
	if !slices.Equal(got, want) {
		t.Errorf("log received %d requests %.40q, want %d", len(got), got, len(want))
	}

	if b, err := c.RdWr(ctx, "echo", []byte("hi")); err != nil || string(b) != "got: hi" {
		t.Errorf("RdWr echo = %q, %v", b, err)
	}
	if b, err := c.RdWr(ctx, "echo", bytes.Repeat([]byte("y"), 100<<10)); err != nil || len(b) != 5+100<<10 {
		t.Errorf("RdWr echo large = %d bytes, %v", len(b), err)
	}

	d, err := c.Stat(ctx, "/session/beta")
	if err != nil || d.Name != "beta" || d.Qid.Type&plan9.QTDIR == 0 {
		t.Errorf("Stat session/beta = %v, %v", d, err)
	}
	dirs, err := c.Ls(ctx, "/")
	var names []string
	for _, d := range dirs {
		names = append(names, d.Name)
	}
	if err != nil || strings.Join(names, " ") != "hello big whoami log echo fail slow stream ended event session" {
		t.Errorf("Ls / = %v, %v", names, err)
	}
	if dirs, err := c.Ls(ctx, "session"); err != nil || len(dirs) != 2 || dirs[0].Name != "alpha" {
		t.Errorf("Ls session = %v, %v", dirs, err)
	}
	if dirs, err := c.Ls(ctx, "session/s2/id"); err != nil || len(dirs) != 1 || dirs[0].Name != "/session/s2/id" {
		t.Errorf("Ls of a file = %v, %v", dirs, err)
	}
}

func TestServerErrors(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		path string
		msg  string
	}{
		{"rdwr handler", func() error { _, err := c.RdWr(ctx, "fail", []byte("x")); return err }, "/fail", "fail: no good"},
		{"missing", func() error { _, err := c.ReadAll(ctx, "nope"); return err }, "/nope", "nope: file does not exist"},
		{"read-only", func() error { return c.Write(ctx, "hello", []byte("x")) }, "/hello", "hello: file is read-only"},
		{"rdwr read only", func() error { _, err := c.ReadAll(ctx, "echo"); return err }, "/echo", "echo: request file"},
		{"stat missing", func() error { _, err := c.Stat(ctx, "session/nobody"); return err }, "/session/nobody", "not"},
	} {
		err := tc.call()
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Path != tc.path || !IsServerError(err) || !strings.Contains(pe.Err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want a server error on %s containing %q", tc.name, err, tc.path, tc.msg)
		}
		if IsInterrupted(err) || errors.Is(err, ErrConnLost) {
			t.Errorf("%s: %v is not an interruption or a lost connection", tc.name, err)
		}
	}
	for _, dir := range []string{"session", "/"} {
		if _, err := c.ReadAll(ctx, dir); !errors.Is(err, ErrIsDir) || IsServerError(err) {
			t.Errorf("ReadAll of directory %s: %v", dir, err)
		}
	}
	// The connection is still fine.
	if b, err := c.ReadAll(ctx, "hello"); err != nil || string(b) != "hello\n" {
		t.Errorf("after errors: ReadAll = %q, %v", b, err)
	}
}

func TestInterruptBlockedRead(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx := context.Background()

	var out syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- c.Follow(ctx, "stream", &out) }()
	waitFor(t, "the stream's start", func() bool { return out.String() == "start\n" })
	f.stream.Write([]byte("more\n"))
	waitFor(t, "more of the stream", func() bool { return out.String() == "start\nmore\n" })

	// The blocked read does not hold up other requests on the connection.
	if b, err := c.ReadAll(ctx, "hello"); err != nil || string(b) != "hello\n" {
		t.Fatalf("ReadAll beside a blocked read = %q, %v", b, err)
	}
	select {
	case err := <-errc:
		t.Fatalf("Follow returned early: %v", err)
	default:
	}

	var wg sync.WaitGroup
	for range 3 { // idempotent and safe concurrently
		wg.Add(1)
		go func() { defer wg.Done(); c.Interrupt() }()
	}
	wg.Wait()
	err := wait(t, "the interrupted Follow", errc)
	if !IsInterrupted(err) || !IsServerError(err) {
		t.Fatalf("Follow after Interrupt: %v, want interrupted", err)
	}
	c.Interrupt() // nothing in flight

	// Tags are reused after the flush: many requests still work.
	for i := range 50 {
		req := fmt.Sprint(i)
		if b, err := c.RdWr(ctx, "echo", []byte(req)); err != nil || string(b) != "got: "+req {
			t.Fatalf("RdWr after Interrupt = %q, %v", b, err)
		}
	}
	// And a read resumes the stream.
	out = syncBuffer{}
	go func() { errc <- c.Follow(ctx, "stream", &out) }()
	waitFor(t, "the stream again", func() bool { return out.String() == "start\nmore\n" })
	f.stream.Close()
	if err := wait(t, "the stream's end", errc); err != nil {
		t.Errorf("Follow to the end: %v", err)
	}
}

// Cancelling the context ends a call wherever it is, also before its read
// is sent.
func TestContextCancel(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	for i := range 30 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- c.Follow(ctx, "stream", io.Discard) }()
		if i%3 == 1 {
			// The pause is the point: it lets the cancel land at a
			// different stage of the call each time.
			await.For(t.Context(), time.Duration(i)*100*time.Microsecond)
		}
		cancel()
		if err := wait(t, "the cancelled Follow", errc); err == nil {
			t.Fatalf("cancelled Follow returned nil")
		}
	}
	if b, err := c.ReadAll(context.Background(), "hello"); err != nil || string(b) != "hello\n" {
		t.Errorf("after cancels: ReadAll = %q, %v", b, err)
	}

	// A request that blocks in its handler: the handler sees the flush.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.RdWr(ctx, "slow", []byte("wait")); errc <- err }()
	<-f.slowStarted
	cancel()
	if err := wait(t, "the cancelled RdWr", errc); !IsInterrupted(err) {
		t.Errorf("cancelled RdWr: %v, want interrupted", err)
	}
	if err := <-f.slowEnded; !errors.Is(err, context.Canceled) {
		t.Errorf("slow handler's context: %v", err)
	}

	// An already ended context sends nothing.
	if _, err := c.ReadAll(ctx, "hello"); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadAll with an ended context: %v", err)
	}
}

func TestSubscribe(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- c.Subscribe(ctx, "event", []byte("a.*\n"), &out) }()
	// The subscription exists once the filter is written; publish until
	// an event arrives.
	waitFor(t, "an event", func() bool {
		f.bus.Publish("b.skip", "no")
		f.bus.Publish("a.x", "yes")
		return strings.Contains(out.String(), "a.x yes\n")
	})
	cancel()
	if err := wait(t, "the cancelled Subscribe", errc); !IsInterrupted(err) {
		t.Errorf("cancelled Subscribe: %v", err)
	}
	if strings.Contains(out.String(), "b.skip") {
		t.Errorf("filter let through: %q", out.String())
	}
}

// TestSubscribeFrom: once subscribed is called the filter is in place,
// so an event published then reaches the subscriber: the first one,
// published once, with no retry.
func TestSubscribeFrom(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	errc := make(chan error, 1)
	subscribed := func() { f.bus.Publish("a.first", "once") }
	go func() { errc <- c.SubscribeFrom(ctx, "event", []byte("a.*"), subscribed, &out) }()
	waitFor(t, "the event published when subscribed", func() bool { return strings.Contains(out.String(), "a.first once\n") })
	cancel()
	if err := wait(t, "the cancelled SubscribeFrom", errc); !IsInterrupted(err) {
		t.Errorf("cancelled SubscribeFrom: %v", err)
	}
}

func TestDial(t *testing.T) {
	f := newFixture(t)

	// The default address follows $NAMESPACE; the user comes from
	// $OLLIE_UNAME, and on the Unix socket the server's own user is the
	// admin whatever it names.
	t.Setenv("OLLIE_UNAME", "alice")
	c, err := Dial("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := c.ReadAll(context.Background(), "whoami"); err != nil || string(b) != "admin\n" {
		t.Errorf("whoami as alice = %q, %v", b, err)
	}

	// A sandboxed peer is who its $OLLIE_AGENT_TOKEN proves.
	for token, want := range map[string]string{"alice-token": "alice\n", "forged": "none\n", "": "none\n"} {
		t.Setenv(TokenEnv, token)
		a, b := net.Pipe()
		go f.srv.ServeConn(a, ns.Peer{Kind: ns.Sandboxed, UID: -1})
		c, err := NewConn(b, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := c.ReadAll(context.Background(), "whoami"); err != nil || string(b) != want {
			t.Errorf("whoami with token %q = %q, %v; want %q", token, b, err, want)
		}
		c.Close()
	}
	t.Setenv(TokenEnv, "")

	// TCP, untrusted: the empty user is none.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.Serve(l)
	host, port, _ := net.SplitHostPort(l.Addr().String())
	for _, addr := range []string{l.Addr().String(), "tcp!" + host + "!" + port} {
		c, err := DialAs(addr, "")
		if err != nil {
			t.Fatalf("DialAs %s: %v", addr, err)
		}
		if b, err := c.ReadAll(context.Background(), "whoami"); err != nil || string(b) != "none\n" {
			t.Errorf("whoami over %s = %q, %v", addr, b, err)
		}
		c.Close()
	}

	missing := filepath.Join(filepath.Dir(f.sock), "other")
	_, err = DialAs(missing, "")
	var de *DialError
	if !errors.As(err, &de) || err.Error() != "ollie: no olliesrv at "+missing+" (start it with `olliesrv`)" {
		t.Errorf("dial missing socket: %v", err)
	}
	// A socket file with no server behind it.
	stale := filepath.Join(filepath.Dir(f.sock), "stale")
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close()
	if _, err := DialAs(stale, ""); err == nil || !strings.Contains(err.Error(), "no olliesrv at "+stale) {
		t.Errorf("dial stale socket: %v", err)
	}
	if _, err := DialAs("tcp!nohost", ""); err == nil || !strings.Contains(err.Error(), "bad address") {
		t.Errorf("dial bad address: %v", err)
	}
}

// A call whose connection is closed under it, and one made on a closed
// connection, both fail with ErrConnLost: each case is set up on purpose,
// rather than left to which comes first.
func TestLostConnection(t *testing.T) {
	f := newFixture(t)

	c := f.dial(t)
	var out syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- c.Follow(context.Background(), "stream", &out) }()
	waitFor(t, "the stream's start", func() bool { return out.String() == "start\n" })
	c.Close()
	err := wait(t, "Follow on a closed connection", errc)
	if !errors.Is(err, ErrConnLost) || IsServerError(err) {
		t.Errorf("Follow blocked when the connection closed: %v, want ErrConnLost", err)
	}

	c = f.dial(t)
	c.Close()
	if err := c.Follow(context.Background(), "stream", io.Discard); !errors.Is(err, ErrConnLost) || IsServerError(err) {
		t.Errorf("Follow on a connection already closed: %v, want ErrConnLost", err)
	}
}

// When the connection dies, every call waiting on it returns, and later
// calls fail at once.
func TestConnectionDies(t *testing.T) {
	f := newFixture(t)
	// A socket pair, not net.Pipe: a synchronous pipe deadlocks a client
	// and a server that each write before they read.
	l, err := net.Listen("unix", f.sock+".pair")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		sc, err := l.Accept()
		if err == nil {
			accepted <- sc
			f.srv.ServeConn(sc, ns.Peer{Kind: ns.Owner, UID: -1})
		}
	}()
	cside, err := net.Dial("unix", f.sock+".pair")
	if err != nil {
		t.Fatal(err)
	}
	sside := <-accepted
	c, err := NewConn(cside, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	errc := make(chan error, 3)
	var outs [2]syncBuffer
	for i := range outs {
		go func() { errc <- c.Follow(ctx, "stream", &outs[i]) }()
	}
	go func() { _, err := c.RdWr(ctx, "slow", nil); errc <- err }()
	<-f.slowStarted
	for i := range outs {
		waitFor(t, "a blocked Follow", func() bool { return outs[i].String() == "start\n" })
	}
	sside.Close()
	for range 3 {
		err := wait(t, "a call on a dead connection", errc)
		if !errors.Is(err, ErrConnLost) || IsServerError(err) {
			t.Errorf("call on a dead connection: %v, want ErrConnLost", err)
		}
	}
	if _, err := c.ReadAll(ctx, "hello"); !errors.Is(err, ErrConnLost) {
		t.Errorf("ReadAll on a dead connection: %v", err)
	}
}

func TestSplitAddr(t *testing.T) {
	t.Setenv("NAMESPACE", "/tmp/nsdir")
	for _, tc := range []struct{ in, network, addr string }{
		{"", "unix", "/tmp/nsdir/ollie"},
		{"/run/x/ollie", "unix", "/run/x/ollie"},
		{"sock", "unix", "sock"},
		{"unix!/a/b", "unix", "/a/b"},
		{"tcp!example.org!564", "tcp", "example.org:564"},
		{"net!::1!564", "tcp", "[::1]:564"},
		{"localhost:564", "tcp", "localhost:564"},
		{"[::1]:564", "tcp", "[::1]:564"},
		{"./a:1", "unix", "./a:1"},
	} {
		network, addr, err := splitAddr(tc.in)
		if err != nil || network != tc.network || addr != tc.addr {
			t.Errorf("splitAddr(%q) = %q, %q, %v; want %q, %q", tc.in, network, addr, err, tc.network, tc.addr)
		}
	}
	for _, bad := range []string{"tcp!host", "tcp!!1", "udp!h!1", "tcp!a!b!c"} {
		if _, _, err := splitAddr(bad); err == nil {
			t.Errorf("splitAddr(%q): no error", bad)
		}
	}
}

func TestWirePartialWrite(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := newWire(a)
	msg, _ := (&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 1}).Bytes()
	if _, err := w.Write(msg[:5]); err == nil {
		t.Errorf("partial message accepted")
	}
}

// traceW returns where the fixture server prints 9P messages: stderr when
// $TRACE9P is set, to debug a test.
func traceW() io.Writer {
	if os.Getenv("TRACE9P") != "" {
		return os.Stderr
	}
	return nil
}

// FollowFrom reads a stream from an offset, or from what has been
// written when it opens (an open stream's length), and says how far it
// got, so that a caller can go on from there.
func TestFollowFrom(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	if d, err := c.Stat(context.Background(), "ended"); err != nil || d.Length != 0 {
		t.Errorf("a stream's length before any open: %v %v, want 0 (stat by name opens nothing)", d, err)
	}
	if n, err := c.Size(context.Background(), "ended"); err != nil || n != int64(len("all of it\n")) {
		t.Errorf("Size of ended: %d %v", n, err)
	}
	var from3 bytes.Buffer
	off, err := c.FollowFrom(context.Background(), "ended", 3, &from3)
	if err != nil || from3.String() != " of it\n" || off != int64(len("all of it\n")) {
		t.Errorf("from 3: %q, offset %d, %v", from3.String(), off, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	errc := make(chan error, 1)
	var reached int64
	go func() {
		var err error
		reached, err = c.FollowFrom(ctx, "stream", -1, out)
		errc <- err
	}()
	// What was written before is not read; what comes after is. Writes
	// go on until the follower has the marker: it may open after some.
	await.Until(t, 5*time.Second, "the follower to get the marker", func() bool {
		if strings.Contains(out.String(), "marker\n") {
			return true
		}
		f.stream.Write([]byte("marker\n"))
		return false
	}, func() string { return fmt.Sprintf("it got %q", out.String()) })
	cancel()
	wait(t, "FollowFrom to end", errc)
	if strings.Contains(out.String(), "start") {
		t.Errorf("read what was written before it opened: %q", out.String())
	}
	// It began at the stream's length when it opened, at least "start\n".
	if got := int64(len(out.String())); reached < int64(len("start\n"))+got || reached > f.stream.Size() {
		t.Errorf("reached offset %d after reading %d bytes of a stream of %d", reached, got, f.stream.Size())
	}
}

// ReadLimit reads a file up to its limit, and names a longer one rather
// than keep it, a stream that goes on included.
func TestReadLimit(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if b, err := c.ReadLimit(ctx, "hello", 6); err != nil || string(b) != "hello\n" {
		t.Errorf("ReadLimit hello 6 = %q, %v; want the whole file at exactly its limit", b, err)
	}
	if b, err := c.ReadLimit(ctx, "big", 1<<20); err != nil || len(b) != 300<<10 {
		t.Errorf("ReadLimit big 1 MiB = %d bytes, %v", len(b), err)
	}
	tooLong := func(what, name string, limit int) {
		t.Helper()
		b, err := c.ReadLimit(ctx, name, limit)
		var pe *fs.PathError
		if !errors.Is(err, ErrTooLong) || !errors.As(err, &pe) || pe.Path != Clean(name) {
			t.Errorf("ReadLimit %s = %v, want an error naming %s that wraps ErrTooLong", what, err, Clean(name))
		}
		if want := fmt.Sprintf("read %s: longer than its limit of %d bytes", Clean(name), limit); err != nil && err.Error() != want {
			t.Errorf("ReadLimit %s: error %q, want %q", what, err, want)
		}
		if len(b) > limit {
			t.Errorf("ReadLimit %s kept %d bytes, more than its limit %d", what, len(b), limit)
		}
	}
	tooLong("hello 5", "hello", 5)
	tooLong("big 200 KiB", "big", 200<<10)
	// A stream never ends by itself: past the limit the read stops.
	f.stream.Write(bytes.Repeat([]byte("x"), 200))
	tooLong("a stream past its limit", "stream", 100)

	if _, err := c.ReadLimit(ctx, "nosuch", 10); err == nil || errors.Is(err, ErrTooLong) {
		t.Errorf("ReadLimit of a missing file = %v, want the server's error", err)
	}
}

// TestIsNotExist: a walk to a name the server does not have is told from
// other answers and from failures to reach it.
func TestIsNotExist(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.ReadAll(ctx, "nosuch/file")
	if !IsNotExist(err) {
		t.Errorf("reading a missing file: %v, IsNotExist false", err)
	}
	if _, err := c.ReadAll(ctx, "hello"); IsNotExist(err) {
		t.Errorf("reading hello: %v counted as not existing", err)
	}
	c.Close()
	if _, err := c.ReadAll(ctx, "nosuch"); IsNotExist(err) {
		t.Errorf("a closed connection's error %v counted as a missing file", err)
	}
}
