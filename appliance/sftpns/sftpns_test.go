package sftpns_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"

	"ollie/appliance/sftpns"
	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/ns"
	"ollie/ns/client"
	"ollie/ns/stream"
)

// fixture is a small namespace of each file kind, served on a real Unix
// socket.
type fixture struct {
	sock string
	chat *stream.Stream

	slow chan struct{} // closed to let the slow snapshot be taken

	mu       sync.Mutex
	requests []string // what prompt was sent, one entry a request
	sessions []string // the entries of session/, as a host's sessions come
}

// addSession makes a new entry in session/, as a new session does.
func (fx *fixture) addSession(name string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.sessions = append(fx.sessions, name)
}

const stateText = "idle\n"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{chat: stream.NewStream(0), slow: make(chan struct{})}
	root := ns.Dir("", 0555, "",
		ns.ReadFile("state", 0444, "A snapshot.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			return []byte(stateText), nil
		}),
		ns.WriteFile("prompt", 0222, "Each write a request.", func(ctx context.Context, c *ns.Call, data []byte) error {
			fx.mu.Lock()
			defer fx.mu.Unlock()
			fx.requests = append(fx.requests, string(data))
			return nil
		}),
		ns.WriteFile("fussy", 0222, "Refuses every request.", func(ctx context.Context, c *ns.Call, data []byte) error {
			return errors.New("fussy: no thanks")
		}),
		ns.RdWrFile("upper", 0666, "Write text; read it back in capitals.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			return bytes.ToUpper(req), nil
		}),
		ns.StreamFile("chat", 0444, "A stream.", func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
			return fx.chat, nil
		}),
		ns.ReadFile("slow", 0444, "A snapshot taken when the test says.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			select {
			case <-fx.slow:
			case <-ctx.Done():
			}
			return []byte("slow\n"), nil
		}),
		ns.Dir("dir", 0555, "A directory.",
			ns.ReadFile("inner", 0444, "", func(ctx context.Context, c *ns.Call) ([]byte, error) {
				return []byte("inner\n"), nil
			})),
		ns.Dir("session", 0555, "Entries that come and go.",
			ns.Dynamic("sname", 0555, "A session.", &ns.Each{
				List: func(ctx context.Context, c *ns.Call) ([]ns.Entry, error) {
					fx.mu.Lock()
					defer fx.mu.Unlock()
					var es []ns.Entry
					for _, n := range fx.sessions {
						es = append(es, ns.Entry{Name: n, Key: n})
					}
					return es, nil
				},
				Lookup: func(ctx context.Context, c *ns.Call, name string) (ns.Entry, bool) {
					fx.mu.Lock()
					defer fx.mu.Unlock()
					return ns.Entry{Name: name, Key: name}, slices.Contains(fx.sessions, name)
				},
			},
				ns.ReadFile("id", 0444, "Its name.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
					return []byte(c.Key("sname") + "\n"), nil
				}))))
	tree, err := ns.NewTree(root, "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	fx.sock = filepath.Join(nstest.ShortTempDir(t), "ollie")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: fx.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree}
	served := make(chan error, 1)
	go func() { served <- srv.ServeUnix(l) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-served
	})
	return fx
}

func (fx *fixture) dial() (*client.Conn, error) { return client.DialAs(fx.sock, "glenda") }

func (fx *fixture) sent() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return append([]string(nil), fx.requests...)
}

// pipeConn is one end of a pair of io.Pipes.
type pipeConn struct {
	io.Reader
	io.WriteCloser
	r *io.PipeReader
}

func (p pipeConn) Close() error {
	p.r.Close()
	return p.WriteCloser.Close()
}

// session serves srv to a pkg/sftp client over in-process pipes and
// returns the client; the session ends with the test, and Serve's error
// is checked then.
func session(t *testing.T, srv *sftpns.Server) *sftp.Client {
	t.Helper()
	c, _ := serveSession(t, srv)
	return c
}

// served tells a test what reached the server of a session: delivered
// counts the bytes of requests the server has taken in, ended waits (at
// most 5 s) for Serve to return and reports whether it did.
type served struct {
	mu        sync.Mutex
	delivered int
	ended     func() bool
}

func (s *served) Delivered() int { s.mu.Lock(); defer s.mu.Unlock(); return s.delivered }

// countingWriter counts into sv what a pipe's reader took: a pipe's
// Write returns once its reader has read it all.
type countingWriter struct {
	io.WriteCloser
	sv *served
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.WriteCloser.Write(p)
	w.sv.mu.Lock()
	w.sv.delivered += n
	w.sv.mu.Unlock()
	return n, err
}

