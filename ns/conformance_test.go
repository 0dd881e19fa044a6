package ns_test

// The conformance suite: the real 9fans client (or raw frames, where the
// client cannot say it) against a Server on a real Unix socket.

import (
	"io"
	"slices"
	"strings"
	"testing"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/ns"
)

func TestWalk(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	sock := serveUnix(t, newServer(w))
	fs := mount(t, "unix", sock, "glenda")
	r := dialRaw(t, "unix", sock)
	r.start(8192, "glenda")

	root := r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1}).Wqid
	if len(root) != 0 {
		t.Fatalf("clone returned qids %v", root)
	}
	rootQid := r.ok(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 2, Afid: plan9.NOFID, Uname: "glenda"}).Qid
	if rootQid.Type != plan9.QTDIR {
		t.Fatalf("root qid %v is not a directory", rootQid)
	}

	walk := func(names ...string) []plan9.Qid {
		t.Helper()
		rf := r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 10, Wname: names})
		if len(rf.Wqid) == len(names) {
			r.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 10})
		}
		return rf.Wqid
	}

	t.Run("file", func(t *testing.T) {
		q := walk("hello")
		if len(q) != 1 || q[0].Type != plan9.QTFILE {
			t.Fatalf("walk hello: %v", q)
		}
	})
	t.Run("dotdot", func(t *testing.T) {
		q := walk("session", "..")
		if len(q) != 2 || q[1] != rootQid {
			t.Fatalf("walk session/..: %v, want it to end at the root %v", q, rootQid)
		}
		q = walk("..")
		if len(q) != 1 || q[0] != rootQid {
			t.Fatalf("walk .. at the root: %v, want the root %v", q, rootQid)
		}
		if got := readFile(t, fs, "session/alpha/../beta/id"); got != "id-2\n" {
			t.Fatalf("session/alpha/../beta/id = %q", got)
		}
	})
	t.Run("partial", func(t *testing.T) {
		q := walk("session", "nosuch", "name")
		if len(q) != 1 || q[0].Type != plan9.QTDIR {
			t.Fatalf("walk session/nosuch/name: %v, want the qid of session only", q)
		}
		// A partial walk does not create newfid.
		r.fail(&plan9.Fcall{Type: plan9.Tstat, Tag: 1, Fid: 10}, "unknown fid")
		q = walk("hello", "x")
		if len(q) != 1 {
			t.Fatalf("walk through a file: %v, want one qid", q)
		}
	})
	t.Run("missing", func(t *testing.T) {
		r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 10, Wname: []string{"nosuch"}}, "nosuch: file does not exist")
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 11, Wname: []string{"session", "alpha"}})
		r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 11, Newfid: 12, Wname: []string{"nosuch"}}, "session/alpha/nosuch: file does not exist")
		r.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 11})
		for _, name := range []string{".", ""} {
			r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 10, Wname: []string{name}}, "file does not exist")
		}
		_, err := fs.Open("session/gamma/name", plan9.OREAD)
		wantErr(t, err, "not found")
	})
	t.Run("in-place", func(t *testing.T) {
		// fid == newfid moves the fid itself.
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 20})
		q := r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 20, Newfid: 20, Wname: []string{"session", "beta", "id"}}).Wqid
		if len(q) != 3 {
			t.Fatalf("walk in place: %v", q)
		}
		r.ok(&plan9.Fcall{Type: plan9.Topen, Tag: 1, Fid: 20, Mode: plan9.OREAD})
		if got := string(r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 1, Fid: 20, Count: 100}).Data); got != "id-2\n" {
			t.Fatalf("read after walking in place: %q", got)
		}
		// A walk of an open fid is refused.
		r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 20, Newfid: 21}, "clone of open fid")
		r.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 20})
	})
}

