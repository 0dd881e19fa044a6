package ns_test

// Limits: each one bounds what a client can make the server hold, and
// each refusal is an Rerror that says which limit.

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns"
)

func TestMsize(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxMsize = 16384
	r := dialRaw(t, "unix", serveUnix(t, srv))

	r.fail(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: ns.MinMsize - 1, Version: "9P2000"},
		fmt.Sprintf("ns: msize %d is too small (minimum %d)", ns.MinMsize-1, ns.MinMsize))
	// The connection survives a refused Tversion.
	rv := r.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 1 << 30, Version: "9P2000"})
	if rv.Msize != 16384 {
		t.Fatalf("Tversion msize 1<<30: Rversion msize %d, want the cap 16384", rv.Msize)
	}
	r.ok(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: "glenda"})
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1, Wname: []string{"big"}})
	ro := r.ok(&plan9.Fcall{Type: plan9.Topen, Tag: 1, Fid: 1, Mode: plan9.OREAD})
	if ro.Iounit != 16384-plan9.IOHDRSZ {
		t.Errorf("iounit %d, want msize-IOHDRSZ = %d", ro.Iounit, 16384-plan9.IOHDRSZ)
	}
	// A read asking for more than fits is cut to what fits.
	if rd := r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 1, Fid: 1, Count: 1 << 20}); len(rd.Data) != 16384-plan9.IOHDRSZ {
		t.Errorf("read of 1 MiB at msize 16384: %d bytes", len(rd.Data))
	}

	// The default cap.
	r2 := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	if rv := r2.ok(&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 1 << 30, Version: "9P2000"}); rv.Msize != ns.DefaultMaxMsize {
		t.Errorf("default cap: Rversion msize %d, want %d", rv.Msize, ns.DefaultMaxMsize)
	}
	// The smallest msize allowed works.
	r3 := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r3.start(ns.MinMsize, "glenda")
	r3.open(1, plan9.OREAD, "hello")
	if rd := r3.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 1, Fid: 1, Count: 1000}); string(rd.Data) != "hello, world\n" {
		t.Errorf("read at the smallest msize: %v", rd)
	}
}

// frameHeader is the start of a 9P frame claiming size bytes.
func frameHeader(size uint32, typ uint8, tag uint16) []byte {
	b := binary.LittleEndian.AppendUint32(nil, size)
	b = append(b, typ)
	return binary.LittleEndian.AppendUint16(b, tag)
}

func TestOversizedMessage(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "glenda")
	r.sendBytes(frameHeader(8193, plan9.Twrite, 7))
	f := r.recv()
	if f.Type != plan9.Rerror || f.Tag != 7 || f.Ename != "ns: message of 8193 bytes exceeds msize 8192" {
		t.Fatalf("got %v, want Rerror tag 7 naming the sizes", f)
	}
	r.expectClosed()

	// A frame shorter than its own header ends the connection too.
	r = dialRaw(t, "unix", serveUnix(t, newServer(w)))
	r.start(8192, "glenda")
	r.sendBytes([]byte{6, 0, 0, 0, 0, 0})
	r.expectClosed()
}

func TestMaxFids(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxFids = 4
	r := dialRaw(t, "unix", serveUnix(t, srv))
	r.start(8192, "glenda") // fid 0
	for fid := uint32(1); fid < 4; fid++ {
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid})
	}
	r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4, Wname: []string{"hello"}}, "ns: too many fids (limit 4)")
	r.fail(&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 4, Afid: plan9.NOFID, Uname: "glenda"}, "ns: too many fids (limit 4)")
	// Walking a fid in place takes no new fid.
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 3, Newfid: 3, Wname: []string{"session"}})
	// Failed walks do not count.
	r.ok(&plan9.Fcall{Type: plan9.Tclunk, Tag: 1, Fid: 3})
	r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4, Wname: []string{"nosuch"}}, "does not exist")
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 4, Wname: []string{"session", "nosuch"}})
	r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 5, Wname: []string{"hello"}})
	r.fail(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 6}, "ns: too many fids (limit 4)")

	// The limit is per connection.
	r2 := dialRaw(t, "unix", serveUnix(t, srv))
	r2.start(8192, "glenda")
	r2.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1})
}

