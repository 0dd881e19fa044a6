package chat

import (
	"io"
	"sync"
)

// keys reads a raw terminal's bytes for the line editor, and takes ^C out
// of them while a turn runs, where it stops the turn instead. What is
// typed during a turn waits for the next prompt.
type keys struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	err    error
	line   bool // the line editor is reading
	sawC   bool // the last key the line editor got was ^C
	intr   chan<- struct{}
	closed bool
}

func newKeys(r io.Reader, intr chan<- struct{}) *keys {
	k := &keys{intr: intr}
	k.cond = sync.NewCond(&k.mu)
	go k.pump(r)
	return k
}

func (k *keys) pump(r io.Reader) {
	b := make([]byte, 4096)
	for {
		n, err := r.Read(b)
		k.mu.Lock()
		for _, c := range b[:n] {
			if c == 3 && !k.line {
				select {
				case k.intr <- struct{}{}:
				default:
				}
				continue
			}
			k.buf = append(k.buf, c)
		}
		if err != nil {
			k.err = err
		}
		k.cond.Broadcast()
		k.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Read gives the line editor what was typed.
func (k *keys) Read(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(k.buf) == 0 && k.err == nil {
		k.cond.Wait()
	}
	if len(k.buf) == 0 {
		return 0, k.err
	}
	n := copy(p, k.buf)
	// The editor ends a line at ^C as at ^D; remember which it was.
	for _, c := range p[:n] {
		switch c {
		case 3:
			k.sawC = true
		case 4, '\r', '\n':
			k.sawC = false
		}
	}
	k.buf = k.buf[n:]
	return n, nil
}

// lineMode says whether the line editor reads (^C is a key for it) or a
// turn runs (^C stops the turn).
func (k *keys) lineMode(on bool) {
	k.mu.Lock()
	k.line = on
	k.mu.Unlock()
}

// ctrlC reports whether the line editor's last line ended with ^C.
func (k *keys) ctrlC() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sawC
}