func TestOpenModes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	owner := mountAgent(t, srv, "glenda", key("glenda"))
	admin := mount(t, "unix", serveUnix(t, srv), "")
	tests := []struct {
		fs   *client.Fsys
		who  string
		path string
		mode uint8
		err  string // "" for success
	}{
		{owner, "owner", "hello", plan9.OREAD, ""},
		{owner, "owner", "hello", plan9.OWRITE, "hello: permission denied"},
		{owner, "owner", "hello", plan9.ORDWR, "hello: permission denied"},
		{owner, "owner", "hello", plan9.OEXEC, "hello: permission denied"},
		{owner, "owner", "hello", plan9.OREAD | plan9.OTRUNC, "hello: permission denied"},
		{owner, "owner", "hello", plan9.OREAD | plan9.ORCLOSE, "hello: remove on close prohibited"},
		{admin, "admin", "hello", plan9.OWRITE, "hello: file is read-only"},
		{admin, "admin", "hello", plan9.ORDWR, "hello: file is read-only"},

		{owner, "owner", "ctl", plan9.OWRITE, ""},
		{owner, "owner", "ctl", plan9.OWRITE | plan9.OTRUNC, ""},
		{owner, "owner", "ctl", plan9.OREAD, "ctl: permission denied"},
		{admin, "admin", "ctl", plan9.OREAD, "ctl: file is write-only"},
		{admin, "admin", "ctl", plan9.ORDWR, "ctl: file is write-only"},

		{owner, "owner", "calc", plan9.ORDWR, ""},
		{owner, "owner", "calc", plan9.OWRITE, ""},
		{owner, "owner", "calc", plan9.OREAD, "calc: request file: open it for writing"},

		{owner, "owner", "notes", plan9.ORDWR, ""},
		{owner, "owner", "notes", plan9.OWRITE | plan9.OTRUNC, ""},

		{owner, "owner", "session", plan9.OREAD, ""},
		{owner, "owner", "session", plan9.OWRITE, "is a directory"},
		{owner, "owner", "session", plan9.ORDWR, "is a directory"},
		{admin, "admin", "session", plan9.OREAD | plan9.ORCLOSE, "session: remove on close prohibited"},
		{owner, "owner", "session/alpha", plan9.OREAD, ""},
	}
	for _, tt := range tests {
		fid, err := tt.fs.Open(tt.path, tt.mode)
		if tt.err == "" {
			if err != nil {
				t.Errorf("%s: open %s mode %#x: %v", tt.who, tt.path, tt.mode, err)
				continue
			}
			fid.Close()
			continue
		}
		if err == nil {
			fid.Close()
			t.Errorf("%s: open %s mode %#x succeeded, want error %q", tt.who, tt.path, tt.mode, tt.err)
		} else if !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: open %s mode %#x: %q, want %q", tt.who, tt.path, tt.mode, err, tt.err)
		}
	}

	// A request on a fid opened for the other direction is refused.
	fid, err := owner.Open("notes", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	_, err = fid.Write([]byte("x"))
	wantErr(t, err, "not open for write")
}