// serveSession is session, with what reached the server.
func serveSession(t *testing.T, srv *sftpns.Server) (*sftp.Client, *served) {
	t.Helper()
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(pipeConn{Reader: sr, WriteCloser: sw, r: sr}) }()
	sv := &served{}
	c, err := sftp.NewClientPipe(cr, countingWriter{cw, sv})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	returned := false
	sv.ended = func() bool {
		once.Do(func() {
			select {
			case err := <-done:
				returned = true
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
			}
		})
		return returned
	}
	t.Cleanup(func() {
		c.Close()
		if !sv.ended() {
			t.Error("Serve did not return after the client closed")
		}
	})
	return c, sv
}

func TestListAndStat(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial})
	infos, err := c.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	modes := map[string]os.FileMode{}
	for _, fi := range infos {
		names = append(names, fi.Name())
		modes[fi.Name()] = fi.Mode()
	}
	if got, want := strings.Join(names, " "), "state prompt fussy upper chat slow dir session"; got != want {
		t.Errorf("ls /: %q, want %q", got, want)
	}
	if modes["state"] != 0444 || modes["prompt"] != 0222 || modes["dir"] != os.ModeDir|0555 {
		t.Errorf("modes: %v", modes)
	}
	fi, err := c.Stat("/state")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != int64(len(stateText)) || fi.IsDir() {
		t.Errorf("stat state: size %d dir %v, want %d, a file", fi.Size(), fi.IsDir(), len(stateText))
	}
	infos, err = c.ReadDir("dir")
	if err != nil || len(infos) != 1 || infos[0].Name() != "inner" {
		t.Errorf("ls dir: %v %v", infos, err)
	}
	if _, err := c.ReadDir("/state"); err == nil {
		t.Error("ls of a file succeeded")
	}
	if _, err := c.Stat("/nosuch"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat /nosuch: %v, want not exist", err)
	}
}

func TestReadSnapshot(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial})
	f, err := c.Open("/dir/../state")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	b, err := io.ReadAll(f)
	if err != nil || string(b) != stateText {
		t.Fatalf("read state: %q %v", b, err)
	}
	// A snapshot's end is its end: no wait for more.
	if d := time.Since(start); d > sftpns.DefaultStreamWait/2 {
		t.Errorf("reading a snapshot to its end took %v", d)
	}
	if _, err := c.Open("/nosuch"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("open /nosuch: %v, want not exist", err)
	}
	if _, err := c.Open("/dir"); err == nil {
		t.Error("opening a directory as a file succeeded")
	}
}

// A shell's `echo prompt > FILE` through sshfs: open O_WRONLY|O_TRUNC, a
// truncate, writes, close. The namespace sees one request.
func TestWritePrompt(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial})
	f, err := c.OpenFile("/prompt", os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate("/prompt", 0); err != nil {
		t.Errorf("truncate prompt: %v", err)
	}
	if err := c.Chtimes("/prompt", time.Now(), time.Now()); err != nil {
		t.Errorf("touch prompt: %v", err)
	}
	// More than one SFTP packet, written out of order.
	big := strings.Repeat("p", 100<<10)
	if _, err := f.WriteAt([]byte(big[40<<10:]), 40<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(big[:40<<10]), 0); err != nil {
		t.Fatal(err)
	}
	if got := fx.sent(); len(got) != 0 {
		t.Errorf("sent before close: %d requests", len(got))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fx.sent(); len(got) != 1 || got[0] != big {
		t.Fatalf("sent %d requests, want one of %d bytes", len(got), len(big))
	}

	// The handler's error is the close's.
	f, err = c.OpenFile("/fussy", os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("please\n"))
	if err := f.Close(); err == nil || !strings.Contains(err.Error(), "no thanks") {
		t.Errorf("close of a refused request: %v", err)
	}
	// A truncate of a file that takes no writes is refused.
	if err := c.Truncate("/state", 0); !errors.Is(err, os.ErrPermission) {
		t.Errorf("truncate state: %v, want permission denied", err)
	}
}

// Write a request and read its reply on the same handle, as `ollie rdwr`
// does: from offset 0 after a seek, or on from where the write ended.
func TestRdWr(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial})
	f, err := c.OpenFile("/upper", os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("shout this\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(f); err != nil || string(b) != "SHOUT THIS\n" {
		t.Fatalf("reply: %q %v", b, err)
	}
	// A second request on the same handle, read on from the write.
	if _, err := f.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(f); err != nil || string(b) != "AGAIN" {
		t.Fatalf("second reply: %q %v", b, err)
	}
}

