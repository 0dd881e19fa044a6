package mux_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"

	"ollie/internal/await"
	"ollie/ns/client"
)

func TestWalkAcrossMounts(t *testing.T) {
	f := newFleet(t, "web1", "web2")
	c := f.dial(t)
	ctx := context.Background()

	if got, want := names(t, c, "/"), []string{"host", "idx"}; !slices.Equal(got, want) {
		t.Errorf("ls / = %q, want %q", got, want)
	}
	if got, want := names(t, c, "host"), []string{"down", "web1", "web2"}; !slices.Equal(got, want) {
		t.Errorf("ls host = %q, want %q", got, want)
	}
	// The mount point is the host's root.
	if got, want := names(t, c, "host/web1"), []string{"chat", "event", "name", "session", "upper", "wait"}; !slices.Equal(got, want) {
		t.Errorf("ls host/web1 = %q, want %q", got, want)
	}
	d, err := c.Stat(ctx, "host/web1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "web1" || d.Qid.Type&plan9.QTDIR == 0 {
		t.Errorf("stat host/web1: name %q qid %v, want web1, a directory", d.Name, d.Qid)
	}
	for _, h := range []string{"web1", "web2"} {
		if got := read(t, c, "host/"+h+"/name"); got != h+"\n" {
			t.Errorf("read host/%s/name = %q", h, got)
		}
		// In one walk, deep into the host.
		if got, want := read(t, c, "host/"+h+"/session/s2/agent/a1/state"), "s2 a1 "+h+"\n"; got != want {
			t.Errorf("read state = %q, want %q", got, want)
		}
	}
	if got := read(t, c, "idx"); got != "[down web1 web2]\n" {
		t.Errorf("read idx = %q", got)
	}

	// Qids: the same file of two hosts, and a host's root and the local
	// root, differ; a file's qid is the same by walk and by stat.
	var qs []plan9.Qid
	for _, p := range []string{"/", "host/web1", "host/web2", "host/web1/name", "host/web2/name"} {
		d, err := c.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, d.Qid)
	}
	for i := range qs {
		for j := range i {
			if qs[i].Path == qs[j].Path {
				t.Errorf("qids %d and %d are the same: %v", i, j, qs[i])
			}
		}
	}
	dirs, err := c.Ls(ctx, "host/web1")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.Name == "name" && d.Qid != qs[3] {
			t.Errorf("host/web1/name: qid %v in the listing, %v by stat", d.Qid, qs[3])
		}
	}
}

// A raw 9P client sends what ns/client cleans up itself: "..", and walks
// that end on or pass through a mount point in one message.
func TestDotDotIsLexical(t *testing.T) {
	f := newFleet(t, "web1", "web2")
	conn, err := p9.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fs, err := conn.Attach(nil, "glenda", "")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"host/web1/../web2/name":               "web2\n",
		"host/web1/session/../name":            "web1\n",
		"host/web1/session/s1/../../../../idx": "[down web1 web2]\n",
		"../../host/web2/name":                 "web2\n",
	} {
		fid, err := fs.Open(path, plan9.OREAD)
		if err != nil {
			t.Errorf("open %s: %v", path, err)
			continue
		}
		b, err := io.ReadAll(fid)
		fid.Close()
		if err != nil || string(b) != want {
			t.Errorf("read %s = %q, %v; want %q", path, b, err, want)
		}
	}
	// The mount point's own fid, walked to from elsewhere and back.
	d, err := fs.Stat("host/web2/session/../../web1")
	if err != nil || d.Name != "web1" {
		t.Errorf("stat host/web2/session/../../web1 = %v, %v; want web1", d, err)
	}
}

func TestRdWrAndStreamThroughMount(t *testing.T) {
	f := newFleet(t, "web1")
	c := f.dial(t)
	ctx := context.Background()

	reply, err := c.RdWr(ctx, "host/web1/upper", []byte("hello"))
	if err != nil || string(reply) != "web1 HELLO" {
		t.Fatalf("rdwr host/web1/upper = %q, %v", reply, err)
	}
	// Write, then read on the same fid, twice: the reply lives in the
	// host's fid.
	fid := openRaw(t, f, "host/web1/upper", plan9.ORDWR)
	for _, req := range []string{"one", "two"} {
		if _, err := fid.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 100)
		n, err := fid.ReadAt(b, 0)
		if err == io.EOF {
			err = nil // a short ReadAt says so
		}
		if err != nil || string(b[:n]) != "web1 "+strings.ToUpper(req) {
			t.Errorf("read after write %q = %q, %v", req, b[:n], err)
		}
	}

	// A stream read blocks at its end and goes on as the host writes.
	f.hosts["web1"].chat.Write([]byte("first\n"))
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- c.Follow(ctx, "host/web1/chat", &out) }()
	waitFor(t, func() bool { return out.String() == "first\n" })
	f.hosts["web1"].chat.Write([]byte("second\n"))
	waitFor(t, func() bool { return out.String() == "first\nsecond\n" })
	f.hosts["web1"].chat.Close()
	if err := <-done; err != nil {
		t.Fatalf("follow: %v", err)
	}
}

