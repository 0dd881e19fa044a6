package ns_test

// Benchmarks put a peer beside each measurement, in the same run and
// interleaved with it. The main ones run the servers in a second process,
// as the daemon is (the test binary re-executed as a peer, see
// benchPeer): a small 9P operation beside four raw Unix-socket round
// trips and beside the same operation against srv9p's ramfs example; a 9P
// stream read beside a raw Unix-socket copy. The ratios are what
// docs/benchmarks.md reports against the goals.
//
//	go test ./ns -run '^$' -bench . -benchtime 3s -count 3

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"
	"9fans.net/go/plan9/srv9p"

	"ollie/ns"
	nsclient "ollie/ns/client"
	"ollie/ns/stream"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchPeerEnv); dir != "" {
		runBenchPeer(dir)
		return
	}
	code := m.Run()
	stopBenchPeer()
	os.Exit(code)
}

// benchPeerEnv, set in the environment of the test binary, makes it the
// benchmarks' second process, serving in the directory it names.
const benchPeerEnv = "OLLIE_NS_BENCH_PEER"

// The peer's sockets, in its directory.
const (
	peerNS    = "ns"    // ns.Server.ServeUnix: hello (13 bytes) and stream (64 MiB)
	peerRamfs = "ramfs" // srv9p's ramfs example's server, with hello
	peerEcho  = "echo"  // echoes 32-byte messages
	peerRaw   = "raw"   // answers a byte with 64 MiB

	// The stream's 64 MiB served without ns (floor_test.go), as the
	// file "file".
	peerInline = "inline" // inlineServer: each Tread answered as it comes
	peerAhead  = "ahead"  // aheadServer: each Rread written before its Tread
)

const (
	streamSize = 64 << 20
	echoSize   = 32 // a Twalk of one short name is about this long
	hello      = "hello, world\n"
)

func streamData() []byte {
	data := make([]byte, streamSize)
	for i := range data {
		data[i] = byte(i)
	}
	return data
}

// runBenchPeer serves the peer's sockets in dir, says "ok" on stdout, and
// exits when stdin closes (its parent has gone).
func runBenchPeer(dir string) {
	data := streamData()
	s := stream.NewStream(streamSize)
	s.Write(data)
	s.Close()
	tree, err := ns.NewTree(ns.Dir("", 0555, "",
		ns.ReadFile("hello", 0444, "13 bytes", func(context.Context, *ns.Call) ([]byte, error) { return []byte(hello), nil }),
		ns.StreamFile("stream", 0444, "64 MiB", func(context.Context, *ns.Call) (*stream.Stream, error) { return s, nil }),
	), "glenda", "glenda")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	listen := func(name string) net.Listener {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return l
	}
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go srv.ServeUnix(listen(peerNS).(*net.UnixListener))
	go serveEach(listen(peerRamfs), ramfs([]byte(hello)))
	go serveEach(listen(peerEcho), echo)
	go serveEach(listen(peerRaw), rawCopy(data))
	go serveEach(listen(peerInline), inlineServer(data))
	go serveEach(listen(peerAhead), aheadServer(data))
	fmt.Println("ok")
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

func serveEach(l net.Listener, serve func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go serve(c)
	}
}

// echo answers each message of echoSize bytes with the same bytes: the
// cheapest round trip the transport allows.
func echo(c net.Conn) {
	defer c.Close()
	buf := make([]byte, echoSize)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// rawCopy answers each byte read with data, written msize bytes at a time.
func rawCopy(data []byte) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		req := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			for off := 0; off < len(data); off += msize9fans {
				if _, err := c.Write(data[off : off+msize9fans]); err != nil {
					return
				}
			}
		}
	}
}

// msize9fans is the msize the 9fans client asks for.
const msize9fans = 128 << 10

// ramfs serves a file hello holding data with the server of srv9p's
// example/ramfs (example/ramfs/main.go, which builds only on Plan 9: its
// srv9p.Server is copied here as it is, and served on a Unix socket
// instead of /srv).
func ramfs(data []byte) func(net.Conn) {
	type ramFile struct {
		mu   sync.Mutex
		data []byte
	}
	tree := srv9p.NewTree("ram", "ram", plan9.DMDIR|0777, nil)
	if _, err := tree.Root.Create("hello", "ram", 0666, &ramFile{data: data}); err != nil {
		panic(err)
	}
	return func(c net.Conn) {
		srv := &srv9p.Server{
			Tree: tree,
			Open: func(ctx context.Context, fid *srv9p.Fid, mode uint8) error {
				if mode&plan9.OTRUNC != 0 {
					rf := fid.File().Aux.(*ramFile)
					rf.mu.Lock()
					defer rf.mu.Unlock()
					rf.data = nil
				}
				return nil
			},
			Read: func(ctx context.Context, fid *srv9p.Fid, data []byte, offset int64) (int, error) {
				rf := fid.File().Aux.(*ramFile)
				rf.mu.Lock()
				defer rf.mu.Unlock()
				return fid.ReadBytes(data, offset, rf.data)
			},
		}
		srv.Serve(c, c)
	}
}

