package ns_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/internal/await"
	"ollie/ns"
	"ollie/ns/stream"
)

// timeout bounds every wait in these tests. It is a failure guard, never
// a synchronisation: nothing waits for it to pass.
const timeout = 10 * time.Second

// world is the live state behind the test tree. Each test builds its own.
type world struct {
	tree *ns.Tree
	bus  *ns.Bus
	log  *stream.Stream // "log": appended to by the tests
	trim *stream.Stream // "trim": keeps only 16 bytes

	waitIn  chan struct{} // a Wait handler has started
	waitOut chan []byte   // what the blocked Wait handler returns

	mu       sync.Mutex
	counter  int
	writes   []string // what "ctl" and "drop" were given
	notes    []byte
	sessions []*session
	plans    map[string][]byte
	readers  []string // who read a guarded file, as "file user" (secret, plan/SID)
}

type session struct{ id, name, owner, group string }

// bigData is the content of "big": 64 KiB + 3, no two nearby offsets alike.
var bigData = func() []byte {
	b := make([]byte, 64<<10+3)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}()

// The users of the test tree: glenda owns it, alice is in group staff,
// bob is nobody in particular.
func inGroup(user, group string) bool {
	return user == "alice" && group == "staff"
}

// identify is the test server's Identify: a sandboxed peer proves to be
// user by presenting key(user) as its aname.
func identify(uname, aname string) string {
	if uname != "" && aname == key(uname) {
		return uname
	}
	return ""
}

func key(user string) string { return "key-" + user }

func newWorld(t testing.TB) *world {
	w := &world{
		bus:     &ns.Bus{},
		log:     stream.NewStream(0),
		trim:    stream.NewStream(16),
		waitIn:  make(chan struct{}, 128),
		waitOut: make(chan []byte),
		sessions: []*session{
			{id: "id-1", name: "alpha", owner: "alice"},
			{id: "id-2", name: "beta", owner: "bob", group: "staff"},
		},
		plans: map[string][]byte{},
	}
	root := ns.Dir("", 0555, "the test tree",
		ns.ReadFile("hello", 0444, "a constant", constant("hello, world\n")),
		ns.ReadFile("counter", 0444, "a value that changes", w.readCounter),
		ns.ReadFile("big", 0444, "64 KiB and a bit", constant(string(bigData))),
		ns.ReadFile("whoami", 0444, "the caller as handlers see it", whoami),
		ns.WriteFile("ctl", 0222, "write-only", w.record),
		ns.RdWrFile("calc", 0666, "request and reply: upper case", calc),
		ns.StreamFile("log", 0444, "a stream", func(context.Context, *ns.Call) (*stream.Stream, error) { return w.log, nil }),
		ns.StreamFile("trim", 0444, "a stream keeping 16 bytes", func(context.Context, *ns.Call) (*stream.Stream, error) { return w.trim, nil }),
		ns.WaitFile("wait", 0444, "blocks until the test says", w.wait),
		&ns.Node{Name: "event", Mode: 0666, Doc: "bus subscription", Subscribe: w.subscribe},
		&ns.Node{Name: "notes", Mode: 0644, Doc: "owner writes, all read", Read: w.readNotes, Write: w.writeNotes},
		&ns.Node{Name: "secret", Mode: 0440, Group: "staff", Doc: "owner and staff read", Read: w.readSecret},
		&ns.Node{Name: "drop", Mode: 0020, Group: "staff", Doc: "only staff write", Write: w.record},
		ns.Dir("private", 0700, "owner only",
			ns.ReadFile("note", 0444, "behind a closed directory", constant("private note\n")),
		),
		ns.Dir("session", 0555, "sessions",
			ns.Dynamic("sid", 0555, "one session", &ns.Each{List: w.list, Lookup: w.lookup},
				ns.ReadFile("name", 0444, "current name", w.sessionName),
				ns.ReadFile("id", 0444, "immutable id", func(_ context.Context, c *ns.Call) ([]byte, error) {
					return []byte(c.Key("sid") + "\n"), nil
				}),
				&ns.Node{Name: "plan", Mode: 0600, Doc: "the session owner's", Read: w.readPlan, Write: w.writePlan},
			),
		),
	)
	tree, err := ns.NewTree(root, "glenda", "ollie")
	if err != nil {
		t.Fatal(err)
	}
	w.tree = tree
	return w
}

func constant(s string) func(context.Context, *ns.Call) ([]byte, error) {
	return func(context.Context, *ns.Call) ([]byte, error) { return []byte(s), nil }
}

func whoami(_ context.Context, c *ns.Call) ([]byte, error) {
	return fmt.Appendf(nil, "%s admin=%v\n", c.User, c.Admin), nil
}

