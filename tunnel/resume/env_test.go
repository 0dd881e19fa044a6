package resume_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	p9 "9fans.net/go/plan9/client"

	"ollie/ns"
	"ollie/ns/stream"
	"ollie/tunnel/resume"
)

// timeout bounds every wait in these tests. It is a failure guard, never
// a synchronisation.
const timeout = 10 * time.Second

// world is the live state behind the test tree.
type world struct {
	stream *stream.Stream

	mu      sync.Mutex
	entries map[string]bool // the children of "dyn"
	writes  []string        // what "ctl" was given
	hold    chan struct{}   // if set, "ctl" waits for it to close
	entered chan struct{}   // "ctl" has started a write
}

func newWorld(retain int) *world {
	return &world{
		stream:  stream.NewStream(retain),
		entries: map[string]bool{"one": true, "two": true},
		entered: make(chan struct{}, 16),
	}
}

func (w *world) tree(t testing.TB) *ns.Tree {
	each := &ns.Each{
		List: func(ctx context.Context, c *ns.Call) ([]ns.Entry, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			var ents []ns.Entry
			for name := range w.entries {
				ents = append(ents, ns.Entry{Name: name, Key: name})
			}
			return ents, nil
		},
		Lookup: func(ctx context.Context, c *ns.Call, name string) (ns.Entry, bool) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return ns.Entry{Name: name, Key: name}, w.entries[name]
		},
	}
	root := ns.Dir("", 0555, "the test tree",
		ns.ReadFile("hello", 0444, "a constant", func(context.Context, *ns.Call) ([]byte, error) {
			return []byte("hello, world\n"), nil
		}),
		ns.StreamFile("stream", 0444, "fed by the test", func(context.Context, *ns.Call) (*stream.Stream, error) {
			return w.stream, nil
		}),
		ns.RdWrFile("echo", 0666, "answers a request in upper case", func(_ context.Context, _ *ns.Call, req []byte) ([]byte, error) {
			return []byte(strings.ToUpper(string(req))), nil
		}),
		ns.WriteFile("ctl", 0222, "records writes", w.record),
		deep(0),
		ns.Dynamic("id", 0555, "entries the test adds and removes", each,
			ns.ReadFile("data", 0444, "the entry's name", func(_ context.Context, c *ns.Call) ([]byte, error) {
				return []byte(c.Key("id") + "\n"), nil
			})),
	)
	tree, err := ns.NewTree(root, "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// deepDirs is the depth of "deep": more than one Twalk can carry.
const deepDirs = 20

// deepPath is the path of the file at the bottom of "deep".
var deepPath = func() string {
	p := "deep"
	for i := 1; i < deepDirs; i++ {
		p += fmt.Sprintf("/d%d", i)
	}
	return p + "/leaf"
}()

func deep(i int) *ns.Node {
	name := fmt.Sprintf("d%d", i)
	if i == 0 {
		name = "deep"
	}
	if i == deepDirs-1 {
		return ns.Dir(name, 0555, "", ns.ReadFile("leaf", 0444, "", func(context.Context, *ns.Call) ([]byte, error) {
			return []byte("leaf\n"), nil
		}))
	}
	return ns.Dir(name, 0555, "", deep(i+1))
}

func (w *world) record(ctx context.Context, _ *ns.Call, data []byte) error {
	w.mu.Lock()
	hold := w.hold
	w.mu.Unlock()
	w.entered <- struct{}{}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	w.mu.Lock()
	w.writes = append(w.writes, string(data))
	w.mu.Unlock()
	return nil
}

// cutter dials the server and lets the test break the connections it made,
// or refuse dials for a while. It watches what the proxy sends the server,
// so that a test can cut at the moment it means to.
type cutter struct {
	mu        sync.Mutex
	addr      string
	conns     []net.Conn
	gen       int // how many cuts so far: the connections since the last one are of this generation
	dials     int
	reads     []uint64 // the offset of each Tread sent on this generation's connections
	failUntil time.Time
	changed   signal // dials or reads
}

func (c *cutter) Dial(ctx context.Context) (net.Conn, error) {
	c.mu.Lock()
	wait, addr := time.Until(c.failUntil), c.addr
	c.mu.Unlock()
	if wait > 0 {
		return nil, errors.New("host unreachable (test)")
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	sc := &serverConn{Conn: nc, c: c, gen: c.gen}
	c.conns = append(c.conns, sc)
	c.dials++
	c.changed.fire()
	c.mu.Unlock()
	return sc, nil
}

// cut closes every server connection made so far.
func (c *cutter) cut() {
	c.mu.Lock()
	conns := c.conns
	c.conns = nil
	c.gen++
	c.reads = nil
	c.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
}

// failFor makes dials fail for d from now.
func (c *cutter) failFor(d time.Duration) {
	c.mu.Lock()
	c.failUntil = time.Now().Add(d)
	c.mu.Unlock()
}

func (c *cutter) dialCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

// waitRead waits until the proxy has sent, since the last cut, a Tread at
// off or beyond: a read the server holds until the stream grows past off.
func (c *cutter) waitRead(t testing.TB, off uint64) {
	t.Helper()
	if !waitFor(&c.mu, &c.changed, func() bool { return slices.ContainsFunc(c.reads, func(o uint64) bool { return o >= off }) }) {
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("no Tread at offset %d or beyond since the last cut; reads at %v", off, c.reads)
	}
}

// serverConn is one of the cutter's connections to the server: it finds
// the Treads in what the proxy writes.
type serverConn struct {
	net.Conn
	c   *cutter
	gen int

	mu      sync.Mutex
	pending []byte // the start of a message not yet whole
}

func (sc *serverConn) Write(p []byte) (int, error) {
	n, err := sc.Conn.Write(p)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.pending = append(sc.pending, p[:n]...)
	for len(sc.pending) >= 4 {
		size := int(binary.LittleEndian.Uint32(sc.pending))
		if size < 7 {
			sc.pending = nil // not 9P; nothing more to find here
			break
		}
		if len(sc.pending) < size {
			break
		}
		if f, err := plan9.UnmarshalFcall(sc.pending[:size]); err == nil && f.Type == plan9.Tread {
			sc.c.sawRead(sc.gen, f.Offset)
		}
		sc.pending = sc.pending[size:]
	}
	return n, err
}

func (c *cutter) sawRead(gen int, off uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.reads = append(c.reads, off)
		c.changed.fire()
	}
}

// signal tells waiters that what a mutex guards has changed: a waiter
// takes the channel under the mutex, and it is closed at the next change.
type signal struct{ ch chan struct{} }

func (s *signal) next() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// waitFor waits until cond, asked under mu, holds, asking again at each
// change sig announces; false if it still does not after timeout.
func waitFor(mu *sync.Mutex, sig *signal, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		mu.Lock()
		ok, changed := cond(), sig.next()
		mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			mu.Lock()
			defer mu.Unlock()
			return cond()
		}
	}
}