func TestStreamGrows(t *testing.T) {
	fx := newFixture(t)
	const wait = 300 * time.Millisecond
	c := session(t, &sftpns.Server{Dial: fx.dial, StreamWait: wait})
	fx.chat.Write([]byte("hello\n"))
	f, err := c.Open("/chat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := c.Stat("/chat"); err != nil || fi.Size() != 6 {
		t.Errorf("stat chat: %v %v, want size 6", fi, err)
	}

	// At the end, a read waits StreamWait, then answers EOF.
	buf := make([]byte, 100)
	start := time.Now()
	n, err := f.ReadAt(buf, 6)
	if n != 0 || err != io.EOF {
		t.Errorf("read at the end: %d %v, want EOF", n, err)
	}
	if d := time.Since(start); d < wait || d > wait+2*time.Second {
		t.Errorf("read at the end answered after %v, want about %v", d, wait)
	}
	// Past the end: EOF at once.
	start = time.Now()
	if n, err := f.ReadAt(buf, 1000); n != 0 || err != io.EOF {
		t.Errorf("read past the end: %d %v, want EOF", n, err)
	}
	if d := time.Since(start); d >= wait {
		t.Errorf("read past the end waited %v", d)
	}

	// A read at the end gets what comes while it waits.
	go func() {
		// Into the read's wait is the point: what comes then is answered.
		await.For(t.Context(), wait/3)
		fx.chat.Write([]byte("world\n"))
	}()
	n, err = f.ReadAt(buf, 6)
	if err != nil && err != io.EOF || string(buf[:n]) != "world\n" {
		t.Errorf("read while it grows: %q %v", buf[:n], err)
	}
	if fi, err := c.Stat("/chat"); err != nil || fi.Size() != 12 {
		t.Errorf("stat chat after growth: %v %v, want size 12", fi, err)
	}

	// Read to the end from the start: everything, then EOF after the wait.
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "hello\nworld\n" {
		t.Errorf("read the whole chat: %q %v", b, err)
	}

	// A closed stream ends at once.
	fx.chat.Close()
	start = time.Now()
	if n, err := f.ReadAt(buf, 12); n != 0 || err != io.EOF {
		t.Errorf("read at the end of a closed stream: %d %v", n, err)
	}
	if d := time.Since(start); d >= wait {
		t.Errorf("read at the end of a closed stream waited %v", d)
	}
}

func TestRefusals(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial})
	unsupported := func(what string, err error) {
		t.Helper()
		var se *sftp.StatusError
		if !errors.As(err, &se) || se.FxCode() != sftp.ErrSSHFxOpUnsupported {
			t.Errorf("%s: %v, want operation unsupported", what, err)
		}
	}
	unsupported("rename", c.Rename("/state", "/other"))
	unsupported("posix-rename", c.PosixRename("/state", "/other"))
	unsupported("remove", c.Remove("/state"))
	unsupported("rmdir", c.RemoveDirectory("/dir"))
	unsupported("mkdir", c.Mkdir("/new"))
	unsupported("symlink", c.Symlink("/state", "/link"))
	if _, err := c.ReadLink("/state"); err == nil {
		t.Error("readlink succeeded")
	}
	if err := c.Chmod("/prompt", 0666); !errors.Is(err, os.ErrPermission) {
		t.Errorf("chmod: %v, want permission denied", err)
	}
	if err := c.Truncate("/prompt", 3); !errors.Is(err, os.ErrPermission) {
		t.Errorf("truncate to 3: %v, want permission denied", err)
	}
	// No file is created.
	if _, err := c.Create("/new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("create /new: %v, want not exist", err)
	}
	// The namespace's own permissions hold: state takes no writes.
	if _, err := c.OpenFile("/state", os.O_WRONLY); err == nil {
		t.Error("opening state for writing succeeded")
	}
}

func TestReadOnly(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial, ReadOnly: true})
	if _, err := c.OpenFile("/prompt", os.O_WRONLY); !errors.Is(err, os.ErrPermission) {
		t.Errorf("open prompt for writing: %v, want permission denied", err)
	}
	if _, err := c.OpenFile("/upper", os.O_RDWR); !errors.Is(err, os.ErrPermission) {
		t.Errorf("open upper for rdwr: %v, want permission denied", err)
	}
	if err := c.Truncate("/prompt", 0); !errors.Is(err, os.ErrPermission) {
		t.Errorf("truncate prompt: %v, want permission denied", err)
	}
	if b, err := readFile(c, "/state"); err != nil || b != stateText {
		t.Errorf("read state: %q %v", b, err)
	}
	if len(fx.sent()) != 0 {
		t.Error("a read-only session sent a request")
	}
}

func TestMaxHandles(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial, MaxHandles: 2})
	var open []*sftp.File
	for range 2 {
		f, err := c.Open("/state")
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	if _, err := c.Open("/state"); err == nil || !strings.Contains(err.Error(), "files open") {
		t.Errorf("a third open: %v, want refused", err)
	}
	open[0].Close()
	f, err := c.Open("/state")
	if err != nil {
		t.Fatalf("open after a close: %v", err)
	}
	f.Close()
	open[1].Close()
}