func TestSnapshotAtOpen(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")

	w.setCounter(1)
	fid, err := fs.Open("counter", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	w.setCounter(2)
	buf := make([]byte, 100)
	n, err := fid.ReadAt(buf[:1], 0)
	if err != nil || string(buf[:n]) != "1" {
		t.Fatalf("read of the open counter: %q, %v; want the value at open, 1", buf[:n], err)
	}
	w.setCounter(3)
	n, err = fid.ReadAt(buf[:1], 1)
	if err != nil || string(buf[:n]) != "\n" {
		t.Fatalf("second read of the open counter: %q, %v", buf[:n], err)
	}
	d, err := fid.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if d.Length != 2 {
		t.Errorf("stat of the open counter: length %d, want the snapshot's 2", d.Length)
	}
	if got := readFile(t, fs, "counter"); got != "3\n" {
		t.Fatalf("a new open reads %q, want 3", got)
	}
}

func TestReadOffsets(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	fid, err := fs.Open("big", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	size := int64(len(bigData))
	for _, off := range []int64{0, 1, 4095, 4096, 40000, size - 10, size - 1} {
		want := bigData[off:min(off+100, size)]
		got := make([]byte, len(want))
		if _, err := fid.ReadAt(got, off); err != nil {
			t.Fatalf("ReadAt %d: %v", off, err)
		}
		if string(got) != string(want) {
			t.Fatalf("ReadAt %d: wrong bytes", off)
		}
	}
	for _, off := range []int64{size, size + 5, 1 << 40} {
		if n, err := fid.ReadAt(make([]byte, 10), off); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt %d past the end: %d, %v; want 0, EOF", off, n, err)
		}
	}
	all, err := io.ReadAll(fid)
	if err != nil || string(all) != string(bigData) {
		t.Fatalf("sequential read: %d bytes, %v; want %d bytes", len(all), err, size)
	}
}

func TestRdWr(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	fid, err := fs.Open("calc", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()

	_, err = fid.Read(make([]byte, 10))
	wantErr(t, err, "calc: write a request before reading the reply")

	for _, req := range []string{"first request", "second"} {
		if _, err := fid.WriteAt([]byte(req), 0); err != nil {
			t.Fatalf("write %q: %v", req, err)
		}
		// The reply is read sequentially, whatever the offset.
		var got []byte
		buf := make([]byte, 4)
		for {
			n, err := fid.ReadAt(buf, 0)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("read reply to %q: %v", req, err)
			}
		}
		if want := strings.ToUpper(req); string(got) != want {
			t.Fatalf("reply to %q: %q, want %q", req, got, want)
		}
	}

	_, err = fid.WriteAt([]byte("fail"), 0)
	wantErr(t, err, "calc: cannot fail on request")
	_, err = fid.ReadAt(make([]byte, 10), 0)
	wantErr(t, err, "write a request before reading the reply")

	// Each fid has its own reply.
	other, err := fs.Open("calc", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	fid.WriteAt([]byte("mine"), 0)
	other.WriteAt([]byte("yours"), 0)
	a, _ := io.ReadAll(fid)
	b, _ := io.ReadAll(other)
	if string(a) != "MINE" || string(b) != "YOURS" {
		t.Fatalf("two fids: %q and %q", a, b)
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	fs := mount(t, "unix", serveUnix(t, srv), "glenda")
	w.log.Write([]byte("one\n"))
	fid, err := fs.Open("log", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()

	buf := make([]byte, 100)
	n, err := pread(fid, buf, 0)
	if err != nil || string(buf[:n]) != "one\n" {
		t.Fatalf("read at 0: %q, %v", buf[:n], err)
	}
	n, err = pread(fid, buf, 2)
	if err != nil || string(buf[:n]) != "e\n" {
		t.Fatalf("read at 2: %q, %v", buf[:n], err)
	}
	_, err = pread(fid, buf, 10)
	wantErr(t, err, "stream offset 10 is past the end (4)")

	// A read at the end blocks until a write.
	type result struct {
		s   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		b := make([]byte, 100)
		n, err := pread(fid, b[:50], 4)
		got <- result{string(b[:n]), err}
	}()
	waitFor(t, "the read to reach the server", func() bool {
		select {
		case r := <-got:
			t.Fatalf("a read at the end returned %q, %v before any write", r.s, r.err)
		default:
		}
		return ns.Pending(srv) == 1
	})
	w.log.Write([]byte("two\n"))
	if r := <-got; r.err != nil || r.s != "two\n" {
		t.Fatalf("blocked read: %q, %v; want the write", r.s, r.err)
	}

	// After Close, a read at the end is EOF; earlier bytes stay readable.
	go func() {
		n, err := pread(fid, buf[:50], 8)
		got <- result{string(buf[:n]), err}
	}()
	waitFor(t, "the read to reach the server", func() bool { return ns.Pending(srv) == 1 })
	w.log.Close()
	if r := <-got; r.err != io.EOF {
		t.Fatalf("read at the end of a closed stream: %q, %v; want EOF", r.s, r.err)
	}
	fid.Seek(0, io.SeekStart)
	all, err := io.ReadAll(fid)
	if err != nil || string(all) != "one\ntwo\n" {
		t.Fatalf("whole closed stream: %q, %v", all, err)
	}

	// Offsets older than what is retained fail with a clear error.
	w.trim.Write([]byte(strings.Repeat("0123456789", 4)))
	tfid, err := fs.Open("trim", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer tfid.Close()
	_, err = pread(tfid, buf, 0)
	wantErr(t, err, "ns: stream offset no longer retained: offset 0, oldest retained 24")
	n, err = pread(tfid, buf, 30)
	if err != nil || string(buf[:n]) != "0123456789" {
		t.Fatalf("read of retained bytes: %q, %v", buf[:n], err)
	}
}

func TestWaitFile(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	fid, err := fs.Open("wait", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 3)
		n, err := fid.ReadAt(b, 0)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b[:n])
	}()
	<-w.waitIn
	select {
	case s := <-got:
		t.Fatalf("read of a wait file returned %q before the handler did", s)
	default:
	}
	w.waitOut <- []byte("changed\n")
	if s := <-got; s != "cha" {
		t.Fatalf("first read: %q", s)
	}
	// The result is then read by offset without waiting again.
	rest, err := io.ReadAll(io.NewSectionReader(fid, 3, 100))
	if err != nil || string(rest) != "nged\n" {
		t.Fatalf("rest: %q, %v", rest, err)
	}
	if len(w.waitIn) != 0 {
		t.Fatalf("the handler ran again for later reads")
	}
}

func TestSubscription(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	fs := mount(t, "unix", serveUnix(t, srv), "glenda")
	fid, err := fs.Open("event", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	if _, err := fid.Write([]byte("session.*.state\n")); err != nil {
		t.Fatal(err)
	}
	w.bus.Publish("session.a.state", "idle")
	w.bus.Publish("other.thing", "ignored")
	w.bus.Publish("session.b.state", "busy")
	buf := make([]byte, 1000)
	n, err := fid.Read(buf)
	if want := "session.a.state idle\nsession.b.state busy\n"; err != nil || string(buf[:n]) != want {
		t.Fatalf("first read: %q, %v; want %q", buf[:n], err, want)
	}

	// The next read waits for the next matching event.
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 1000)
		n, err := fid.Read(b)
		if err != nil {
			got <- "error: " + err.Error()
		}
		got <- string(b[:n])
	}()
	waitFor(t, "the read to reach the server", func() bool { return ns.Pending(srv) == 1 })
	w.bus.Publish("other.thing", "ignored")
	w.bus.Publish("session.c.state", "multi\nline")
	if s := <-got; s != "session.c.state multi\\nline\n" {
		t.Fatalf("blocked read: %q", s)
	}

	// A new filter replaces the old one.
	if _, err := fid.Write([]byte("other.*")); err != nil {
		t.Fatal(err)
	}
	w.bus.Publish("session.a.state", "ignored")
	w.bus.Publish("other.x", "1")
	n, err = fid.Read(buf)
	if err != nil || string(buf[:n]) != "other.x 1\n" {
		t.Fatalf("after a new filter: %q, %v", buf[:n], err)
	}

	// Opened for reading only, a subscription (to everything, from the
	// open on) yields one item and then EOF.
	once, err := fs.Open("event", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()
	w.bus.Publish("a", "1")
	w.bus.Publish("b", "2")
	all, err := io.ReadAll(once)
	if err != nil || string(all) != "a 1\nb 2\n" {
		t.Fatalf("read-only subscription: %q, %v", all, err)
	}
}

func TestFlushBlockedRead(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "glenda")
	r.open(1, plan9.OREAD, "log")
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Offset: 0, Count: 100})
	r.send(&plan9.Fcall{Type: plan9.Tflush, Tag: 11, Oldtag: 10})
	// The flushed request is answered first, then the flush.
	if f := r.recv(); f.Type != plan9.Rerror || f.Tag != 10 || f.Ename != "interrupted" {
		t.Fatalf("got %v, want Rerror tag 10 ename interrupted", f)
	}
	if f := r.recv(); f.Type != plan9.Rflush || f.Tag != 11 {
		t.Fatalf("got %v, want Rflush tag 11", f)
	}
	// The fid still works, and a flush of nothing is answered at once.
	r.ok(&plan9.Fcall{Type: plan9.Tflush, Tag: 12, Oldtag: 99})
	w.log.Write([]byte("x"))
	if f := r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 100}); string(f.Data) != "x" {
		t.Fatalf("read after flush: %v", f)
	}
}

func TestBlockedReadDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "glenda")
	r.open(1, plan9.OREAD, "log")
	r.open(2, plan9.OREAD, "wait")
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Count: 100})
	r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 11, Fid: 2, Count: 100})
	<-w.waitIn
	r.open(3, plan9.OREAD, "hello")
	if f := r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 12, Fid: 3, Count: 100}); string(f.Data) != "hello, world\n" {
		t.Fatalf("read beside blocked ones: %v", f)
	}
	r.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 13, Fid: 0})
	w.log.Write([]byte("log"))
	if f := r.recv(); f.Tag != 10 || string(f.Data) != "log" {
		t.Fatalf("got %v, want Rread tag 10 data log", f)
	}
	w.waitOut <- []byte("wait")
	if f := r.recv(); f.Tag != 11 || string(f.Data) != "wait" {
		t.Fatalf("got %v, want Rread tag 11 data wait", f)
	}
}

// pread is one Tread of len(b) at off. (client.Fid.ReadAt loops until b
// is full, which on a stream means until more is written.)
func pread(fid *client.Fid, b []byte, off int64) (int, error) {
	if _, err := fid.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return fid.Read(b)
}

func dirNames(t *testing.T, fs *client.Fsys, path string) ([]string, []*plan9.Dir) {
	t.Helper()
	fid, err := fs.Open(path, plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	dirs, err := fid.Dirreadall()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, d.Name)
	}
	return names, dirs
}