// env is a namespace server on a Unix socket, and a proxy in front of it on
// another.
type env struct {
	world  *world
	srv    *ns.Server
	direct string // the server's socket
	proxy  *resume.Proxy
	addr   string // the proxy's socket
	cut    *cutter

	mu      sync.Mutex
	states  []string
	changed signal // states
}

// stateCount is how many states the proxy has reported.
func (e *env) stateCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.states)
}

// waitReconnecting waits until a state after the first n says the proxy
// is reconnecting: it has seen its connection go.
func (e *env) waitReconnecting(t testing.TB, n int) {
	t.Helper()
	reconnecting := func() bool {
		return slices.ContainsFunc(e.states[min(n, len(e.states)):], func(s string) bool { return strings.HasPrefix(s, "reconnecting: ") })
	}
	if !waitFor(&e.mu, &e.changed, reconnecting) {
		e.mu.Lock()
		defer e.mu.Unlock()
		t.Fatalf("the proxy never said it was reconnecting: states %q", e.states)
	}
}

func newEnv(t testing.TB, retain int) *env {
	dir, err := os.MkdirTemp("", "resume")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{world: newWorld(retain), direct: filepath.Join(dir, "ns"), addr: filepath.Join(dir, "proxy")}
	quiet := slog.New(slog.DiscardHandler)
	e.srv = &ns.Server{Tree: e.world.tree(t), Log: quiet}
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.direct, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	go e.srv.ServeUnix(sl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		e.srv.Shutdown(ctx)
	})

	e.cut = &cutter{addr: e.direct}
	e.proxy = &resume.Proxy{Dial: e.cut.Dial, Log: quiet, OnState: func(s string) {
		e.mu.Lock()
		e.states = append(e.states, s)
		e.changed.fire()
		e.mu.Unlock()
	}}
	pl, err := net.Listen("unix", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	go e.proxy.Serve(pl)
	t.Cleanup(func() { e.proxy.Close() })
	return e
}

// mount attaches a 9fans client to addr.
func mount(t testing.TB, addr string) *p9.Fsys {
	t.Helper()
	c, err := p9.Dial("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fsys, err := c.Attach(nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

func open(t testing.TB, fsys *p9.Fsys, name string, mode uint8) *p9.Fid {
	t.Helper()
	fid, err := fsys.Open(name, mode)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return fid
}

// readAll reads fid from its start to EOF.
func readAll(t testing.TB, fid *p9.Fid) string {
	t.Helper()
	if _, err := fid.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(fid)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}
