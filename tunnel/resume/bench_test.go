package resume_test

import (
	"io"
	"testing"
	"time"

	"9fans.net/go/plan9"
	p9 "9fans.net/go/plan9/client"
)

// BenchmarkProxy runs each operation through the proxy and directly to the
// server, interleaved in the same run, and reports the proxy's speed as a
// fraction of the direct one ("speed-ratio"; 1 is no cost).
func BenchmarkProxy(b *testing.B) {
	const streamSize = 64 << 20
	e := newEnv(b, streamSize+1<<20)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>8)
	}
	for range streamSize / len(chunk) {
		e.world.stream.Write(chunk)
	}
	e.world.stream.Close()
	direct, proxied := mount(b, e.direct), mount(b, e.addr)
	buf := make([]byte, 128<<10)

	small := func(fsys *p9.Fsys) {
		fid, err := fsys.Open("hello", plan9.OREAD)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fid.ReadAt(buf[:64], 0); err != nil && err != io.EOF {
			b.Fatal(err)
		}
		fid.Close()
	}
	stream := func(fsys *p9.Fsys) {
		fid, err := fsys.Open("stream", plan9.OREAD)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			m, err := fid.Read(buf)
			n += m
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		fid.Close()
		if n != streamSize {
			b.Fatalf("read %d bytes of the stream, want %d", n, streamSize)
		}
	}

	compare := func(b *testing.B, op func(*p9.Fsys)) {
		var td, tp time.Duration
		for range b.N {
			t0 := time.Now()
			op(direct)
			t1 := time.Now()
			op(proxied)
			td += t1.Sub(t0)
			tp += time.Since(t1)
		}
		b.ReportMetric(float64(td.Nanoseconds())/float64(b.N), "direct-ns/op")
		b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "proxy-ns/op")
		b.ReportMetric(td.Seconds()/tp.Seconds(), "speed-ratio")
	}
	b.Run("small", func(b *testing.B) { compare(b, small) })
	b.Run("stream64MiB", func(b *testing.B) {
		compare(b, stream)
		b.ReportMetric(0, "ns/op") // both directions are in the metrics above
	})
}
