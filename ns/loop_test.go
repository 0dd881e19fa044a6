package ns_test

import (
	"runtime"
	"testing"

	"9fans.net/go/plan9"
)

// TestSmallReadAllocatesLittle: a small operation (walk, open, read,
// clunk of a 13-byte file) must not cost an msize buffer. srv9p gave each
// Tread a fresh buffer of the count asked for (128 KiB from the 9fans
// client), and the garbage made the daemon collect every ~16 operations
// (issue 18). Client and server run in this process, so the figure is
// both sides' together.
func TestSmallReadAllocatesLittle(t *testing.T) {
	w := newWorld(t)
	fs := mount(t, "unix", serveUnix(t, newServer(w)), "glenda")
	buf := make([]byte, 128<<10) // as ollie's client reads: msize at a time
	op := func() {
		fid, err := fs.Open("hello", plan9.OREAD)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := fid.Read(buf); err != nil || n != 13 {
			t.Fatalf("read %d, %v", n, err)
		}
		fid.Close()
	}
	op()
	const ops = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range ops {
		op()
	}
	runtime.ReadMemStats(&after)
	// Anything else running in the process counts too, which only makes
	// this harder to pass. 32 KiB is far below one msize.
	if per := (after.TotalAlloc - before.TotalAlloc) / ops; per > 32<<10 {
		t.Errorf("a small operation allocates %d bytes, want less than 32 KiB", per)
	}
}
