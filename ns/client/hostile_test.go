package client

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
)

// answer is how scriptedServer answers one request after the handshake:
// the frames it writes, in order; a nil frame closes the connection, as
// does returning none.
type answer func(f *plan9.Fcall) [][]byte

// scriptedServer answers Tversion and Tattach as a server does, then
// every request as ans says, until ans returns nil or a write fails. It
// reports on sent how many frames it wrote, once it is done.
func scriptedServer(c net.Conn, ans answer, sent chan<- int) {
	defer c.Close()
	n := 0
	defer func() { sent <- n }()
	for {
		f, err := plan9.ReadFcall(c)
		if err != nil {
			return
		}
		var out [][]byte
		switch f.Type {
		case plan9.Tversion:
			b, _ := (&plan9.Fcall{Type: plan9.Rversion, Tag: f.Tag, Msize: min(f.Msize, 8192+plan9.IOHDRSZ), Version: "9P2000"}).Bytes()
			out = [][]byte{b}
		case plan9.Tattach:
			b, _ := (&plan9.Fcall{Type: plan9.Rattach, Tag: f.Tag, Qid: plan9.Qid{Type: plan9.QTDIR}}).Bytes()
			out = [][]byte{b}
		default:
			if out = ans(f); out == nil {
				return
			}
		}
		for _, b := range out {
			if b == nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
			n++
		}
	}
}

func frame(f *plan9.Fcall) []byte {
	b, err := f.Bytes()
	if err != nil {
		panic(err)
	}
	return b
}