func stat(t *testing.T, fs *client.Fsys, path string) *plan9.Dir {
	t.Helper()
	d, err := fs.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return d
}

func TestDynamic(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	names, dirs := dirNames(t, fs, "session")
	if !slices.Equal(names, []string{"alpha", "beta"}) {
		t.Fatalf("session/ lists %q", names)
	}
	for _, d := range dirs {
		if d.Qid.Type != plan9.QTDIR || d.Mode != plan9.DMDIR|0555 {
			t.Errorf("%s: qid %v mode %v", d.Name, d.Qid, d.Mode)
		}
		if q := stat(t, fs, "session/"+d.Name).Qid; q != d.Qid {
			t.Errorf("%s: listed qid %v, walked qid %v", d.Name, d.Qid, q)
		}
	}
	if dirs[0].Qid == dirs[1].Qid {
		t.Errorf("two sessions share qid %v", dirs[0].Qid)
	}
	if a, b := stat(t, fs, "session/alpha/name").Qid, stat(t, fs, "session/beta/name").Qid; a == b {
		t.Errorf("files of two sessions share qid %v", a)
	}
	if got := readFile(t, fs, "session/beta/name"); got != "beta\n" {
		t.Errorf("session/beta/name = %q", got)
	}
	if got := readFile(t, fs, "session/beta/id"); got != "id-2\n" {
		t.Errorf("session/beta/id = %q (Call.Key)", got)
	}
	names, _ = dirNames(t, fs, "session/alpha")
	if !slices.Equal(names, []string{"name", "id", "plan"}) {
		t.Errorf("session/alpha lists %q", names)
	}
	names, _ = dirNames(t, fs, "")
	want := []string{"hello", "counter", "big", "whoami", "ctl", "calc", "log", "trim", "wait", "event", "notes", "secret", "drop", "private", "session"}
	if !slices.Equal(names, want) {
		t.Errorf("root lists %q, want %q", names, want)
	}
}

