package deploy

// Uploads over OpenSSH: SFTP to temporary names, which the host's
// install commit checks, fsyncs and renames.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"

	"ollie/tunnel"
)

type upload struct {
	src  LocalFile // what is sent; while stream is set, not made yet
	want LocalFile // the file as it must end up: src, or what src decodes to
	path string    // under the root
	tmp  string    // under the root, set by the transport's send
	runs bool      // the binary: it may run (its own commit) before it is committed
	// enc is how src is encoded ("" as it is; see compress.go); base the
	// version a patch applies to; program the host's decompressor for a
	// CLI encoding, which the commit's script runs into plain.
	enc, base, program, plain string
	// stream, when set, is src being made: it is sent as it grows, and
	// src is set once it is whole (see artifact.go).
	stream *artifact
}

// sending is what an upload puts on the wire at most, as far as is known
// before it goes: a stream is taken to be no larger than what it encodes.
func (u upload) sending() int64 {
	if u.stream != nil {
		return u.want.Size
	}
	return u.src.Size
}

// sent resolves a streamed upload's src, now that it has gone.
func (u *upload) sent() {
	if u.stream == nil {
		return
	}
	if f, err := u.stream.wait(); err == nil {
		u.src = f
	}
	u.stream = nil
}

// sendWithProgress sends up, saying how far it has got every few seconds.
func sendWithProgress(ctx context.Context, c *tunnel.Client, tr transport, up []upload, dl Deadlines, progress func(string)) (int64, error) {
	if len(up) == 0 {
		return 0, nil
	}
	var moved atomic.Int64
	var total int64
	for _, u := range up {
		total += u.sending()
	}
	start := time.Now()
	ticker := time.NewTicker(3 * time.Second)
	defer ticker.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				n := moved.Load()
				rate := float64(n) / time.Since(start).Seconds()
				progress(fmt.Sprintf("sent %s of %s (%s/s)", HumanBytes(n), HumanBytes(total), HumanBytes(int64(rate))))
			}
		}
	}()
	return tr.send(ctx, c, up, dl, &moved)
}

// uploadAll copies every file to a temporary name, several at once over
// the connection's one SFTP session: beside its destination, whose
// directory the probe made, but for the binary's, in the root, since its
// version's directory is made by the commit. When ctx ends the SFTP
// session is closed (the next use opens another): pkg/sftp's writes take
// no context, and a host that stops acknowledging them would hold the
// upload forever.
func uploadAll(ctx context.Context, c *tunnel.Client, root string, up []upload, writes int, moved *atomic.Int64) (int64, error) {
	sc, err := c.SFTP()
	if err != nil {
		return 0, fmt.Errorf("sftp: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	defer stop()
	for i := range up {
		dir := path.Dir(up[i].path)
		if up[i].runs {
			dir = "."
		}
		up[i].tmp = path.Join(dir, "."+path.Base(up[i].path)+".ollie-tmp-"+RandomHex(6))
	}
	var mu sync.Mutex
	var sent int64
	var firstErr error
	var wg sync.WaitGroup
	// Each file costs an open and a close round trip: many at once.
	sem := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, u := range up {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := uploadOne(ctx, sc, root, u, writes, moved, func(n int64) { mu.Lock(); sent += n; mu.Unlock() }); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if cause := context.Cause(ctx); firstErr != nil && cause != nil {
		var st *stepTimeout
		if errors.As(cause, &st) {
			firstErr = st
		}
	}
	return sent, firstErr
}

func uploadOne(ctx context.Context, sc *sftp.Client, root string, u upload, writes int, moved *atomic.Int64, count func(int64)) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var src io.ReadCloser
	var err error
	size := u.src.Size
	if u.stream != nil {
		src, err = u.stream.open()
		size = -1
	} else {
		src, err = os.Open(u.src.Src)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", u.path, err)
	}
	defer src.Close()
	dst, err := sc.OpenFile(path.Join(root, u.tmp), os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("%s: %w", u.path, err)
	}
	n, err := dst.ReadFromWithConcurrency(&countingReader{r: src, n: moved, size: size}, writes)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && u.runs {
		// Executable before it is committed: the binary runs its own
		// commit. The others get their mode from the commit.
		err = sc.Chmod(path.Join(root, u.tmp), 0700)
	}
	count(n)
	if err != nil {
		return fmt.Errorf("%s: %w", u.path, err)
	}
	return nil
}

// countingReader counts what an upload has read, for its progress.
type countingReader struct {
	r    io.Reader
	n    *atomic.Int64
	size int64 // -1: not known yet
}

// Size lets the listener's tar know the file's length.
func (c *countingReader) Size() int64 { return c.size }

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
