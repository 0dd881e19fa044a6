// Package stream is the append-only, offset-addressed byte stream behind an
// agent's chat and a background process's output.
//
// It is a package of its own, not part of ns, because its writers are not
// servers: the agent loop and toolsrv's processes append to streams, and a
// server reads them out (ns.StreamFile, toolsrv's proc poll). Kept here, a
// writer links neither srv9p nor the rest of the server.
//
// The package trusts its callers; a Stream is safe for concurrent use.
package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrTrimmed is returned for a read of stream bytes no longer retained.
// Its text, and the other errors' "ns: stream" prefix, reach 9P clients as
// the namespace's answer, so they keep the words they had inside ns.
var ErrTrimmed = errors.New("ns: stream offset no longer retained")

// A Stream is an append-only byte stream read by offset, as chat output
// is. Writers never block; readers at the end block until more data arrives,
// the stream is closed, or their context is done. Offsets are absolute
// positions in the stream, so a reader that reconnects resumes exactly
// where it stopped. Only the last Retain bytes are kept.
type Stream struct {
	mu      sync.Mutex
	buf     []byte
	base    int64 // stream offset of buf[0]
	closed  bool
	retain  int
	changed chan struct{} // closed at the next append or close; nil while nobody waits
}

// DefaultRetain is the number of bytes a Stream keeps when NewStream is given 0.
const DefaultRetain = 4 << 20

// NewStream returns an open stream keeping the last retain bytes.
func NewStream(retain int) *Stream {
	if retain <= 0 {
		retain = DefaultRetain
	}
	return &Stream{retain: retain}
}

// Write appends p. It fails only after Close.
func (s *Stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, io.ErrClosedPipe
	}
	s.buf = append(s.buf, p...)
	// Trim only once a quarter of slack has built up, so appends stay
	// amortized O(1).
	if len(s.buf) > s.retain+s.retain/4 {
		over := len(s.buf) - s.retain
		s.buf = append([]byte(nil), s.buf[over:]...)
		s.base += int64(over)
	}
	s.wake()
	return len(p), nil
}

// Close ends the stream: readers at the end get EOF.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.wake()
	}
	return nil
}

// wake releases the readers waiting at the end. The channel is made only
// when a reader waits, so a stream nobody follows appends without
// allocating. The caller holds s.mu.
func (s *Stream) wake() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// Size returns the stream offset one past the last byte written.
func (s *Stream) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base + int64(len(s.buf))
}

// ReadAt reads from stream offset off, blocking at the end of the stream
// until data arrives, the stream is closed (0, io.EOF), or ctx is done.
func (s *Stream) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	b, err := s.Bytes(ctx, off, len(p))
	return copy(p, b), err
}

// Bytes returns up to max bytes from stream offset off, blocking as
// ReadAt does. They are the stream's own, not a copy: a stream never
// changes a byte once written (appends go past the end, trims copy what
// is kept), so they stay as they are for as long as the caller holds
// them. The caller must not change them.
func (s *Stream) Bytes(ctx context.Context, off int64, max int) ([]byte, error) {
	for {
		s.mu.Lock()
		end := s.base + int64(len(s.buf))
		switch {
		case off < s.base:
			base := s.base
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: offset %d, oldest retained %d", ErrTrimmed, off, base)
		case off < end:
			b := s.buf[off-s.base:]
			b = b[:min(len(b), max):min(len(b), max)]
			s.mu.Unlock()
			return b, nil
		case off > end:
			s.mu.Unlock()
			return nil, fmt.Errorf("ns: stream offset %d is past the end (%d)", off, end)
		case s.closed:
			s.mu.Unlock()
			return nil, io.EOF
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		wait := s.changed
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// WouldBlock reports whether a read at off would wait for more data: off
// is the end of a stream still open.
func (s *Stream) WouldBlock(off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return off == s.base+int64(len(s.buf)) && !s.closed
}

// Since returns, without blocking, the retained bytes from offset off on,
// the offset after them, and whether the stream has ended. An offset older
// than what is retained starts at the oldest retained byte.
func (s *Stream) Since(off int64) (data []byte, next int64, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.base + int64(len(s.buf))
	if off < s.base {
		off = s.base
	}
	if off > end {
		off = end
	}
	return append([]byte(nil), s.buf[off-s.base:]...), end, s.closed
}