func TestRename(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "alice")
	before := stat(t, fs, "session/alpha")
	walked, err := fs.Open("session/alpha", plan9.OREAD) // opened before the rename
	if err != nil {
		t.Fatal(err)
	}
	defer walked.Close()

	w.rename("id-1", "gamma")

	names, _ := dirNames(t, fs, "session")
	if !slices.Equal(names, []string{"gamma", "beta"}) {
		t.Fatalf("after the rename session/ lists %q", names)
	}
	if _, err := fs.Stat("session/alpha"); err == nil {
		t.Fatalf("the old name still walks")
	}
	if q := stat(t, fs, "session/gamma").Qid; q != before.Qid {
		t.Errorf("new name: qid %v, want the old %v", q, before.Qid)
	}
	if q := stat(t, fs, "session/id-1").Qid; q != before.Qid {
		t.Errorf("id alias: qid %v, want %v", q, before.Qid)
	}
	if a, b := stat(t, fs, "session/gamma/plan").Qid, stat(t, fs, "session/id-1/plan").Qid; a != b {
		t.Errorf("plan by name %v and by alias %v differ", a, b)
	}
	d, err := walked.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "gamma" || d.Qid != before.Qid {
		t.Errorf("stat of a fid opened before the rename: name %q qid %v, want gamma %v", d.Name, d.Qid, before.Qid)
	}
	if got := readFile(t, fs, "session/id-1/name"); got != "gamma\n" {
		t.Errorf("name via alias = %q", got)
	}
	// What is written by one path is read by the other.
	writeFile(t, fs, "session/gamma/plan", "step 1\n")
	if got := readFile(t, fs, "session/id-1/plan"); got != "step 1\n" {
		t.Errorf("plan via alias = %q", got)
	}
}

func TestAlias(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	names, _ := dirNames(t, fs, "session")
	if slices.Contains(names, "id-2") {
		t.Fatalf("the alias is listed: %q", names)
	}
	byName, byAlias := stat(t, fs, "session/beta"), stat(t, fs, "session/id-2")
	if byName.Qid != byAlias.Qid {
		t.Fatalf("qid by name %v, by alias %v", byName.Qid, byAlias.Qid)
	}
	if byAlias.Name != "beta" {
		t.Errorf("stat by alias names %q, want the visible name beta", byAlias.Name)
	}
	if got := readFile(t, fs, "session/id-2/id"); got != "id-2\n" {
		t.Errorf("session/id-2/id = %q", got)
	}
}

// TestPipelinedOnOneFid sends requests on one fid without waiting for
// replies, as a careless or hostile client may. Whatever the replies, the
// server must stay consistent (run with -race) and answer everything.
func TestPipelinedOnOneFid(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	r := dialRaw(t, "unix", serveUnix(t, srv))
	r.start(8192, "glenda")
	tag := uint16(1)
	send := func(f *plan9.Fcall) {
		f.Tag = tag
		tag++
		r.send(f)
	}
	for i, name := range []string{"hello", "calc", "log", "event", "notes", "session"} {
		for j := range 20 {
			fid := uint32(100*i + j + 1)
			r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid, Wname: []string{name}})
			tag = 10
			send(&plan9.Fcall{Type: plan9.Topen, Fid: fid, Mode: plan9.ORDWR &^ uint8(j%2*2)})
			send(&plan9.Fcall{Type: plan9.Topen, Fid: fid, Mode: plan9.OREAD})
			send(&plan9.Fcall{Type: plan9.Tstat, Fid: fid})
			send(&plan9.Fcall{Type: plan9.Twrite, Fid: fid, Data: []byte("x")})
			send(&plan9.Fcall{Type: plan9.Tread, Fid: fid, Count: 10, Offset: 1})
			send(&plan9.Fcall{Type: plan9.Tclunk, Fid: fid})
			send(&plan9.Fcall{Type: plan9.Tflush, Oldtag: 14})
			for range tag - 10 {
				r.recv()
			}
		}
	}
	if n := ns.Pending(srv); n != 0 {
		t.Errorf("%d requests still pending", n)
	}
}
