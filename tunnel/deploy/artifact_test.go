package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestArtifactFollows: an upload that opens a compressed form while it is
// being made reads every byte the encoder writes, as it writes them, and
// its end once the encoder is done; the form is then in the cache, and a
// second deploy of the same build reads it from there.
func TestArtifactFollows(t *testing.T) {
	dir := t.TempDir()
	a := &artifacts{dir: dir, once: map[string]*artifact{}}
	step := make(chan []byte)
	art, err := a.start("x.zst", func(w io.Writer) error {
		for p := range step {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := a.start("x.zst", nil); again != art {
		t.Fatal("a second host started the compression again")
	}
	r1, err := art.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	buf := make([]byte, 64)
	for _, chunk := range []string{"first ", "second "} {
		step <- []byte(chunk)
		n, err := io.ReadFull(r1, buf[:len(chunk)])
		if err != nil || string(buf[:n]) != chunk {
			t.Fatalf("read %q, %v while it was made; want %q", buf[:n], err, chunk)
		}
	}
	if _, ok := art.whole(); ok {
		t.Fatal("whole before the encoder finished")
	}
	r2, err := art.open() // a host that starts late reads from the start
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	close(step)
	if rest, err := io.ReadAll(r1); err != nil || len(rest) != 0 {
		t.Errorf("after the end: %q, %v; want nothing and EOF", rest, err)
	}
	if all, err := io.ReadAll(r2); err != nil || string(all) != "first second " {
		t.Errorf("the late reader got %q, %v", all, err)
	}
	f, ok := art.whole()
	if b, _ := os.ReadFile(filepath.Join(dir, "x.zst")); !ok || string(b) != "first second " || f.Size != int64(len(b)) {
		t.Errorf("in the cache: %q (whole %v, %+v)", b, ok, f)
	}
	b := &artifacts{dir: dir, once: map[string]*artifact{}}
	if got, err := b.get("x.zst", func(io.Writer) error { t.Error("made again"); return nil }); err != nil || got.Size != f.Size {
		t.Errorf("the next deploy: %+v, %v", got, err)
	}
}

// TestArtifactFails: an encoder that fails ends every reader with its
// error, and leaves nothing in the cache.
func TestArtifactFails(t *testing.T) {
	dir := t.TempDir()
	a := &artifacts{dir: dir, once: map[string]*artifact{}}
	broke := errors.New("disk full")
	go1 := make(chan struct{})
	art, err := a.start("y.zst", func(w io.Writer) error {
		w.Write([]byte("part"))
		<-go1
		return broke
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := art.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	close(go1)
	if _, err := io.ReadAll(r); !errors.Is(err, broke) {
		t.Errorf("a reader ended with %v, want the encoder's error", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in the cache: %v", ents)
	}
}

// TestStreamedBinary: the first far host of a new build is sent the zstd
// as it is made, and what it reads unpacks to the binary.
func TestStreamedBinary(t *testing.T) {
	_, cur := compressFixture(t)
	u, _ := binaryUpload(cur, "v2", &Manifest{}, []string{"zstd"}, false, false)
	if u.stream == nil || u.enc != EncZstdCLI {
		t.Fatalf("a cold far host of a new build: stream %v, %q; want zstd sent as it is made", u.stream != nil, u.enc)
	}
	r, err := u.stream.open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := zstd.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := io.ReadAll(d)
	want, _ := os.ReadFile(cur.Src)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("unpacked %d bytes (%v), want the binary's %d", len(got), err, len(want))
	}
	u.sent()
	if u.stream != nil || u.src.Size == 0 || u.src.Size >= cur.Size {
		t.Errorf("once sent, the upload's source is %+v", u.src)
	}
}
