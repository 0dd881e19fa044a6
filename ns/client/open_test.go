package client

import (
	"context"
	"io"
	"testing"
	"time"

	"9fans.net/go/plan9"
)

// A File holds one fid: a request written is answered on it, a snapshot
// and a stream read by offset, a stream's open length is what was
// written, and a read blocked at a stream's end ends with its context.
func TestFile(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t)
	bg := context.Background()

	echo, err := c.Open(bg, "echo", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := echo.Write(bg, []byte("one")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := echo.ReadAt(bg, buf, 0); err != nil || string(buf[:n]) != "got: one" {
		t.Errorf("reply: %q %v", buf[:n], err)
	}
	if n, err := echo.ReadAt(bg, buf, 0); n != 0 || err != io.EOF {
		t.Errorf("after the reply: %d %v, want EOF", n, err)
	}
	echo.Close()

	hello, err := c.Open(bg, "hello", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := hello.ReadAt(bg, buf, 2); err != nil || string(buf[:n]) != "llo\n" {
		t.Errorf("hello at 2: %q %v", buf[:n], err)
	}
	if d, err := hello.Stat(bg); err != nil || d.Length != 6 {
		t.Errorf("stat of open hello: %v %v, want length 6", d, err)
	}
	hello.Close()

	s, err := c.Open(bg, "stream", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	size := f.stream.Size()
	if d, err := s.Stat(bg); err != nil || int64(d.Length) != size {
		t.Errorf("stat of open stream: %v %v, want length %d", d, err, size)
	}
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	if _, err := s.ReadAt(ctx, buf, size); !IsInterrupted(err) {
		t.Errorf("a read at the end past its context: %v, want interrupted", err)
	}
	f.stream.Write([]byte("more\n"))
	if n, err := s.ReadAt(bg, buf, size); err != nil || string(buf[:n]) != "more\n" {
		t.Errorf("read after more: %q %v", buf[:n], err)
	}
	if _, err := c.Open(bg, "nosuch", plan9.OREAD); !IsNotExist(err) {
		t.Errorf("open nosuch: %v", err)
	}
}
