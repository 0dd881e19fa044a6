package keeper

// The keeper's log is in the runtime directory, often a small tmpfs, and
// much of what it logs is about hosts, which may be hostile: it must not
// grow without bound whatever a host does.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Defaults of the keeper's log: at most maxLogSize bytes in keeper.log,
// plus one rotated file (keeper.log.1), so at most twice that on disk.
const (
	maxLogSize = 10 << 20
	logRepeat  = 10 * time.Second // an identical record is written once per this
)

// rotatingFile is an append-only log file of at most max bytes (plus the
// line that crosses it): past it, the file is renamed to PATH.1 (replacing
// the one before) and a new one started.
type rotatingFile struct {
	path string
	max  int64

	mu   sync.Mutex
	f    *os.File
	size int64
}

func openRotating(path string, max int64) (*rotatingFile, error) {
	r := &rotatingFile{path: path, max: max}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, fi.Size()
	return nil
}

func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.size >= r.max {
		r.f.Close()
		os.Rename(r.path, r.path+".1")
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

// repeatHandler passes a record on at most logBurst times per interval
// when it is identical to one before (same level, message, attributes and
// logger attributes such as host), and says how many it dropped the next
// time it passes one: a host that makes the keeper log the same thing in
// a loop costs a few lines every interval, not a line each time, while an
// event that merely recurs (a second reconnect) is still seen.
type repeatHandler struct {
	inner    slog.Handler
	interval time.Duration
	prefix   string // the logger's own attributes and groups, part of the key
	st       *repeatState
}

type repeatState struct {
	mu   sync.Mutex
	seen map[string]*repeatEntry
}

type repeatEntry struct {
	since   time.Time // the start of the current interval
	passed  int       // records passed in it
	dropped int
}

// logBurst is how many identical records pass in one interval.
const logBurst = 3

// maxRepeatKeys bounds the table: past it the table starts again, so that
// distinct records cannot grow it either.
const maxRepeatKeys = 4096

func newRepeatHandler(inner slog.Handler, interval time.Duration) *repeatHandler {
	return &repeatHandler{inner: inner, interval: interval, st: &repeatState{seen: map[string]*repeatEntry{}}}
}

func (h *repeatHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *repeatHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%s", h.prefix, r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "\x00%s=%v", a.Key, a.Value)
		return true
	})
	key := b.String()
	now := r.Time
	if now.IsZero() {
		now = time.Now()
	}
	h.st.mu.Lock()
	e := h.st.seen[key]
	dropped := 0
	switch {
	case e != nil && now.Sub(e.since) < h.interval && e.passed >= logBurst:
		e.dropped++
		h.st.mu.Unlock()
		return nil
	case e != nil && now.Sub(e.since) < h.interval:
		e.passed++
	case e != nil:
		dropped = e.dropped
		e.since, e.passed, e.dropped = now, 1, 0
	default:
		if len(h.st.seen) >= maxRepeatKeys {
			clear(h.st.seen)
		}
		h.st.seen[key] = &repeatEntry{since: now, passed: 1}
	}
	h.st.mu.Unlock()
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", dropped))
	}
	return h.inner.Handle(ctx, r)
}

func (h *repeatHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range as {
		fmt.Fprintf(&b, "\x00%s=%v", a.Key, a.Value)
	}
	c.prefix = b.String()
	return &c
}

func (h *repeatHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	c.prefix = h.prefix + "\x00[" + name + "]"
	return &c
}

// OpenLog opens the keeper's log at path: size-capped and rotated, with
// repeated records thinned.
func OpenLog(path string) (*slog.Logger, *rotatingFile, error) {
	f, err := openRotating(path, maxLogSize)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(newRepeatHandler(slog.NewTextHandler(f, nil), logRepeat)), f, nil
}
