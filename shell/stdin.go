package shell

import (
	"io"
	"sync"
)

// A stdinHub reads the terminal for whoever reads it now: the shell's line
// editor, or a chat it runs. A reader that is done is closed, which ends
// its blocked read; a read of the terminal itself cannot be cut short, and
// a line editor left blocked in one would take the next keys.
type stdinHub struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	err  error
}

func newStdinHub(r io.Reader) *stdinHub {
	h := &stdinHub{}
	h.cond = sync.NewCond(&h.mu)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			h.mu.Lock()
			h.buf = append(h.buf, b[:n]...)
			if err != nil {
				h.err = err
			}
			h.cond.Broadcast()
			h.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return h
}

// reader is a reader of the terminal until it is closed.
func (h *stdinHub) reader() *hubReader { return &hubReader{h: h} }

type hubReader struct {
	h      *stdinHub
	closed bool
}

func (r *hubReader) Read(p []byte) (int, error) {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.buf) == 0 && h.err == nil && !r.closed {
		h.cond.Wait()
	}
	if r.closed {
		return 0, io.EOF
	}
	if len(h.buf) == 0 {
		return 0, h.err
	}
	n := copy(p, h.buf)
	h.buf = h.buf[n:]
	return n, nil
}

func (r *hubReader) Close() error {
	r.h.mu.Lock()
	r.closed = true
	r.h.cond.Broadcast()
	r.h.mu.Unlock()
	return nil
}
