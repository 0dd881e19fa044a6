package ns_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"

	"9fans.net/go/plan9"

	"ollie/ns"
)

// A large Tread is answered with the file's own bytes: on a socket as
// header plus data in one writev, on other transports (a pipe, an SSH
// channel) built in a pooled buffer and written in one Write. These tests
// hold both to what a client must get: exactly the bytes at the offset
// asked for, never more than msize allows, never another reply's, and a
// read that waits still flushable while large ones go by.

// The transports a reply can take.
var rreadTransports = []struct {
	name string
	dial func(t *testing.T, srv *ns.Server) net.Conn
}{
	{"unix", func(t *testing.T, srv *ns.Server) net.Conn {
		nc, err := net.Dial("unix", serveUnix(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}},
	{"pipe", func(t *testing.T, srv *ns.Server) net.Conn {
		a, b := net.Pipe()
		go srv.ServeConn(a, ns.Peer{Kind: ns.Remote, UID: -1})
		return b
	}},
}

// fillLog writes n patterned bytes, no two nearby offsets alike, to
// w's log and returns them.
func fillLog(w *world, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i>>9)
	}
	w.log.Write(b)
	return b
}

// rreadMsize is the msize the 9fans client asks for.
const rreadMsize = 128 << 10

// TestLargeReadsAcrossMsize reads a stream and a Read file with Treads
// asking for more than msize allows, at offsets on and across iounit
// boundaries, all sent before any reply is read: each reply must carry
// its own tag and exactly the file's bytes at its offset, clipped to the
// iounit. On the socket the replies outgrow what its buffer holds (two
// of them do, at the default 208 KiB), so the server's writes stop
// part-way and resume once the client reads: the test waits until one
// has begun that cannot have finished.
func TestLargeReadsAcrossMsize(t *testing.T) {
	for _, tr := range rreadTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			srv := newServer(w)
			logData := fillLog(w, 5*rreadMsize/2+123)
			nc := tr.dial(t, srv)
			t.Cleanup(func() { nc.Close() })
			attachOpen(t, nc, "log", "big")
			iounit := int64(rreadMsize - plan9.IOHDRSZ)
			files := map[uint32][]byte{1: logData, 2: bigData}
			type read struct {
				fid uint32
				off int64
			}
			var reads []read
			for _, off := range []int64{0, 1, iounit - 1, iounit, iounit + 1, 2*iounit - 7, int64(len(logData)) - 5} {
				reads = append(reads, read{1, off})
			}
			for _, off := range []int64{0, 3, int64(len(bigData)) - 1} {
				reads = append(reads, read{2, off})
			}
			var reqs []*plan9.Fcall
			for i, rd := range reads {
				reqs = append(reqs, &plan9.Fcall{Type: plan9.Tread, Tag: uint16(100 + i), Fid: rd.fid, Offset: uint64(rd.off), Count: 1 << 20})
			}
			if _, err := nc.Write(frames(reqs...)); err != nil {
				t.Fatal(err)
			}
			if tr.name == "unix" {
				waitFor(t, "a second reply to begin", func() bool { return ns.Pending(srv) <= len(reads)-2 })
			}
			for i, rd := range reads {
				f, err := plan9.ReadFcall(nc)
				if err != nil {
					t.Fatal(err)
				}
				if f.Type != plan9.Rread || f.Tag != uint16(100+i) {
					t.Fatalf("reply %d: %v, want Rread tag %d", i, f, 100+i)
				}
				data := files[rd.fid]
				want := data[rd.off:min(rd.off+iounit, int64(len(data)))]
				if !bytes.Equal(f.Data, want) {
					t.Fatalf("fid %d at %d: %d bytes, not the %d of the file there", rd.fid, rd.off, len(f.Data), len(want))
				}
			}
		})
	}
}