func TestMaxRequests(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	srv.MaxRequests = 3
	r := dialRaw(t, "unix", serveUnix(t, srv))
	r.start(8192, "glenda")
	r.open(1, plan9.OREAD, "log")
	for tag := uint16(10); tag < 13; tag++ {
		r.send(&plan9.Fcall{Type: plan9.Tread, Tag: tag, Fid: 1, Count: 100})
	}
	r.fail(&plan9.Fcall{Type: plan9.Tread, Tag: 13, Fid: 1, Count: 100}, "ns: too many outstanding requests (limit 3)")
	r.fail(&plan9.Fcall{Type: plan9.Tstat, Tag: 14, Fid: 0}, "ns: too many outstanding requests (limit 3)")

	// A flush still gets through, and frees a place.
	r.send(&plan9.Fcall{Type: plan9.Tflush, Tag: 20, Oldtag: 10})
	if f := r.recv(); f.Type != plan9.Rerror || f.Tag != 10 {
		t.Fatalf("got %v, want Rerror for the flushed tag 10", f)
	}
	if f := r.recv(); f.Type != plan9.Rflush || f.Tag != 20 {
		t.Fatalf("got %v, want Rflush tag 20", f)
	}
	r.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 14, Fid: 0})

	w.log.Write([]byte("x"))
	for range 2 {
		if f := r.recv(); f.Type != plan9.Rread || string(f.Data) != "x" {
			t.Fatalf("got %v, want Rread of x", f)
		}
	}
	if n := ns.Pending(srv); n != 0 {
		t.Errorf("%d requests pending after all were answered", n)
	}
}

func TestSubscriberQueue(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.bus.QueueLen = 4
	w.bus.QueueBytes = 64
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	fid, err := fs.Open("event", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer fid.Close()
	if _, err := fid.Write([]byte("*")); err != nil {
		t.Fatal(err)
	}

	// Nobody reads: the publisher does not wait for the subscriber.
	published := make(chan struct{})
	go func() {
		defer close(published)
		w.bus.Publish("a", "1")
		w.bus.Publish("big", strings.Repeat("x", 100)) // more than QueueBytes
		w.bus.Publish("b", "2")
		for i := range 10 {
			w.bus.Publish("c", fmt.Sprint(i))
		}
	}()
	select {
	case <-published:
	case <-time.After(timeout):
		t.Fatal("Publish blocked on a slow subscriber")
	}
	buf := make([]byte, 1000)
	n, err := fid.Read(buf)
	// The loss marker stands where the gap is: after a, and after the
	// queue filled.
	want := "a 1\nevent.lost 1\nb 2\nc 0\nevent.lost 9\n"
	if err != nil || string(buf[:n]) != want {
		t.Fatalf("read: %q, %v; want %q", buf[:n], err, want)
	}
	w.bus.Publish("d", "after")
	n, err = fid.Read(buf)
	if err != nil || string(buf[:n]) != "d after\n" {
		t.Fatalf("read after draining: %q, %v", buf[:n], err)
	}
}

// An error naming what the client sent must still fit in a reply: srv9p
// drops a reply longer than msize (the client waits forever) and panics on
// a string of 64 KiB or more (the process dies).
func TestLongErrorFits(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := newServer(w)
	sock := serveUnix(t, srv)
	for _, tc := range []struct {
		msize uint32
		name  int
	}{
		// The longest names that fit in a Twalk at msize.
		{ns.MinMsize, ns.MinMsize - 32},
		{8192, 8192 - 32},
		// The longest name there is.
		{ns.DefaultMaxMsize, 1<<16 - 1},
	} {
		r := dialRaw(t, "unix", sock)
		r.start(tc.msize, "glenda")
		name := strings.Repeat("n", tc.name)
		r.ok(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1, Wname: []string{"session"}})
		f := r.rpc(&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 1, Newfid: 2, Wname: []string{name}})
		if f.Type != plan9.Rerror || !strings.HasPrefix(f.Ename, "session/nnnn") {
			t.Fatalf("msize %d, walk of a %d-byte name: %v", tc.msize, tc.name, f)
		}
		if size := 4 + 1 + 2 + 2 + len(f.Ename); size > int(tc.msize) {
			t.Errorf("msize %d: Rerror of %d bytes", tc.msize, size)
		}
		r.ok(&plan9.Fcall{Type: plan9.Tstat, Tag: 2, Fid: 0})
	}
	if n := ns.Pending(srv); n != 0 {
		t.Errorf("%d requests pending after all were answered", n)
	}
}