// A subscription through a mount gets what the host publishes after the
// filter reached it, filtered there.
func TestSubscribeThroughMount(t *testing.T) {
	f := newFleet(t, "web1")
	c := f.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	subscribed := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.SubscribeFrom(ctx, "host/web1/event", []byte("agent.*\n"), func() { close(subscribed) }, &out)
	}()
	<-subscribed
	bus := &f.hosts["web1"].bus
	bus.Publish("session.new", "no")
	bus.Publish("agent.state", "thinking")
	waitFor(t, func() bool { return strings.Contains(out.String(), "agent.state thinking") })
	if strings.Contains(out.String(), "session.new") {
		t.Errorf("the host's filter let session.new through: %q", out.String())
	}
	cancel()
	if err := <-done; !client.IsInterrupted(err) {
		t.Errorf("subscription ended with %v, want interrupted", err)
	}
}

// A read blocked in one host holds nothing of another's, nor of the local
// tree; flushing it reaches the host that holds it.
func TestBlockedMountHoldsNoOther(t *testing.T) {
	f := newFleet(t, "web1", "web2")
	c := f.dial(t)

	blocked := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := c.ReadAll(ctx, "host/web2/wait")
		blocked <- err
	}()
	// The other requests go on their own connection: ns/client's
	// interruption is per connection.
	c2 := f.dial(t)
	select {
	case <-f.hosts["web2"].waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait read never reached host web2")
	}
	for range 3 {
		if got := read(t, c2, "host/web1/name"); got != "web1\n" {
			t.Fatalf("read host/web1/name = %q", got)
		}
		if got := read(t, c2, "idx"); got == "" {
			t.Fatal("read idx: empty")
		}
	}
	// The same connection, too.
	rdwr := make(chan string, 1)
	go func() {
		b, err := c.RdWr(context.Background(), "host/web1/upper", []byte("x"))
		rdwr <- fmt.Sprintf("%q, %v", b, err)
	}()
	select {
	case got := <-rdwr:
		if want := `"web1 X", <nil>`; got != want {
			t.Fatalf("rdwr beside a blocked read = %s, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rdwr on the connection of a blocked read did not return")
	}
	select {
	case err := <-blocked:
		t.Fatalf("the wait read returned early: %v", err)
	default:
	}

	cancel() // Tflush
	select {
	case err := <-blocked:
		if !client.IsInterrupted(err) {
			t.Errorf("flushed read: %v, want interrupted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the flushed read did not return")
	}
	select {
	case <-f.hosts["web2"].flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("the host's handler never saw the flush")
	}
	// web2 still answers, on the same client connection.
	if got := read(t, c, "host/web2/name"); got != "web2\n" {
		t.Errorf("read host/web2/name after the flush = %q", got)
	}
	close(f.hosts["web2"].release)
	if got := read(t, c, "host/web2/wait"); got != "web2 released\n" {
		t.Errorf("read host/web2/wait = %q", got)
	}
}

func TestMountDown(t *testing.T) {
	f := newFleet(t, "web1")
	c := f.dial(t)
	ctx := context.Background()

	for _, p := range []string{"host/down", "host/down/name", "host/down/session/s1"} {
		_, err := c.Stat(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "host down: ") {
			t.Errorf("stat %s: %v, want an error naming host down", p, err)
		}
	}
	if _, err := c.ReadAll(ctx, "host/down/name"); err == nil || !strings.Contains(err.Error(), "host down: ") {
		t.Errorf("read host/down/name: %v, want an error naming host down", err)
	}
	if got := read(t, c, "host/web1/name"); got != "web1\n" {
		t.Errorf("read host/web1/name beside a host that is down = %q", got)
	}
	if got := read(t, c, "idx"); got == "" {
		t.Error("read idx beside a host that is down: empty")
	}
}

// A mount whose connection ends fails its fids only; the next walk into
// it dials again.
func TestMountDropsAndRedials(t *testing.T) {
	f := newFleet(t, "web1", "web2")
	fs := attachRaw(t, f)
	web1, err := fs.Open("host/web1/upper", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	web2, err := fs.Open("host/web2/upper", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	f.hosts["web1"].stop()

	_, err = web1.Write([]byte("x"))
	if err == nil || !strings.Contains(err.Error(), "host web1: connection lost") {
		t.Errorf("write on a fid of a host that went away: %v, want host web1: connection lost", err)
	}
	if err := web1.Close(); err != nil {
		t.Errorf("clunk on a lost host: %v, want success", err)
	}
	if _, err := web2.Write([]byte("y")); err != nil {
		t.Errorf("write to web2 after web1 went away: %v", err)
	}
	if _, err := fs.Stat("idx"); err != nil {
		t.Errorf("stat idx after web1 went away: %v", err)
	}
	if _, err := fs.Stat("host/web1/name"); err == nil || !strings.Contains(err.Error(), "host web1: ") {
		t.Errorf("stat host/web1/name while it is down: %v", err)
	}

	f.hosts["web1"].start(t)
	fid, err := fs.Open("host/web1/name", plan9.OREAD)
	if err != nil {
		t.Fatalf("open host/web1/name once it is back: %v", err)
	}
	b, _ := io.ReadAll(fid)
	fid.Close()
	if string(b) != "web1\n" {
		t.Errorf("read host/web1/name once it is back = %q", b)
	}
	web2.Close()
}

// Many fids on one connection, across the local tree and two mounts, each
// walked, read and clunked concurrently: every read gets its own file.
func TestConcurrentFids(t *testing.T) {
	f := newFleet(t, "web1", "web2")
	c := f.dial(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := []string{"web1", "web2"}[i%2]
			s, a := []string{"s1", "s2"}[i/2%2], []string{"a1", "a2"}[i/4%2]
			ctx := context.Background()
			for range 10 {
				p := fmt.Sprintf("host/%s/session/%s/agent/%s/state", h, s, a)
				b, err := c.ReadAll(ctx, p)
				if want := fmt.Sprintf("%s %s %s\n", s, a, h); err != nil || string(b) != want {
					errs <- fmt.Errorf("read %s = %q, %v; want %q", p, b, err, want)
					return
				}
				r, err := c.RdWr(ctx, "host/"+h+"/upper", []byte(p))
				if want := h + " " + strings.ToUpper(p); err != nil || string(r) != want {
					errs <- fmt.Errorf("rdwr = %q, %v; want %q", r, err, want)
					return
				}
				if _, err := c.ReadAll(ctx, "idx"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func attachRaw(t *testing.T, f *fleet) *p9.Fsys {
	t.Helper()
	conn, err := p9.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fs, err := conn.Attach(nil, "glenda", "")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func openRaw(t *testing.T, f *fleet, path string, mode uint8) *p9.Fid {
	t.Helper()
	fid, err := attachRaw(t, f).Open(path, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fid.Close() })
	return fid
}

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

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	await.Until(t, 5*time.Second, "timed out waiting", cond)
}

var _ net.Conn // net is used by the hostile tests

// Without its local tree a client's connection has no root: it ends, at
// once, and ServeConn says why.
func TestLocalLostEndsConnection(t *testing.T) {
	m := fuzzMux(t)
	var local net.Conn
	dial := m.Local
	m.Local = func(ctx context.Context) (net.Conn, error) {
		c, err := dial(ctx)
		local = c
		return c, err
	}
	cc, sc := net.Pipe()
	defer cc.Close()
	served := make(chan error, 1)
	go func() { served <- m.ServeConn(sc) }()
	cc.SetDeadline(time.Now().Add(5 * time.Second))
	for _, tx := range frameList(frames(
		&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
		&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: "glenda"})) {
		cc.Write(tx)
		if rx, err := plan9.ReadFcall(cc); err != nil || rx.Type == plan9.Rerror {
			t.Fatalf("handshake: %v %v", rx, err)
		}
	}
	local.Close()
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "local tree") {
			t.Errorf("ServeConn returned %v, want the local tree lost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client's connection outlived its local tree")
	}
}