var peer struct {
	once sync.Once
	dir  string
	cmd  *exec.Cmd
	err  error
}

// benchPeer starts the peer process once for the whole run and returns
// the directory of its sockets.
func benchPeer(b *testing.B) string {
	peer.once.Do(func() {
		dir, err := os.MkdirTemp("", "ns-bench-")
		if err != nil {
			peer.err = err
			return
		}
		exe, err := os.Executable()
		if err != nil {
			peer.err = err
			return
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), benchPeerEnv+"="+dir)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			peer.err = err
			return
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			peer.err = err
			return
		}
		if err := cmd.Start(); err != nil {
			peer.err = err
			return
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if line != "ok\n" {
			stdin.Close()
			cmd.Wait()
			peer.err = fmt.Errorf("bench peer did not start: %q, %v", line, err)
			return
		}
		// Closing stdin (at the end of the run, or when this process
		// dies) ends the peer.
		peer.dir, peer.cmd, peerStdin = dir, cmd, stdin
	})
	if peer.err != nil {
		b.Fatal(peer.err)
	}
	return peer.dir
}

var peerStdin io.Closer

func stopBenchPeer() {
	if peer.cmd == nil {
		return
	}
	peerStdin.Close()
	peer.cmd.Wait()
	os.RemoveAll(peer.dir)
}