// attachOpen negotiates rreadMsize on nc, attaches fid 0 as glenda and
// opens each of names for reading as fids 1, 2, and so on, one message at
// a time.
func attachOpen(t *testing.T, nc net.Conn, names ...string) {
	t.Helper()
	msgs := []*plan9.Fcall{
		{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: rreadMsize, Version: "9P2000"},
		{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: "glenda"},
	}
	for i, name := range names {
		fid := uint32(i + 1)
		msgs = append(msgs,
			&plan9.Fcall{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: fid, Wname: []string{name}},
			&plan9.Fcall{Type: plan9.Topen, Tag: 1, Fid: fid, Mode: plan9.OREAD})
	}
	for _, f := range msgs {
		if err := plan9.WriteFcall(nc, f); err != nil {
			t.Fatal(err)
		}
		if rf, err := plan9.ReadFcall(nc); err != nil || rf.Type != f.Type+1 {
			t.Fatalf("%v: %v, %v", f, rf, err)
		}
	}
}

// TestFlushBlockedReadBesideLargeReads: a Tread at the end of a stream
// waits off the reading goroutine, so large reads sent after it are
// answered meanwhile, and a Tflush still interrupts it.
func TestFlushBlockedReadBesideLargeReads(t *testing.T) {
	for _, tr := range rreadTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			srv := newServer(w)
			logData := fillLog(w, 3*rreadMsize)
			r := newRaw(t, tr.dial(t, srv))
			r.start(rreadMsize, "glenda")
			r.open(1, plan9.OREAD, "log")
			r.open(2, plan9.OREAD, "log")
			r.send(&plan9.Fcall{Type: plan9.Tread, Tag: 10, Fid: 1, Offset: uint64(len(logData)), Count: rreadMsize})
			iounit := rreadMsize - plan9.IOHDRSZ
			for off := 0; off < len(logData); off += iounit {
				f := r.ok(&plan9.Fcall{Type: plan9.Tread, Tag: 20, Fid: 2, Offset: uint64(off), Count: rreadMsize})
				if !bytes.Equal(f.Data, logData[off:min(off+iounit, len(logData))]) {
					t.Fatalf("read at %d beside a blocked one: wrong bytes", off)
				}
			}
			r.send(&plan9.Fcall{Type: plan9.Tflush, Tag: 11, Oldtag: 10})
			if f := r.recv(); f.Type != plan9.Rerror || f.Tag != 10 || f.Ename != "interrupted" {
				t.Fatalf("got %v, want Rerror tag 10 ename interrupted", f)
			}
			if f := r.recv(); f.Type != plan9.Rflush || f.Tag != 11 {
				t.Fatalf("got %v, want Rflush tag 11", f)
			}
		})
	}
}

// TestLargeReadAllocatesLittle: answering a large Tread must not cost an
// msize of garbage on any transport. On a pipe the reply used to be built
// in a fresh buffer per Rread (128 KiB each for the 9fans client), which
// the collector then had to take back. The reader here allocates nothing
// per read itself, so what is counted is the server's.
func TestLargeReadAllocatesLittle(t *testing.T) {
	for _, tr := range rreadTransports {
		t.Run(tr.name, func(t *testing.T) {
			if tr.name == "pipe" && raceBuild {
				t.Skip("the race detector's sync.Pool drops buffers at random")
			}
			w := newWorld(t)
			logData := fillLog(w, 2*rreadMsize)
			nc := tr.dial(t, newServer(w))
			t.Cleanup(func() { nc.Close() })
			attachOpen(t, nc, "log")
			iounit := rreadMsize - plan9.IOHDRSZ
			req, err := (&plan9.Fcall{Type: plan9.Tread, Tag: 5, Fid: 1, Count: uint32(iounit)}).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, rreadMsize)
			read := func() {
				if _, err := nc.Write(req); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(nc, buf[:11]); err != nil {
					t.Fatal(err)
				}
				n := int(binary.LittleEndian.Uint32(buf[7:11]))
				if buf[4] != plan9.Rread || n != iounit {
					t.Fatalf("reply of type %d with %d bytes, want Rread of %d", buf[4], n, iounit)
				}
				if _, err := io.ReadFull(nc, buf[:n]); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf[:n], logData[:n]) {
					t.Fatal("wrong bytes")
				}
			}
			read()
			const reads = 64
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range reads {
				read()
			}
			runtime.ReadMemStats(&after)
			if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > 16<<10 {
				t.Errorf("a read of %d bytes allocates %d bytes, want less than 16 KiB", iounit, per)
			}
		})
	}
}
