package ns_test

// The floors: servers without ns, to tell ns's cost from that of the 9fans
// client, the protocol and the transport.

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"
	"9fans.net/go/plan9/srv9p"

	"ollie/ns"
)

// The floors below serve the same operations in this process, to tell
// ns's cost from that of the 9fans client and the protocol: "inline"
// answers each request on the reading goroutine with no allocation it can
// avoid (the cheapest 9P server there is for this client); "srv9p" is
// srv9p with its own file tree; "ns" is ns.Server with the file as a Read
// snapshot. Their ratios side by side say which part is whose.

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

// aheadServer serves as inlineServer does, except that it does not wait
// for the Treads of a read from offset 0: from the first one on, a
// goroutine writes the Rreads of the whole file, in order, with that
// Tread's tag and count, as fast as the socket takes them, while the loop
// reads the Treads that ask for them. (The 9fans client, one Tread at a
// time, gives each the tag of the last.) So every reply is waiting on the
// socket before its Tread is sent: no server can answer this client
// sooner, and what the client reaches here is the most any server can
// give it. A Tread other than the one expected ends the connection, so a
// client that reads otherwise fails the benchmark rather than passing it.
func aheadServer(data []byte) func(net.Conn) {
	size := uint64(len(data))
	return func(c net.Conn) {
		defer c.Close()
		rd := bufio.NewReader(c)
		var (
			written    chan struct{} // closed once every Rread is written; nil between reads
			tag        uint16
			count, off uint64 // off is what the next Tread must ask for
		)
		for {
			f, err := plan9.ReadFcall(rd)
			if err != nil {
				return
			}
			if f.Type == plan9.Tread && (written != nil || f.Offset == 0) {
				if written == nil {
					tag, count, off = f.Tag, uint64(f.Count), 0
					written = make(chan struct{})
					go writeAhead(c, data, tag, count, written)
				}
				if f.Tag != tag || uint64(f.Count) != count || f.Offset != off {
					return
				}
				if off == size {
					<-written // the last, empty Rread is out
					written = nil
				}
				off = min(off+count, size)
				continue
			}
			if written != nil {
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
				r.Type, r.Ename = plan9.Rerror, "read from offset 0"
			}
			if err := plan9.WriteFcall(c, r); err != nil {
				return
			}
		}
	}
}

// writeAhead writes the Rreads of data, count bytes each, to the empty
// one at its end, then closes written.
func writeAhead(c net.Conn, data []byte, tag uint16, count uint64, written chan struct{}) {
	defer close(written)
	for off := uint64(0); ; off += count {
		chunk := data[min(off, uint64(len(data))):min(off+count, uint64(len(data)))]
		hdr := binary.LittleEndian.AppendUint32(nil, uint32(11+len(chunk)))
		hdr = binary.LittleEndian.AppendUint16(append(hdr, plan9.Rread), tag)
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(chunk)))
		bufs := net.Buffers{hdr, chunk}
		if _, err := bufs.WriteTo(c); err != nil || len(chunk) == 0 {
			return
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

// nsServer serves one file whose content is data with ns.
func nsServer(data []byte) func(net.Conn) {
	tree, err := ns.NewTree(ns.Dir("", 0555, "",
		ns.ReadFile("file", 0444, "", func(context.Context, *ns.Call) ([]byte, error) { return data, nil }),
	), "glenda", "glenda")
	if err != nil {
		panic(err)
	}
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return func(c net.Conn) { srv.ServeConn(c, ns.Peer{Kind: ns.Owner, UID: -1}) }
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
	hello := []byte(hello)
	for _, floor := range []struct {
		name  string
		serve func(net.Conn)
	}{{"inline", inlineServer(hello)}, {"srv9p", srv9pServer(hello)}, {"ns", nsServer(hello)}} {
		b.Run(floor.name, func(b *testing.B) {
			fs := mountFloor(b, floor.serve)
			echo := dialUnix(b, listenFloor(b, echo))
			msg, buf := make([]byte, echoSize), make([]byte, msize9fans)
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
	data := streamData()
	for _, floor := range []struct {
		name  string
		serve func(net.Conn)
	}{{"inline", inlineServer(data)}, {"srv9p", srv9pServer(data)}, {"ns", nsServer(data)}} {
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