// attach9fans dials sock with the 9fans client and attaches as glenda.
func attach9fans(b *testing.B, sock string) *client.Fsys {
	c, err := client.Dial("unix", sock)
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

func dialUnix(b *testing.B, sock string) net.Conn {
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// smallOp is walk+open+read+clunk of hello through the 9fans client: four
// round trips. The read asks for len(buf).
func smallOp(b *testing.B, fs *client.Fsys, buf []byte) {
	fid, err := fs.Open("hello", plan9.OREAD) // Twalk, Topen
	if err != nil {
		b.Fatal(err)
	}
	if n, err := fid.Read(buf); err != nil || n != len(hello) { // Tread
		b.Fatalf("read %d, %v", n, err)
	}
	if err := fid.Close(); err != nil { // Tclunk
		b.Fatal(err)
	}
}

// fourRoundTrips sends four echoSize messages to c, each after the
// answer to the last.
func fourRoundTrips(b *testing.B, c net.Conn, msg []byte) {
	for range 4 {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// percentile returns the p-th percentile of sorted d.
func percentile(d []time.Duration, p float64) time.Duration {
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// BenchmarkSmallOp is walk+open+read+clunk of a 13-byte file through the
// 9fans client on a Unix socket to ns in the peer process (four round
// trips), beside four raw round trips of a 32-byte message to the peer's
// echo socket and beside the same operation against srv9p's ramfs
// example in the peer, in turn, iteration by iteration.
func BenchmarkSmallOp(b *testing.B) {
	dir := benchPeer(b)
	fs := attach9fans(b, filepath.Join(dir, peerNS))
	rfs := attach9fans(b, filepath.Join(dir, peerRamfs))
	echo := dialUnix(b, filepath.Join(dir, peerEcho))
	// The read asks for msize, as ollie's client and 9pfuse do: the
	// case where srv9p allocated a 128 KiB buffer for 13 bytes.
	msg, buf := make([]byte, echoSize), make([]byte, msize9fans)
	smallOp(b, fs, buf)
	smallOp(b, rfs, buf)
	fourRoundTrips(b, echo, msg)
	tOp := make([]time.Duration, 0, b.N)
	tRamfs := make([]time.Duration, 0, b.N)
	t4rt := make([]time.Duration, 0, b.N)
	var tRaw time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		smallOp(b, fs, buf)
		t1 := time.Now()
		fourRoundTrips(b, echo, msg)
		t2 := time.Now()
		smallOp(b, rfs, buf)
		tOp = append(tOp, t1.Sub(t0))
		tRaw += t2.Sub(t1)
		t4rt = append(t4rt, t2.Sub(t1))
		tRamfs = append(tRamfs, time.Since(t2))
	}
	b.StopTimer()
	n := float64(b.N)
	sum := func(d []time.Duration) (s time.Duration) {
		for _, x := range d {
			s += x
		}
		return s
	}
	op, ram := sum(tOp), sum(tRamfs)
	slices.Sort(tOp)
	slices.Sort(tRamfs)
	slices.Sort(t4rt)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(float64(op.Nanoseconds())/n, "ns/op")
	b.ReportMetric(n/op.Seconds(), "ops/s")
	b.ReportMetric(us(percentile(tOp, 0.5)), "p50-us")
	b.ReportMetric(us(percentile(tOp, 0.99)), "p99-us")
	b.ReportMetric(float64(percentile(tOp, 0.99))/float64(percentile(tOp, 0.5)), "p99/p50")
	b.ReportMetric(float64(tRaw.Nanoseconds())/n/4, "raw-rt-ns")
	// The transport's own tail, for the p99/p50 goal: four raw round
	// trips' p99 over their p50.
	b.ReportMetric(float64(percentile(t4rt, 0.99))/float64(percentile(t4rt, 0.5)), "raw-p99/p50")
	b.ReportMetric(float64(op)/float64(tRaw), "x-4rt")
	b.ReportMetric(n/ram.Seconds(), "ramfs-ops/s")
	b.ReportMetric(us(percentile(tRamfs, 0.5)), "ramfs-p50-us")
	b.ReportMetric(us(percentile(tRamfs, 0.99)), "ramfs-p99-us")
	// What x-ramfs could be at most: ramfs's operation over four raw
	// round trips, the least any four-RPC operation can take.
	b.ReportMetric(float64(ram)/float64(tRaw), "ramfs-x-4rt")
	b.ReportMetric(float64(ram)/float64(op), "x-ramfs")
}

// BenchmarkStream reads the peer's 64 MiB stream from ns to its end, in
// turn: through the 9fans client (one Tread of msize 128 KiB at a time)
// and through ollie's client (ns/client's ReadAll, which keeps several
// Treads in flight), beside a raw copy of 64 MiB over a Unix socket from
// the peer, read with a 128 KiB buffer. Beside them, the 9fans client
// reads the same 64 MiB from the two floors of floor_test.go in the peer:
// inline (inline-of-raw) and ahead (ahead-of-raw), the most any server
// can give that client.
func BenchmarkStream(b *testing.B) {
	dir := benchPeer(b)
	fs := attach9fans(b, filepath.Join(dir, peerNS))
	oc, err := nsclient.DialAs(filepath.Join(dir, peerNS), "glenda")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { oc.Close() })
	rc := dialUnix(b, filepath.Join(dir, peerRaw))
	buf := make([]byte, msize9fans)
	sink := &countWriter{}
	pr := newPipelinedReader(b, filepath.Join(dir, peerNS), pipeDepth)
	// The least a client with one Tread in flight can do: what ns gives
	// such a client when the client itself costs next to nothing.
	one := newPipelinedReader(b, filepath.Join(dir, peerNS), 1)

	floors := []*struct {
		fs *client.Fsys
		t  time.Duration
	}{{fs: attach9fans(b, filepath.Join(dir, peerInline))}, {fs: attach9fans(b, filepath.Join(dir, peerAhead))}}
	read9fans := func(fs *client.Fsys, name string) {
		fid, err := fs.Open(name, plan9.OREAD)
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
	ninep := func() { read9fans(fs, "stream") }
	ollie := func() {
		sink.n = 0
		if err := oc.Follow(context.Background(), "stream", sink); err != nil {
			b.Fatal(err)
		}
		if sink.n != streamSize {
			b.Fatalf("ollie's client read %d bytes", sink.n)
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
	ollie()
	pr.read(b, buf)
	one.read(b, buf)
	raw()
	for _, f := range floors {
		read9fans(f.fs, "file")
	}
	var t9, tOllie, tPipe, tOne, tRaw time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ninep()
		t1 := time.Now()
		ollie()
		t2 := time.Now()
		pr.read(b, buf)
		t3 := time.Now()
		raw()
		t4 := time.Now()
		one.read(b, buf)
		t9 += t1.Sub(t0)
		tOllie += t2.Sub(t1)
		tPipe += t3.Sub(t2)
		tRaw += t4.Sub(t3)
		tOne += time.Since(t4)
		for _, f := range floors {
			t0 := time.Now()
			read9fans(f.fs, "file")
			f.t += time.Since(t0)
		}
	}
	mb := float64(streamSize) * float64(b.N) / 1e6
	b.ReportMetric(float64(t9.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(mb/t9.Seconds(), "MB/s")
	b.ReportMetric(mb/tOllie.Seconds(), "ollie-MB/s")
	b.ReportMetric(mb/tRaw.Seconds(), "raw-MB/s")
	b.ReportMetric(tRaw.Seconds()/t9.Seconds(), "of-raw")
	b.ReportMetric(tRaw.Seconds()/tOllie.Seconds(), "ollie-of-raw")
	b.ReportMetric(mb/tPipe.Seconds(), "pipe-MB/s")
	b.ReportMetric(tRaw.Seconds()/tPipe.Seconds(), "pipe-of-raw")
	b.ReportMetric(tRaw.Seconds()/tOne.Seconds(), "one-of-raw")
	b.ReportMetric(tRaw.Seconds()/floors[0].t.Seconds(), "inline-of-raw")
	b.ReportMetric(tRaw.Seconds()/floors[1].t.Seconds(), "ahead-of-raw")
}

// pipelinedReader is the least a client can do to read the stream over
// 9P: its own Treads, readAhead of them in flight, each reply's header
// read and its data read straight into the caller's buffer. Beside the
// two clients it says how much of their figure is the server's.
type pipelinedReader struct {
	depth int // Treads in flight
	c     net.Conn
	rd    *bufio.Reader
	hdr   [11]byte
}

const (
	pipeFid    = 1
	pipeStream = 2
	pipeDepth  = 4
)

func newPipelinedReader(b *testing.B, sock string, depth int) *pipelinedReader {
	c := dialUnix(b, sock)
	p := &pipelinedReader{depth: depth, c: c, rd: bufio.NewReaderSize(c, 64<<10)}
	for _, f := range []*plan9.Fcall{
		{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: msize9fans, Version: "9P2000"},
		{Type: plan9.Tattach, Fid: pipeFid, Afid: plan9.NOFID, Uname: "glenda"},
	} {
		if err := plan9.WriteFcall(c, f); err != nil {
			b.Fatal(err)
		}
		r, err := plan9.ReadFcall(p.rd)
		if err != nil || r.Type != f.Type+1 {
			b.Fatalf("%v: %v %v", f, r, err)
		}
	}
	return p
}

// read reads the stream to its end into buf, again and again.
func (p *pipelinedReader) read(b *testing.B, buf []byte) {
	rpc := func(f *plan9.Fcall) {
		if err := plan9.WriteFcall(p.c, f); err != nil {
			b.Fatal(err)
		}
		r, err := plan9.ReadFcall(p.rd)
		if err != nil || r.Type != f.Type+1 {
			b.Fatalf("%v: %v %v", f, r, err)
		}
	}
	rpc(&plan9.Fcall{Type: plan9.Twalk, Fid: pipeFid, Newfid: pipeStream, Wname: []string{"stream"}})
	rpc(&plan9.Fcall{Type: plan9.Topen, Fid: pipeStream, Mode: plan9.OREAD})
	count := uint32(msize9fans - plan9.IOHDRSZ)
	var off, total uint64
	send := func(tag uint16) {
		f := &plan9.Fcall{Type: plan9.Tread, Tag: tag, Fid: pipeStream, Offset: off, Count: count}
		if err := plan9.WriteFcall(p.c, f); err != nil {
			b.Fatal(err)
		}
		off += uint64(count)
	}
	for tag := range uint16(p.depth) {
		send(tag)
	}
	// Replies come in order: the server answers Treads of bytes already
	// there on its reading goroutine.
	for outstanding := p.depth; outstanding > 0; outstanding-- {
		if _, err := io.ReadFull(p.rd, p.hdr[:]); err != nil {
			b.Fatal(err)
		}
		if p.hdr[4] != plan9.Rread {
			b.Fatalf("reply of type %d", p.hdr[4])
		}
		n := int(binary.LittleEndian.Uint32(p.hdr[7:]))
		if _, err := io.ReadFull(p.rd, buf[:n]); err != nil {
			b.Fatal(err)
		}
		total += uint64(n)
		if n > 0 && off < streamSize {
			send(binary.LittleEndian.Uint16(p.hdr[5:]))
			outstanding++
		}
	}
	if total != streamSize {
		b.Fatalf("pipelined reader read %d bytes", total)
	}
	rpc(&plan9.Fcall{Type: plan9.Tclunk, Fid: pipeStream})
}

// countWriter counts what is written to it.
type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
