package resume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"

	"ollie/internal/await"
	"ollie/ns"
	"ollie/ns/client"
	"ollie/tunnel/resume"
)

// streamContent is 1 MiB of noise followed by numbered lines: noise finds
// a byte lost or doubled anywhere, the lines say where.
func streamContent() []byte {
	b := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := range 20000 {
		b = fmt.Appendf(b, "line %06d\n", i)
	}
	return b
}

func TestStreamSurvivesCuts(t *testing.T) {
	e := newEnv(t, 8<<20)
	fsys := mount(t, e.addr)
	fid := open(t, fsys, "stream", plan9.OREAD)
	want := streamContent()

	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(fid)
		done <- result{b, err}
	}()

	// Cut while the read is blocked at the end of an empty stream: once
	// its Tread has reached the server, and again once the proxy has sent
	// it on the new connection.
	cuts := 0
	for range 2 {
		e.cut.waitRead(t, 0)
		e.cut.cut()
		cuts++
	}
	// Then while data flows, at every 128 KiB, and once in a pause: when
	// the reader has caught up and waits for more.
	const chunk = 8 << 10
	for off := 0; off < len(want); off += chunk {
		end := min(off+chunk, len(want))
		e.world.stream.Write(want[off:end])
		if off > 0 && off%(128<<10) == 0 {
			e.cut.cut()
			cuts++
		}
		if off == 512<<10 {
			e.cut.waitRead(t, uint64(end))
			e.cut.cut()
			cuts++
		}
	}
	e.world.stream.Close()

	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("read: %v", r.err)
		}
		if !bytes.Equal(r.b, want) {
			t.Fatalf("read %d bytes, want %d; first difference at %d", len(r.b), len(want), firstDiff(r.b, want))
		}
	case <-time.After(timeout):
		t.Fatal("read did not finish")
	}
	if n := e.cut.dialCount(); n < 2 {
		t.Errorf("%d dials for %d cuts: the cuts missed", n, cuts)
	}
	t.Logf("%d bytes through %d cuts, %d dials", len(want), cuts, e.cut.dialCount())
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestFilesAfterCut(t *testing.T) {
	e := newEnv(t, 0)
	fsys := mount(t, e.addr)
	hello := open(t, fsys, "hello", plan9.OREAD)
	if got := readAll(t, hello); got != "hello, world\n" {
		t.Fatalf("hello: %q", got)
	}
	leaf := open(t, fsys, deepPath, plan9.OREAD)
	root := open(t, fsys, "/", plan9.OREAD)
	dirs, err := root.Dirreadall()
	if err != nil {
		t.Fatal(err)
	}
	before := len(dirs)

	e.cut.cut()

	if got := readAll(t, hello); got != "hello, world\n" {
		t.Errorf("hello after the cut: %q", got)
	}
	if d, err := hello.Stat(); err != nil || d.Name != "hello" {
		t.Errorf("stat of an open fid after the cut: %v, %v", d, err)
	}
	if got := readAll(t, leaf); got != "leaf\n" {
		t.Errorf("%s after the cut: %q", deepPath, got)
	}
	root.Seek(0, io.SeekStart)
	if dirs, err := root.Dirreadall(); err != nil || len(dirs) != before {
		t.Errorf("directory read after the cut: %d entries (want %d), %v", len(dirs), before, err)
	}
	if d, err := fsys.Stat("deep/d1"); err != nil || d.Qid.Type&plan9.QTDIR == 0 {
		t.Errorf("walk and stat after the cut: %v, %v", d, err)
	}
	again := open(t, fsys, "hello", plan9.OREAD)
	if got := readAll(t, again); got != "hello, world\n" {
		t.Errorf("new open after the cut: %q", got)
	}
	for _, f := range []*p9.Fid{hello, leaf, root, again} {
		if err := f.Close(); err != nil {
			t.Errorf("clunk: %v", err)
		}
	}
	if n := e.cut.dialCount(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

func TestWriteInFlight(t *testing.T) {
	e := newEnv(t, 0)
	hold := make(chan struct{})
	defer close(hold)
	e.world.mu.Lock()
	e.world.hold = hold
	e.world.mu.Unlock()
	fsys := mount(t, e.addr)

	ctl := open(t, fsys, "ctl", plan9.OWRITE)
	errc := make(chan error, 1)
	go func() {
		_, err := ctl.Write([]byte("reboot"))
		errc <- err
	}()
	select {
	case <-e.world.entered:
	case <-time.After(timeout):
		t.Fatal("write did not reach the server")
	}
	e.cut.cut()
	select {
	case err := <-errc:
		if !errors.Is(err, resume.ErrUncertain) {
			t.Fatalf("write in flight across a cut: %v, want %q", err, resume.ErrUncertain)
		}
	case <-time.After(timeout):
		t.Fatal("write in flight across a cut never returned")
	}
	if _, err := ctl.Write([]byte("again")); !errors.Is(err, resume.ErrLost) {
		t.Errorf("write to a written fid after a cut: %v, want %q", err, resume.ErrLost)
	}
	if err := ctl.Close(); err != nil {
		t.Errorf("clunk of a lost fid: %v", err)
	}

	e.world.mu.Lock()
	e.world.hold = nil
	e.world.mu.Unlock()
	echo := open(t, fsys, "echo", plan9.ORDWR)
	if got := rdwr(t, echo, "ping"); got != "PING" {
		t.Fatalf("echo: %q", got)
	}
	e.cut.cut()
	if _, err := echo.ReadAt(make([]byte, 100), 0); !errors.Is(err, resume.ErrLost) {
		t.Errorf("read of a request file across a cut: %v, want %q", err, resume.ErrLost)
	}
	if err := echo.Close(); err != nil {
		t.Errorf("clunk of a lost fid: %v", err)
	}
	echo = open(t, fsys, "echo", plan9.ORDWR)
	if got := rdwr(t, echo, "pong"); got != "PONG" {
		t.Errorf("echo reopened after the cut: %q", got)
	}
	ctl = open(t, fsys, "ctl", plan9.OWRITE)
	if _, err := ctl.Write([]byte("ok")); err != nil {
		t.Errorf("write on a new fid after the cut: %v", err)
	}
	e.world.mu.Lock()
	writes := strings.Join(e.world.writes, ",")
	e.world.mu.Unlock()
	if writes != "ok" {
		t.Errorf("the server saw writes %q, want %q", writes, "ok")
	}
}

func rdwr(t *testing.T, fid *p9.Fid, req string) string {
	t.Helper()
	if _, err := fid.Write([]byte(req)); err != nil {
		t.Fatalf("write: %v", err)
	}
	b := make([]byte, 100)
	n, err := fid.ReadAt(b, 0)
	if err != nil && n == 0 {
		t.Fatalf("read: %v", err)
	}
	return string(b[:n])
}

func TestServerAway(t *testing.T) {
	e := newEnv(t, 0)
	fsys := mount(t, e.addr)
	hello := open(t, fsys, "hello", plan9.OREAD)
	const away = 300 * time.Millisecond
	e.cut.failFor(away)
	start := time.Now()
	e.cut.cut()
	if got := readAll(t, hello); got != "hello, world\n" {
		t.Errorf("hello: %q", got)
	}
	if d, err := fsys.Stat("hello"); err != nil || d.Name != "hello" {
		t.Errorf("stat: %v, %v", d, err)
	}
	if elapsed := time.Since(start); elapsed < away-50*time.Millisecond {
		t.Errorf("requests completed after %v, while the server was away for %v", elapsed, away)
	}
	e.mu.Lock()
	states := e.states
	e.mu.Unlock()
	if len(states) < 3 || !strings.HasPrefix(states[len(states)-2], "reconnecting: ") || states[len(states)-1] != "connected" {
		t.Errorf("states %q, want ..., reconnecting: ..., connected", states)
	}
}

func TestReplayFails(t *testing.T) {
	e := newEnv(t, 0)
	fsys := mount(t, e.addr)
	one := open(t, fsys, "one/data", plan9.OREAD)
	two := open(t, fsys, "two/data", plan9.OREAD)
	if got := readAll(t, one); got != "one\n" {
		t.Fatalf("one/data: %q", got)
	}
	e.world.mu.Lock()
	delete(e.world.entries, "one")
	e.world.mu.Unlock()
	e.cut.cut()

	if _, err := one.ReadAt(make([]byte, 10), 0); !errors.Is(err, resume.ErrLost) {
		t.Errorf("read of a file gone during the cut: %v, want %q", err, resume.ErrLost)
	}
	if _, err := one.Stat(); !errors.Is(err, resume.ErrLost) {
		t.Errorf("stat of a file gone during the cut: %v, want %q", err, resume.ErrLost)
	}
	if err := one.Close(); err != nil {
		t.Errorf("clunk of a lost fid: %v", err)
	}
	if got := readAll(t, two); got != "two\n" {
		t.Errorf("two/data after the cut: %q", got)
	}
	if _, err := fsys.Open("one/data", plan9.OREAD); err == nil {
		t.Error("open of a removed file succeeded")
	}
}

// follower starts c.Follow of the stream and returns once its first byte
// has arrived, so that the read is then blocked in the server.
func follower(t *testing.T, c *client.Conn, ctx context.Context) <-chan error {
	t.Helper()
	first := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, "stream", writerFunc(func(p []byte) (int, error) {
			once.Do(func() { close(first) })
			return len(p), nil
		}))
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("follow: %v", err)
	case <-time.After(timeout):
		t.Fatal("follow: nothing read")
	}
	return done
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestFlush(t *testing.T) {
	e := newEnv(t, 0)
	e.world.stream.Write([]byte("x"))
	c, err := client.DialAs(e.addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// interrupted cancels a follow, which must end interrupted, then reads
	// hello, after back (if given) has brought the server back.
	interrupted := func(what string, cancel func(), done <-chan error, back ...func()) {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if !client.IsInterrupted(err) {
				t.Errorf("%s: %v, want interrupted", what, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the flush did not return", what)
		}
		for _, f := range back {
			f()
		}
		b, err := c.ReadAll(context.Background(), "hello")
		if err != nil || string(b) != "hello, world\n" {
			t.Errorf("%s, then read hello: %q, %v", what, b, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	interrupted("flush through the proxy", cancel, follower(t, c, ctx))

	ctx, cancel = context.WithCancel(context.Background())
	done := follower(t, c, ctx)
	e.cut.failFor(timeout)
	n := e.stateCount()
	e.cut.cut()
	e.waitReconnecting(t, n) // the proxy sees the cut first
	interrupted("flush while the server is away", cancel, done, func() { e.cut.failFor(0) })

	ctx, cancel = context.WithCancel(context.Background())
	done = follower(t, c, ctx)
	e.cut.cut()
	interrupted("flush across a cut", cancel, done)
}

func TestCloseLeaksNothing(t *testing.T) {
	e := newEnv(t, 0)
	e.world.stream.Write([]byte("x"))
	before := runtime.NumGoroutine()

	var dones []<-chan error
	var conns []*client.Conn
	for range 3 {
		c, err := client.DialAs(e.addr, "")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		dones = append(dones, follower(t, c, context.Background()))
	}
	// One client whose server is away: its session sits in the dial loop.
	e.cut.failFor(timeout)
	n := e.stateCount()
	e.cut.cut()
	e.waitReconnecting(t, n)

	if err := e.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	for i, done := range dones {
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("follow %d: no error after Close", i)
			}
		case <-time.After(timeout):
			t.Fatalf("follow %d: still blocked after Close", i)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	await.Until(t, timeout, fmt.Sprintf("goroutines back to the %d before", before),
		func() bool { return runtime.NumGoroutine() <= before },
		func() string {
			buf := make([]byte, 1<<20)
			return fmt.Sprintf("%d goroutines after Close:\n%s", runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		})
}

func TestMsizeLowered(t *testing.T) {
	e := newEnv(t, 0)
	fsys := mount(t, e.addr)
	hello := open(t, fsys, "hello", plan9.OREAD)

	// The host comes back with a server that allows less than the client
	// negotiated: reads sized for the old msize could not be answered.
	small := &ns.Server{Tree: newWorld(0).tree(t), MaxMsize: 8192 + plan9.IOHDRSZ, Log: slog.New(slog.DiscardHandler)}
	addr := filepath.Join(t.TempDir(), "small")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	go small.ServeUnix(l)
	defer small.Shutdown(context.Background())
	e.cut.mu.Lock()
	e.cut.addr = addr
	e.cut.mu.Unlock()
	e.cut.cut()

	errc := make(chan error, 1)
	go func() {
		_, err := hello.ReadAt(make([]byte, 10), 0)
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("read succeeded on a server with a smaller msize")
		}
	case <-time.After(timeout):
		t.Fatal("read hangs after the server lowered msize")
	}
}

// TestConcurrentCuts runs clients doing everything that resumes while the
// server connection is cut again and again: every call must succeed.
func TestConcurrentCuts(t *testing.T) {
	e := newEnv(t, 8<<20)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		fsys := mount(t, e.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				name := "hello"
				if (n+i)%2 == 1 {
					name = deepPath
				}
				fid, err := fsys.Open(name, plan9.OREAD)
				if err != nil {
					errs <- fmt.Errorf("client %d: open %s: %w", i, name, err)
					return
				}
				_, err = fid.ReadAt(make([]byte, 64), 0)
				if err == nil || err == io.EOF {
					_, err = fid.Stat()
				}
				if cerr := fid.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					errs <- fmt.Errorf("client %d: %s: %w", i, name, err)
					return
				}
			}
		}()
	}
	want := streamContent()[:256<<10]
	fsys := mount(t, e.addr)
	fid := open(t, fsys, "stream", plan9.OREAD)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(fid)
		got <- b
	}()
	for off := 0; off < len(want); off += 4096 {
		e.world.stream.Write(want[off : off+4096])
		if off%(16<<10) == 0 {
			// The next cut once the stream has resumed: its reader has
			// all written so far and waits for more.
			e.cut.cut()
			e.cut.waitRead(t, uint64(off+4096))
		}
	}
	e.world.stream.Close()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Errorf("stream: read %d bytes, want %d; first difference at %d", len(b), len(want), firstDiff(b, want))
		}
	case <-time.After(timeout):
		t.Fatal("stream read did not finish")
	}
	t.Logf("%d dials", e.cut.dialCount())
}