// TestRepliesToNoRequest: a server answers with a tag the client never
// sent, a type that answers another request, or a second reply to one
// request. The connection ends at that reply, buffering none of what
// follows (issue 29: a flood of them grew the keeper to 2.7 GB), and the
// call says the server broke the protocol.
func TestRepliesToNoRequest(t *testing.T) {
	walked := func(f *plan9.Fcall) *plan9.Fcall {
		r := &plan9.Fcall{Type: plan9.Rwalk, Tag: f.Tag}
		for range f.Wname {
			r.Wqid = append(r.Wqid, plan9.Qid{Path: 1})
		}
		return r
	}
	for _, tc := range []struct {
		name string
		bad  func(f *plan9.Fcall) [][]byte // the answer to the Tstat
	}{
		{"unsent tags", func(f *plan9.Fcall) [][]byte {
			// Endless, as far as the client is concerned: far more
			// than any socket buffers.
			var out [][]byte
			for i := range 1 << 16 {
				tag := uint16(0x1000 + i%0xE000)
				out = append(out, frame(&plan9.Fcall{Type: plan9.Rclunk, Tag: tag}))
			}
			return out
		}},
		{"wrong type", func(f *plan9.Fcall) [][]byte {
			return [][]byte{frame(&plan9.Fcall{Type: plan9.Rread, Tag: f.Tag, Data: []byte("x")})}
		}},
		{"second reply", func(f *plan9.Fcall) [][]byte {
			r := frame(&plan9.Fcall{Type: plan9.Rerror, Tag: f.Tag, Ename: "no"})
			return [][]byte{r, r}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := net.Pipe()
			sent := make(chan int, 1)
			go scriptedServer(sc, func(f *plan9.Fcall) [][]byte {
				switch f.Type {
				case plan9.Twalk:
					return [][]byte{frame(walked(f))}
				case plan9.Tstat:
					return tc.bad(f)
				case plan9.Tclunk:
					return [][]byte{frame(&plan9.Fcall{Type: plan9.Rclunk, Tag: f.Tag})}
				}
				return nil
			}, sent)
			c, err := NewConn(cc, "glenda")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.Stat(ctx, "file")
			if tc.name == "second reply" {
				// The first reply answers the call; the second ends the
				// connection, which the next call finds.
				if !IsServerError(err) {
					t.Fatalf("Stat: %v, want the server's error", err)
				}
				err = waitFailed(t, c)
			}
			if !errors.Is(err, ErrConnLost) && tc.name != "second reply" || !IsProtocolError(err) {
				t.Fatalf("Stat: %v, want a lost connection for a break of the protocol", err)
			}
			select {
			case n := <-sent:
				if n > 1<<10 {
					t.Errorf("the server wrote %d frames before the client hung up", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the client did not hang up on the server")
			}
			c.w.mu.Lock()
			queued := len(c.w.ready) + len(c.w.held)
			c.w.mu.Unlock()
			if queued > 0 {
				t.Errorf("%d replies left queued", queued)
			}
			if _, err := c.Stat(ctx, "file"); !errors.Is(err, ErrConnLost) {
				t.Errorf("Stat after the break: %v, want ErrConnLost", err)
			}
		})
	}
}

func waitFailed(t *testing.T, c *Conn) error {
	t.Helper()
	await.Until(t, 5*time.Second, "the connection to fail", func() bool { return c.w.failed() != nil })
	return c.w.failed()
}

// FuzzServerReplies is the client's side of the wire: a server that
// answers the handshake, then each request with frames the fuzzer makes.
// Each frame is a flags byte, a length byte and that many bytes of body
// (after the type and tag): flags bit 0 tags it with the request's tag
// (else the body's first two bytes are the tag), bit 1 types it as the
// request's reply (else the body's next byte is the type), bit 2 gives
// it a size that lies and then closes the connection, bit 3 sends the
// next frame for the same request. The calls a keeper makes must return,
// without a panic, and no reply may stay queued once they have.
//
// make fuzz runs it briefly with
//
//	go test ./ns/client -run '^$' -fuzz '^FuzzServerReplies$' -fuzztime 12000x -fuzzminimizetime 200x
func FuzzServerReplies(f *testing.F) {
	ok := func(body ...byte) []byte { return append([]byte{3, byte(len(body))}, body...) }
	qid := make([]byte, 13)
	f.Add(append(ok(append([]byte{0, 1}, qid...)...), ok(append(qid, 0, 0, 0, 0)...)...)) // Rwalk of one name, Ropen
	f.Add(ok())
	f.Add([]byte{0, 3, 0x00, 0x10, plan9.Rclunk})          // a tag never sent
	f.Add([]byte{1, 0, plan9.Rread})                       // the wrong type
	f.Add([]byte{8 | 3, 2, 0, 0, 3, 0})                    // two replies to one request
	f.Add([]byte{4 | 3, 10, 1, 2, 3})                      // a size that lies
	f.Add([]byte{2, 4, 0xff, 0xff, 0, 0})                  // tagged NOTAG
	f.Add([]byte{3, 7, 4, 0, 0, 0, 'd', 'a', 't', 'a', 9}) // an Rread longer than its count says
	f.Fuzz(func(t *testing.T, data []byte) {
		cc, sc := net.Pipe()
		sent := make(chan int, 1)
		go scriptedServer(sc, func(req *plan9.Fcall) [][]byte {
			var out [][]byte
			for len(data) >= 2 {
				flags, n := data[0], int(data[1])
				body := data[2:min(len(data), 2+n)]
				data = data[min(len(data), 2+n):]
				typ, tag := req.Type+1, req.Tag
				if flags&1 == 0 && len(body) >= 2 {
					tag, body = binary.LittleEndian.Uint16(body), body[2:]
				}
				if flags&2 == 0 && len(body) >= 1 {
					typ, body = body[0], body[1:]
				}
				b := binary.LittleEndian.AppendUint32(nil, uint32(7+len(body)))
				b = append(b, typ)
				b = binary.LittleEndian.AppendUint16(b, tag)
				b = append(b, body...)
				if flags&4 != 0 {
					binary.LittleEndian.PutUint32(b, uint32(7+len(body)+int(flags>>4)+1))
					return append(out, b, nil)
				}
				out = append(out, b)
				if flags&8 == 0 {
					return out
				}
			}
			if len(out) > 0 {
				return out
			}
			return nil
		}, sent)
		c, err := NewConn(cc, "glenda")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Stat(ctx, "a")
		c.ReadLimit(ctx, "b", 1024)
		c.Ls(ctx, "c")
		c.RdWr(ctx, "d", []byte("x"))
		c.Write(ctx, "e", []byte("y"))
		if ctx.Err() != nil {
			t.Fatal("the calls did not return within 10 s")
		}
		c.w.mu.Lock()
		queued := len(c.w.ready) + len(c.w.held)
		c.w.mu.Unlock()
		if queued > 0 {
			t.Errorf("%d replies left queued after every call returned", queued)
		}
		c.Close()
		<-sent
	})
}

// TestEndlessLimits: a directory whose listing never ends and a request
// file whose reply never ends, read with LsLimit and RdWrLimit: each
// stops at its limit with an error naming the file.
func TestEndlessLimits(t *testing.T) {
	entry, _ := (&plan9.Dir{Name: "x", Qid: plan9.Qid{Path: 2}, Uid: "u", Gid: "u", Muid: "u"}).Bytes()
	cc, sc := net.Pipe()
	go scriptedServer(sc, func(f *plan9.Fcall) [][]byte {
		r := &plan9.Fcall{Type: f.Type + 1, Tag: f.Tag}
		switch f.Type {
		case plan9.Twalk:
			for range f.Wname {
				r.Wqid = append(r.Wqid, plan9.Qid{Type: plan9.QTDIR})
			}
		case plan9.Topen:
			r.Qid = plan9.Qid{Type: plan9.QTDIR}
		case plan9.Tstat:
			r.Stat, _ = (&plan9.Dir{Name: "d", Mode: plan9.DMDIR | 0777, Qid: plan9.Qid{Type: plan9.QTDIR}, Uid: "u", Gid: "u", Muid: "u"}).Bytes()
		case plan9.Tread:
			for len(r.Data)+len(entry) <= int(f.Count) {
				r.Data = append(r.Data, entry...)
			}
		case plan9.Twrite:
			r.Count = uint32(len(f.Data))
		}
		return [][]byte{frame(r)}
	}, make(chan int, 1))
	c, err := NewConn(cc, "glenda")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dirs, err := c.LsLimit(ctx, "d", 100)
	if !errors.Is(err, ErrTooLong) || len(dirs) != 100 {
		t.Errorf("LsLimit of an endless directory: %d entries, %v; want 100 and ErrTooLong", len(dirs), err)
	}
	b, err := c.RdWrLimit(ctx, "d", []byte("req"), 1000)
	if !errors.Is(err, ErrTooLong) || len(b) > 1000 {
		t.Errorf("RdWrLimit of an endless reply: %d bytes, %v; want at most 1000 and ErrTooLong", len(b), err)
	}
}
