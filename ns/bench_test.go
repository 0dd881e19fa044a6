package ns_test

// Benchmarks put a peer beside each measurement, in the same run and
// interleaved with it: a raw Unix-socket round trip beside a small 9P
// operation, a raw Unix-socket copy beside a 9P stream read. The ratios are
// what docs/benchmarks.md reports against the goals.
//
//	go test ./ns -run '^$' -bench . -benchtime 3s -count 3

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"
	"9fans.net/go/plan9/srv9p"

	"ollie/ns"
	"ollie/ns/stream"
)

// echoServer answers each message of size bytes on a Unix socket with the
// same bytes: the cheapest round trip the transport allows.
func echoServer(b *testing.B, size int) net.Conn {
	sock := filepath.Join(b.TempDir(), "echo")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkSmallOp is walk+open+read+clunk of a small file through the
// 9fans client on a Unix socket (four round trips), beside four raw echo
// round trips of a message the size of a small 9P request.
func BenchmarkSmallOp(b *testing.B) {
	w := newWorld(b)
	fs := mount(b, "unix", serveUnix(b, newServer(w)), "glenda")
	const msgSize = 32 // a Twalk of one short name is about this long
	echo := echoServer(b, msgSize)
	msg := make([]byte, msgSize)
	buf := make([]byte, 64)

	op := func() {
		fid, err := fs.Open("hello", plan9.OREAD) // Twalk, Topen
		if err != nil {
			b.Fatal(err)
		}
		if n, err := fid.Read(buf); err != nil || n != 13 { // Tread
			b.Fatalf("read %d, %v", n, err)
		}
		if err := fid.Close(); err != nil { // Tclunk
			b.Fatal(err)
		}
	}
	raw := func() {
		for range 4 {
			if _, err := echo.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(echo, msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	op()
	raw()
	var tOp, tRaw time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		op()
		t1 := time.Now()
		raw()
		tOp += t1.Sub(t0)
		tRaw += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tOp.Nanoseconds())/n, "ns/op")
	b.ReportMetric(n/tOp.Seconds(), "ops/s")
	b.ReportMetric(float64(tRaw.Nanoseconds())/n/4, "raw-rt-ns")
	b.ReportMetric(float64(tOp)/float64(tRaw), "x-4rt")
}

const streamSize = 64 << 20

// BenchmarkStream reads 64 MiB from a 9P stream through the 9fans client
// at msize 128 KiB, beside a raw copy of 64 MiB over a Unix socket with
// the same buffer size.
func BenchmarkStream(b *testing.B) {
	data := make([]byte, streamSize)
	for i := range data {
		data[i] = byte(i)
	}
	s := stream.NewStream(streamSize)
	s.Write(data)
	s.Close()
	tree, err := ns.NewTree(ns.Dir("", 0555, "",
		ns.StreamFile("stream", 0444, "64 MiB", func(context.Context, *ns.Call) (*stream.Stream, error) { return s, nil }),
	), "glenda", "glenda")
	if err != nil {
		b.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: newServer(newWorld(b)).Log}
	c, err := client.Dial("unix", serveUnix(b, srv))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	fs, err := c.Attach(nil, "glenda", "")
	if err != nil {
		b.Fatal(err)
	}
	const msize = 128 << 10 // what the 9fans client asks for
	buf := make([]byte, msize)

	// The raw peer: a request byte, answered with 64 MiB.
	sock := filepath.Join(b.TempDir(), "raw")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			for off := 0; off < len(data); off += msize {
				if _, err := c.Write(data[off : off+msize]); err != nil {
					return
				}
			}
		}
	}()
	rc, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rc.Close() })

	ninep := func() {
		fid, err := fs.Open("stream", plan9.OREAD)
		if err != nil {
			b.Fatal(err)
		}
		total := 0
		for {
			n, err := fid.Read(buf)
			total += n
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		fid.Close()
		if total != streamSize {
			b.Fatalf("read %d bytes", total)
		}
	}
	raw := func() {
		if _, err := rc.Write([]byte{1}); err != nil {
			b.Fatal(err)
		}
		for total := 0; total < streamSize; {
			n, err := rc.Read(buf[:min(len(buf), streamSize-total)])
			if err != nil {
				b.Fatalf("raw copy after %d bytes: %v", total, err)
			}
			total += n
		}
	}
	ninep()
	raw()
	var t9, tRaw time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ninep()
		t1 := time.Now()
		raw()
		t9 += t1.Sub(t0)
		tRaw += time.Since(t1)
	}
	mb := float64(streamSize) * float64(b.N) / 1e6
	b.ReportMetric(float64(t9.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(mb/t9.Seconds(), "MB/s")
	b.ReportMetric(mb/tRaw.Seconds(), "raw-MB/s")
	b.ReportMetric(tRaw.Seconds()/t9.Seconds(), "of-raw")
}

// The floors below serve the same operations without ns, to tell its
// cost from that of srv9p, the 9fans client and the protocol: "inline"
// answers each request on the reading goroutine with no allocation it can
// avoid (the cheapest 9P server there is for this client); "srv9p" is
// srv9p with its own file tree and no ns. Their ratios beside the
// benchmarks above say which part is whose.

// listenFloor serves each connection accepted on a Unix socket with serve.
func listenFloor(b *testing.B, serve func(net.Conn)) string {
	sock := filepath.Join(b.TempDir(), "floor")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return sock
}

// inlineServer answers version, attach, walk, open, read and clunk of
// one file whose content is data, in order, on the reading goroutine.
func inlineServer(data []byte) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		for {
			f, err := plan9.ReadFcall(c)
			if err != nil {
				return
			}
			r := &plan9.Fcall{Type: f.Type + 1, Tag: f.Tag}
			switch f.Type {
			case plan9.Tversion:
				r.Msize, r.Version = f.Msize, "9P2000"
			case plan9.Tattach:
				r.Qid = plan9.Qid{Type: plan9.QTDIR}
			case plan9.Twalk:
				for range f.Wname {
					r.Wqid = append(r.Wqid, plan9.Qid{Path: 1})
				}
			case plan9.Topen:
				r.Qid = plan9.Qid{Path: 1}
			case plan9.Tread:
				// Header, then the data straight from its buffer (writev).
				end := min(f.Offset+uint64(f.Count), uint64(len(data)))
				chunk := data[min(f.Offset, end):end]
				hdr := binary.LittleEndian.AppendUint32(nil, uint32(11+len(chunk)))
				hdr = binary.LittleEndian.AppendUint16(append(hdr, plan9.Rread), f.Tag)
				hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(chunk)))
				bufs := net.Buffers{hdr, chunk}
				if _, err := bufs.WriteTo(c); err != nil {
					return
				}
				continue
			}
			if err := plan9.WriteFcall(c, r); err != nil {
				return
			}
		}
	}
}