func calc(_ context.Context, _ *ns.Call, req []byte) ([]byte, error) {
	if string(req) == "fail" {
		return nil, errors.New("calc: cannot fail on request")
	}
	return bytes.ToUpper(req), nil
}

func (w *world) readCounter(context.Context, *ns.Call) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Appendf(nil, "%d\n", w.counter), nil
}

func (w *world) setCounter(n int) {
	w.mu.Lock()
	w.counter = n
	w.mu.Unlock()
}

func (w *world) record(_ context.Context, _ *ns.Call, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(data))
	return nil
}

func (w *world) recorded() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

func (w *world) readNotes(context.Context, *ns.Call) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.notes), nil
}

func (w *world) writeNotes(_ context.Context, _ *ns.Call, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notes = append(w.notes, data...)
	return nil
}

func (w *world) wait(ctx context.Context, _ *ns.Call) ([]byte, error) {
	select {
	case w.waitIn <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	select {
	case b := <-w.waitOut:
		return b, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (w *world) subscribe(_ context.Context, _ *ns.Call, filter []byte) (ns.Source, error) {
	return w.bus.Subscribe(strings.Fields(string(filter))...), nil
}

func entryOf(s *session) ns.Entry {
	return ns.Entry{Name: s.name, Key: s.id, Owner: s.owner, Group: s.group}
}

func (w *world) list(context.Context, *ns.Call) ([]ns.Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ents []ns.Entry
	for _, s := range w.sessions {
		ents = append(ents, entryOf(s))
	}
	return ents, nil
}

// lookup resolves a session by its visible name or by its id, the
// invisible alias.
func (w *world) lookup(_ context.Context, _ *ns.Call, name string) (ns.Entry, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.sessions {
		if s.name == name || s.id == name {
			return entryOf(s), true
		}
	}
	return ns.Entry{}, false
}

func (w *world) rename(id, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.sessions {
		if s.id == id {
			s.name = name
		}
	}
}

func (w *world) sessionName(_ context.Context, c *ns.Call) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.sessions {
		if s.id == c.Key("sid") {
			return []byte(s.name + "\n"), nil
		}
	}
	return nil, errors.New("session gone")
}

func (w *world) readPlan(_ context.Context, c *ns.Call) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.readers = append(w.readers, "plan/"+c.Key("sid")+" "+c.User)
	return bytes.Clone(w.plans[c.Key("sid")]), nil
}

// readSecret records who read the secret: a handler only runs for a
// principal the mode let through, so a principal here that the mode
// denies is a hole in the checks.
func (w *world) readSecret(_ context.Context, c *ns.Call) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.readers = append(w.readers, "secret "+c.User)
	return []byte("s3cret\n"), nil
}

func (w *world) writePlan(_ context.Context, c *ns.Call, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.plans[c.Key("sid")] = append(w.plans[c.Key("sid")], data...)
	return nil
}

// newServer returns a server of w's tree with the test users' groups.
func newServer(w *world) *ns.Server {
	return &ns.Server{
		Tree:     w.tree,
		InGroup:  inGroup,
		Identify: identify,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// serveUnix serves srv on a Unix socket in a temporary directory until
// the test ends, then shuts it down and checks that ServeUnix reports it.
func serveUnix(t testing.TB, srv *ns.Server) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ns")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeUnix(l) }()
	t.Cleanup(func() { shutdown(t, srv, done) })
	return sock
}

// serveTCP serves srv, untrusted, on a loopback TCP port until the test ends.
func serveTCP(t testing.TB, srv *ns.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() { shutdown(t, srv, done) })
	return l.Addr().String()
}

func shutdown(t testing.TB, srv *ns.Server, done chan error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ns.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(timeout):
		t.Errorf("Serve did not return after Shutdown")
	}
}

// mount attaches to the server at addr as user with the 9fans client.
func mount(t testing.TB, network, addr, user string) *client.Fsys {
	t.Helper()
	c, err := client.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fs, err := c.Attach(nil, user, "")
	if err != nil {
		t.Fatalf("attach as %q: %v", user, err)
	}
	return fs
}

// mountPipe serves one Remote connection over net.Pipe and attaches to it
// as user.
func mountPipe(t testing.TB, srv *ns.Server, user string) *client.Fsys {
	t.Helper()
	return mountPeer(t, srv, ns.Peer{Kind: ns.Remote, UID: -1}, user, "")
}

// mountAgent serves one Sandboxed connection over net.Pipe and attaches to
// it as user with aname as its proof.
func mountAgent(t testing.TB, srv *ns.Server, user, aname string) *client.Fsys {
	t.Helper()
	return mountPeer(t, srv, ns.Peer{Kind: ns.Sandboxed, UID: -1}, user, aname)
}

