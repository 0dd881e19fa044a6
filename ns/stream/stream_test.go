package stream_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"ollie/ns/stream"
)

// These check the Stream on its own; ns's TestStream checks it served
// over 9P, where these errors become the client's.

func TestReadAt(t *testing.T) {
	s := stream.NewStream(0)
	s.Write([]byte("one\n"))
	buf := make([]byte, 100)
	ctx := context.Background()
	if n, err := s.ReadAt(ctx, buf, 2); err != nil || string(buf[:n]) != "e\n" {
		t.Fatalf("read at 2: %q, %v", buf[:n], err)
	}
	_, err := s.ReadAt(ctx, buf, 10)
	if err == nil || err.Error() != "ns: stream offset 10 is past the end (4)" {
		t.Fatalf("read past the end: %v", err)
	}
	if s.Size() != 4 {
		t.Fatalf("size %d, want 4", s.Size())
	}

	// A read at the end waits for the next write, whichever comes first.
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 100)
		n, err := s.ReadAt(ctx, b, 4)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b[:n])
	}()
	s.Write([]byte("two\n"))
	if r := <-got; r != "two\n" {
		t.Fatalf("read at the end: %q, want the next write", r)
	}

	// A context that ends first is the read's answer, with its cause.
	cause := errors.New("given up")
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	if _, err := s.ReadAt(cctx, buf, 8); !errors.Is(err, cause) {
		t.Fatalf("read with an ended context: %v, want its cause", err)
	}

	// After Close, the end is EOF and writes fail; the bytes stay.
	s.Close()
	if _, err := s.ReadAt(ctx, buf, 8); err != io.EOF {
		t.Fatalf("read at the end of a closed stream: %v, want EOF", err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("a write after Close succeeded")
	}
	if n, err := s.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "one\ntwo\n" {
		t.Fatalf("closed stream from 0: %q, %v", buf[:n], err)
	}
}

func TestRetain(t *testing.T) {
	s := stream.NewStream(16)
	s.Write([]byte(strings.Repeat("0123456789", 4)))
	buf := make([]byte, 100)
	_, err := s.ReadAt(context.Background(), buf, 0)
	if !errors.Is(err, stream.ErrTrimmed) || err.Error() != "ns: stream offset no longer retained: offset 0, oldest retained 24" {
		t.Fatalf("read of a trimmed offset: %v", err)
	}
	if n, err := s.ReadAt(context.Background(), buf, 30); err != nil || string(buf[:n]) != "0123456789" {
		t.Fatalf("read of retained bytes: %q, %v", buf[:n], err)
	}
	if s.Size() != 40 {
		t.Fatalf("size %d, want 40: trimming keeps offsets absolute", s.Size())
	}
}

func TestSince(t *testing.T) {
	s := stream.NewStream(16)
	s.Write([]byte(strings.Repeat("0123456789", 4)))
	tests := []struct {
		off      int64
		want     string
		wantNext int64
	}{
		{0, "4567890123456789", 40}, // older than retained: from the oldest
		{30, "0123456789", 40},
		{40, "", 40},
		{99, "", 40}, // past the end: nothing, never an error
	}
	for _, tt := range tests {
		data, next, closed := s.Since(tt.off)
		if string(data) != tt.want || next != tt.wantNext || closed {
			t.Errorf("Since(%d) = %q, %d, %v; want %q, %d, false", tt.off, data, next, closed, tt.want, tt.wantNext)
		}
	}
	s.Close()
	if _, _, closed := s.Since(40); !closed {
		t.Error("Since after Close does not report the end")
	}
}