// srv9pServer serves one file whose content is data with srv9p alone.
func srv9pServer(data []byte) func(net.Conn) {
	return func(c net.Conn) {
		tree := srv9p.NewTree("glenda", "glenda", plan9.DMDIR|0555, nil)
		tree.Root.Create("file", "glenda", 0444, nil)
		s := &srv9p.Server{Tree: tree, Msize: ns.DefaultMaxMsize, Read: func(_ context.Context, fid *srv9p.Fid, p []byte, off int64) (int, error) {
			return fid.ReadBytes(p, off, data)
		}}
		s.Serve(c, c)
	}
}

func mountFloor(b *testing.B, serve func(net.Conn)) *client.Fsys {
	c, err := client.Dial("unix", listenFloor(b, serve))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	fs, err := c.Attach(nil, "glenda", "")
	if err != nil {
		b.Fatal(err)
	}
	return fs
}

func BenchmarkSmallOpFloor(b *testing.B) {
	hello := []byte("hello, world\n")
	for _, floor := range []struct {
		name  string
		serve func(net.Conn)
	}{{"inline", inlineServer(hello)}, {"srv9p", srv9pServer(hello)}} {
		b.Run(floor.name, func(b *testing.B) {
			fs := mountFloor(b, floor.serve)
			echo := echoServer(b, 32)
			msg, buf := make([]byte, 32), make([]byte, 64)
			var tOp, tRaw time.Duration
			for range b.N {
				t0 := time.Now()
				fid, err := fs.Open("file", plan9.OREAD)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := fid.Read(buf); err != nil || n != len(hello) {
					b.Fatalf("read %d, %v", n, err)
				}
				fid.Close()
				t1 := time.Now()
				for range 4 {
					echo.Write(msg)
					io.ReadFull(echo, msg)
				}
				tOp += t1.Sub(t0)
				tRaw += time.Since(t1)
			}
			b.ReportMetric(float64(tOp.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(float64(tOp)/float64(tRaw), "x-4rt")
		})
	}
}

func BenchmarkStreamFloor(b *testing.B) {
	data := make([]byte, streamSize)
	for i := range data {
		data[i] = byte(i)
	}
	for _, floor := range []struct {
		name  string
		serve func(net.Conn)
	}{{"inline", inlineServer(data)}, {"srv9p", srv9pServer(data)}} {
		b.Run(floor.name, func(b *testing.B) {
			fs := mountFloor(b, floor.serve)
			buf := make([]byte, 128<<10)
			b.SetBytes(streamSize)
			for range b.N {
				fid, err := fs.Open("file", plan9.OREAD)
				if err != nil {
					b.Fatal(err)
				}
				total := 0
				for {
					n, err := fid.Read(buf)
					total += n
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				fid.Close()
				if total != streamSize {
					b.Fatalf("read %d bytes", total)
				}
			}
		})
	}
}
