package mux_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"9fans.net/go/plan9"
)

// An evil host speaks enough 9P to be mounted, and then what its answer
// function writes: answer handles a request (writing whatever it likes,
// or nothing) and returns true, or returns false for the ordinary reply.
func evilHost(t *testing.T, f *fleet, name string, answer func(w io.Writer, tx *plan9.Fcall) bool) {
	t.Helper()
	sock := filepath.Join(f.dir, name)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				var wmu sync.Mutex
				for {
					tx, err := plan9.ReadFcall(br)
					if err != nil {
						return
					}
					go func() {
						wmu.Lock()
						defer wmu.Unlock()
						if answer(c, tx) {
							return
						}
						plan9.WriteFcall(c, ordinary(tx))
					}()
				}
			}()
		}
	}()
	f.setMount(name, sock)
}

// ordinary is a plausible reply to tx: a tree where every name exists.
func ordinary(tx *plan9.Fcall) *plan9.Fcall {
	rx := &plan9.Fcall{Type: tx.Type + 1, Tag: tx.Tag}
	switch tx.Type {
	case plan9.Tversion:
		rx.Msize, rx.Version = tx.Msize, "9P2000"
	case plan9.Tattach:
		rx.Qid = plan9.Qid{Type: plan9.QTDIR}
	case plan9.Twalk:
		for i := range tx.Wname {
			rx.Wqid = append(rx.Wqid, plan9.Qid{Path: uint64(i + 1)})
		}
	case plan9.Topen:
		rx.Qid = plan9.Qid{Path: 1}
	case plan9.Tread:
		rx.Data = []byte("evil\n")[:min(5, int(tx.Count))]
		if tx.Offset > 0 {
			rx.Data = nil
		}
	case plan9.Tstat:
		d := plan9.Dir{Name: "x", Uid: "u", Gid: "g", Muid: "m", Qid: plan9.Qid{Path: 1}}
		rx.Stat, _ = d.Bytes()
	case plan9.Tflush:
	}
	return rx
}

func frame(typ uint8, tag uint16, body []byte) []byte {
	b := make([]byte, 7, 7+len(body))
	binary.LittleEndian.PutUint32(b, uint32(7+len(body)))
	b[4] = typ
	binary.LittleEndian.PutUint16(b[5:], tag)
	return append(b, body...)
}

// hostileHosts are the ways a host's replies can break 9P: answer
// replaces the host's reply to some requests; the test reads a file
// through it, or, for stat, stats one.
var hostileHosts = []struct {
	name   string
	answer func(w io.Writer, tx *plan9.Fcall) bool
	stat   bool
}{
	{"garbage", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		w.Write([]byte("\x0b\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff"))
		return true
	}, false},
	{"oversized", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		w.Write([]byte{0xff, 0xff, 0xff, 0x7f, plan9.Rread})
		return true
	}, false},
	{"too short", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		w.Write([]byte{3, 0, 0, 0})
		return true
	}, false},
	{"a reply to no request", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		plan9.WriteFcall(w, &plan9.Fcall{Type: plan9.Rread, Tag: tx.Tag + 1000, Data: []byte("x")})
		return true
	}, false},
	{"the wrong type", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		plan9.WriteFcall(w, &plan9.Fcall{Type: plan9.Rwrite, Tag: tx.Tag, Count: 1})
		return true
	}, false},
	{"more than asked", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		plan9.WriteFcall(w, &plan9.Fcall{Type: plan9.Rread, Tag: tx.Tag, Data: make([]byte, tx.Count+1)})
		return true
	}, false},
	{"a lying count", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tread {
			return false
		}
		// Rread claiming 1 MiB of data in a 16-byte message.
		w.Write(frame(plan9.Rread, tx.Tag, []byte{0, 0, 0x10, 0, 'x', 'y', 'z', 'w', 'v'}))
		return true
	}, false},
	{"more qids than names", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Twalk || len(tx.Wname) == 0 {
			return false
		}
		rx := ordinary(tx)
		rx.Wqid = append(rx.Wqid, plan9.Qid{})
		plan9.WriteFcall(w, rx)
		return true
	}, false},
	{"a broken stat", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type != plan9.Tstat {
			return false
		}
		w.Write(frame(plan9.Rstat, tx.Tag, []byte{4, 0, 2, 0, 9, 9}))
		return true
	}, true},
	{"a broken directory", func(w io.Writer, tx *plan9.Fcall) bool {
		switch tx.Type {
		case plan9.Topen:
			plan9.WriteFcall(w, &plan9.Fcall{Type: plan9.Ropen, Tag: tx.Tag, Qid: plan9.Qid{Type: plan9.QTDIR}})
			return true
		case plan9.Tread:
			if tx.Offset > 0 {
				return false // the end
			}
			plan9.WriteFcall(w, &plan9.Fcall{Type: plan9.Rread, Tag: tx.Tag, Data: []byte{200, 0, 1, 2, 3}})
			return true
		}
		return false
	}, false},
}

func TestHostileMount(t *testing.T) {
	f := newFleet(t, "web1")
	c := f.dial(t)
	ctx := context.Background()
	for _, tc := range hostileHosts {
		t.Run(tc.name, func(t *testing.T) {
			evilHost(t, f, "evil", tc.answer)
			var err error
			if tc.stat {
				_, err = c.Stat(ctx, "host/evil/file")
			} else {
				_, err = c.ReadAll(ctx, "host/evil/file")
			}
			if err == nil || !strings.Contains(err.Error(), "host evil: ") {
				t.Errorf("read through a host that sends %s: %v, want an error naming host evil", tc.name, err)
			}
			// The rest of the connection is fine.
			if got := read(t, c, "host/web1/name"); got != "web1\n" {
				t.Errorf("read host/web1/name = %q", got)
			}
			if got := read(t, c, "idx"); got == "" {
				t.Error("read idx: empty")
			}
		})
	}
}

// A host that takes a request and never answers its flush is cut off
// after HandshakeTimeout: the flushed read returns, and so does the mux's
// Shutdown.
func TestMountIgnoresFlush(t *testing.T) {
	f := newFleet(t, "web1")
	reading := make(chan struct{}, 1)
	evilHost(t, f, "evil", func(w io.Writer, tx *plan9.Fcall) bool {
		if tx.Type == plan9.Tread {
			select {
			case reading <- struct{}{}:
			default:
			}
		}
		return tx.Type == plan9.Tread || tx.Type == plan9.Tflush
	})
	c := f.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ReadAll(ctx, "host/evil/file")
		done <- err
	}()
	select {
	case <-reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never reached the host")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a read the host never answered succeeded")
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("the flush took %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the flushed read never returned")
	}
	if got := read(t, c, "host/web1/name"); got != "web1\n" {
		t.Errorf("read host/web1/name = %q", got)
	}
}

// A host that accepts and never answers Tversion fails its walk within
// HandshakeTimeout, naming it.
func TestMountSilent(t *testing.T) {
	f := newFleet(t, "web1")
	evilHost(t, f, "evil", func(w io.Writer, tx *plan9.Fcall) bool { return true })
	c := f.dial(t)
	start := time.Now()
	_, err := c.Stat(context.Background(), "host/evil/x")
	if err == nil || !strings.Contains(err.Error(), "host evil: ") || !strings.Contains(err.Error(), "Tversion") {
		t.Errorf("stat through a silent host: %v, want host evil: no answer to Tversion", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