func mountPeer(t testing.TB, srv *ns.Server, peer ns.Peer, user, aname string) *client.Fsys {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(a, peer) }()
	c, err := client.NewConn(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Errorf("ServeConn did not return after the client closed")
		}
	})
	fs, err := c.Attach(nil, user, aname)
	if err != nil {
		t.Fatalf("attach as %q: %v", user, err)
	}
	return fs
}

func readFile(t testing.TB, fs *client.Fsys, name string) string {
	t.Helper()
	s, err := tryRead(fs, name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return s
}

func tryRead(fs *client.Fsys, name string) (string, error) {
	fid, err := fs.Open(name, plan9.OREAD)
	if err != nil {
		return "", err
	}
	defer fid.Close()
	b, err := io.ReadAll(fid)
	return string(b), err
}

func writeFile(t testing.TB, fs *client.Fsys, name, data string) {
	t.Helper()
	fid, err := fs.Open(name, plan9.OWRITE)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer fid.Close()
	if _, err := fid.Write([]byte(data)); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

// wantErr fails unless err is non-nil and its text contains want. Across
// 9P an error is only its text, so that is what a client can check.
func wantErr(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("got error %q, want one containing %q", err, want)
	}
}

// waitFor asks cond until it holds; it fails the test, naming what,
// after timeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	await.Until(t, timeout, what, cond)
}

// rawConn speaks 9P frame by frame, for what the 9fans client cannot
// send (Tflush, chosen tags, bad frames).
type rawConn struct {
	t    testing.TB
	nc   net.Conn
	in   chan *plan9.Fcall // closed when the server ends the connection
	rerr error             // why in was closed
}

func dialRaw(t testing.TB, network, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	return newRaw(t, nc)
}

func newRaw(t testing.TB, nc net.Conn) *rawConn {
	r := &rawConn{t: t, nc: nc, in: make(chan *plan9.Fcall, 1024)}
	go func() {
		defer close(r.in)
		for {
			f, err := plan9.ReadFcall(nc)
			if err != nil {
				r.rerr = err
				return
			}
			r.in <- f
		}
	}()
	t.Cleanup(func() { nc.Close() })
	return r
}

func (r *rawConn) send(f *plan9.Fcall) {
	r.t.Helper()
	if err := plan9.WriteFcall(r.nc, f); err != nil {
		r.t.Fatalf("send %v: %v", f, err)
	}
}

func (r *rawConn) sendBytes(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("send %d bytes: %v", len(b), err)
	}
}

func (r *rawConn) recv() *plan9.Fcall {
	r.t.Helper()
	select {
	case f, ok := <-r.in:
		if !ok {
			r.t.Fatalf("connection closed: %v", r.rerr)
		}
		return f
	case <-time.After(timeout):
		r.t.Fatalf("no reply within %v", timeout)
	}
	return nil
}

// rpc sends f and returns the reply, which must carry f's tag.
func (r *rawConn) rpc(f *plan9.Fcall) *plan9.Fcall {
	r.t.Helper()
	r.send(f)
	rf := r.recv()
	if rf.Tag != f.Tag {
		r.t.Fatalf("sent %v, got reply for another tag: %v", f, rf)
	}
	return rf
}

// ok sends f and fails unless the reply is its R-message.
func (r *rawConn) ok(f *plan9.Fcall) *plan9.Fcall {
	r.t.Helper()
	rf := r.rpc(f)
	if rf.Type != f.Type+1 {
		r.t.Fatalf("sent %v, got %v", f, rf)
	}
	return rf
}

// fail sends f and fails unless the reply is an Rerror containing want.
func (r *rawConn) fail(f *plan9.Fcall, want string) {
	r.t.Helper()
	rf := r.rpc(f)
	if rf.Type != plan9.Rerror || !strings.Contains(rf.Ename, want) {
		r.t.Fatalf("sent %v, got %v, want Rerror containing %q", f, rf, want)
	}
}

// expectClosed waits for the server to end the connection.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	select {
	case f, ok := <-r.in:
		if ok {
			r.t.Fatalf("got %v, want the connection closed", f)
		}
	case <-time.After(timeout):
		r.t.Fatalf("connection still open after %v", timeout)
	}
}

// start negotiates msize and attaches fid 0 as user.
func (r *rawConn) start(msize uint32, user string) {
	r.t.Helper()
	rv := r.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: msize, Version: "9P2000"})
	if rv.Version != "9P2000" {
		r.t.Fatalf("Rversion %v", rv)
	}
	r.ok(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: user})
}

// open walks fid 0 to path as newfid and opens it.
func (r *rawConn) open(newfid uint32, mode uint8, path ...string) {
	r.t.Helper()
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: newfid, Wname: path})
	r.ok(&plan9.Fcall{Type: plan9.Topen, Tag: 1, Fid: newfid, Mode: mode})
}