func readFile(c *sftp.Client, name string) (string, error) {
	f, err := c.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// A request is bounded by the span of offsets written, checked before the
// server holds it: a client's offsets are not trusted.
func TestRequestBound(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial, MaxRequest: 10})
	f, err := c.OpenFile("/prompt", os.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("0123456789"), 0); err != nil {
		t.Fatalf("a request of the limit: %v", err)
	}
	if _, err := f.WriteAt([]byte("x"), 10); err == nil {
		t.Error("a write past the limit succeeded")
	}
	f.Close()
	f, err = c.OpenFile("/prompt", os.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("far"), 1<<40); err != nil {
		t.Fatalf("a write far out: %v", err)
	}
	if _, err := f.WriteAt([]byte("near"), 0); err == nil {
		t.Error("a write spanning 1 TiB succeeded")
	}
	f.Close()
	if got := fx.sent(); len(got) != 2 || got[0] != "0123456789" || got[1] != "far" {
		t.Errorf("sent %q", got)
	}
}

// A session that ends with an upload open sends nothing: the request was
// cut short.
func TestCutShort(t *testing.T) {
	fx := newFixture(t)
	c, sv := serveSession(t, &sftpns.Server{Dial: fx.dial})
	f, err := c.OpenFile("/prompt", os.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("half a prom")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !sv.ended() { // the session, and what it would send, is over
		t.Fatal("Serve did not return after the client closed")
	}
	if got := fx.sent(); len(got) != 0 {
		t.Errorf("sent %q", got)
	}
}

// A handle that reads has a 9P connection of its own (its bounded reads
// interrupt it); a write-only one shares the session's.
func TestDials(t *testing.T) {
	fx := newFixture(t)
	var mu sync.Mutex
	dials := 0
	dial := func() (*client.Conn, error) {
		mu.Lock()
		dials++
		mu.Unlock()
		return fx.dial()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return dials
	}
	c := session(t, &sftpns.Server{Dial: dial})
	if n := count(); n != 1 {
		t.Fatalf("%d dials for a session, want 1", n)
	}
	f, err := c.OpenFile("/prompt", os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Errorf("%d dials after a write-only handle, want 1", n)
	}
	if _, err := readFile(c, "/state"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Errorf("%d dials after a read, want 2", n)
	}
}

// Pipelined reads of a reply, run in any order: the reply starts where
// the first read at the request's start or end says, whichever read the
// server happens to run first.
func TestRdWrPipelined(t *testing.T) {
	fx := newFixture(t)
	c, sv := serveSession(t, &sftpns.Server{Dial: fx.dial})
	for _, start := range []int64{0, 8} { // seek back, read on
		f, err := c.OpenFile("/upper", os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("abcdefgh"), 0); err != nil {
			t.Fatal(err)
		}
		later := make(chan string, 1)
		before := sv.Delivered()
		go func() {
			buf := make([]byte, 4)
			n, err := f.ReadAt(buf, start+4)
			later <- fmt.Sprintf("%s %v", buf[:n], err)
		}()
		// The later read is asked first: the server has taken it in.
		await.Until(t, 5*time.Second, "the read at the reply's end reaching the server", func() bool { return sv.Delivered() > before })
		buf := make([]byte, 4)
		n, err := f.ReadAt(buf, start)
		if got := fmt.Sprintf("%s %v", buf[:n], err); got != "ABCD <nil>" {
			t.Errorf("reply at %d: %s", start, got)
		}
		if got := <-later; got != "EFGH <nil>" {
			t.Errorf("reply at %d+4, asked first: %s", start, got)
		}
		f.Close()
	}
}

// A stat's measuring open of a slow snapshot does not hold the session up:
// the stat answers length 0 after a while, and so do stats while it runs.
func TestSlowStat(t *testing.T) {
	fx := newFixture(t)
	c := session(t, &sftpns.Server{Dial: fx.dial})
	start := time.Now()
	fi, err := c.Stat("/slow")
	if err != nil || fi.Size() != 0 {
		t.Errorf("stat slow: %v %v, want length 0", fi, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stat of a slow snapshot took %v", d)
	}
	if fi, err := c.Stat("/state"); err != nil || fi.Size() != 0 {
		t.Errorf("stat state while slow is measured: %v %v, want length 0", fi, err)
	}
	if _, err := c.ReadDir("/"); err != nil {
		t.Errorf("ls / while slow is measured: %v", err)
	}
	close(fx.slow)
	await.Until(t, 5*time.Second, "stat state measured after slow was", func() bool {
		fi, err = c.Stat("/state")
		return err == nil && fi.Size() == int64(len(stateText))
	}, func() string { return fmt.Sprintf("stat state: %v %v", fi, err) })
}
