package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"9fans.net/go/plan9"

	"ollie/ns"
	"ollie/ns/stream"
)

// lateClunkServer is a 9P server that answers its first Tclunk only after
// the request that follows it, as a server running requests concurrently
// may: until then the fid stays, and a walk to a new fid of its number
// fails with "duplicate fid". Every file holds "data". clunkSeen is told
// of the Tclunk held back.
func lateClunkServer(t *testing.T, c net.Conn, clunkSeen chan<- struct{}) {
	defer c.Close()
	fids := map[uint32]bool{}
	var held *plan9.Fcall
	holdNext := true
	reply := func(r *plan9.Fcall) bool {
		return plan9.WriteFcall(c, r) == nil
	}
	for {
		f, err := plan9.ReadFcall(c)
		if err != nil {
			return
		}
		r := &plan9.Fcall{Type: f.Type + 1, Tag: f.Tag}
		switch f.Type {
		case plan9.Tversion:
			r.Msize, r.Version = f.Msize, "9P2000"
		case plan9.Tattach:
			fids[f.Fid] = true
			r.Qid = plan9.Qid{Type: plan9.QTDIR}
		case plan9.Twalk:
			switch {
			case !fids[f.Fid]:
				r.Type, r.Ename = plan9.Rerror, "unknown fid"
			case f.Newfid != f.Fid && fids[f.Newfid]:
				r.Type, r.Ename = plan9.Rerror, "duplicate fid"
			default:
				fids[f.Newfid] = true
				for range f.Wname {
					r.Wqid = append(r.Wqid, plan9.Qid{Path: 1})
				}
			}
		case plan9.Topen, plan9.Tread, plan9.Tclunk:
			if !fids[f.Fid] {
				r.Type, r.Ename = plan9.Rerror, "unknown fid"
				break
			}
			switch f.Type {
			case plan9.Tread:
				if f.Offset == 0 {
					r.Data = []byte("data")
				}
			case plan9.Tclunk:
				if !holdNext {
					delete(fids, f.Fid)
					break
				}
				held, holdNext = f, false
				clunkSeen <- struct{}{}
				continue
			}
		default:
			r.Type, r.Ename = plan9.Rerror, "unexpected request"
		}
		if !reply(r) {
			return
		}
		if held != nil {
			delete(fids, held.Fid)
			if !reply(&plan9.Fcall{Type: plan9.Rclunk, Tag: held.Tag}) {
				return
			}
			held = nil
		}
	}
}

// TestFidReusedBeforeRclunk: the 9fans client frees a fid's number when it
// sends the Tclunk, so a second goroutine walks to a new fid of that
// number while the server still holds the old one. The walk must not fail
// with "duplicate fid".
func TestFidReusedBeforeRclunk(t *testing.T) {
	cc, sc := net.Pipe()
	clunkSeen := make(chan struct{}, 4)
	go lateClunkServer(t, sc, clunkSeen)
	c, err := NewConn(cc, "glenda")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var wg sync.WaitGroup
	wg.Add(1)
	errc := make(chan error, 1)
	go func() {
		defer wg.Done()
		// Its Tclunk stays unanswered until the next request arrives.
		_, err := c.ReadAll(ctx, "a")
		errc <- err
	}()
	<-clunkSeen
	b, err := c.ReadAll(ctx, "b")
	if err != nil {
		t.Fatalf("read while another fid's clunk is in flight: %v", err)
	}
	if string(b) != "data" {
		t.Errorf("read %q, want data", b)
	}
	wg.Wait()
	if err := <-errc; err != nil {
		t.Errorf("first read: %v", err)
	}
	// And the first number is the client's again once its Rclunk came.
	if _, err := c.ReadAll(ctx, "c"); err != nil {
		t.Errorf("read after both clunks: %v", err)
	}
}

// treadCounter passes a connection through and counts the Treads sent and
// not yet answered, keeping the most seen at once.
type treadCounter struct {
	net.Conn
	mu   sync.Mutex
	out  map[uint16]bool
	most int
	in   []byte // reply bytes not yet parsed into whole frames
}

func (c *treadCounter) Write(p []byte) (int, error) {
	if len(p) >= 7 && p[4] == plan9.Tread {
		c.mu.Lock()
		c.out[binary.LittleEndian.Uint16(p[5:7])] = true
		c.most = max(c.most, len(c.out))
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *treadCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in = append(c.in, p[:n]...)
	for len(c.in) >= 7 {
		size := int(binary.LittleEndian.Uint32(c.in))
		if len(c.in) < size {
			break
		}
		delete(c.out, binary.LittleEndian.Uint16(c.in[5:7]))
		c.in = c.in[size:]
	}
	c.mu.Unlock()
	return n, err
}

// TestFollowReadsAhead: reading a file or stream longer than one read
// keeps several Treads in flight and hands the bytes over in order, each
// from its own offset; reading from an offset keeps the offset's meaning.
func TestFollowReadsAhead(t *testing.T) {
	data := make([]byte, 1<<20+12345)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	s := stream.NewStream(len(data))
	s.Write(data)
	s.Close()
	tree, err := ns.NewTree(ns.Dir("", 0555, "",
		ns.ReadFile("file", 0444, "", func(context.Context, *ns.Call) ([]byte, error) { return data, nil }),
		ns.StreamFile("stream", 0444, "", func(context.Context, *ns.Call) (*stream.Stream, error) { return s, nil }),
	), "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	sock := listenUnix(t, &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tc := &treadCounter{Conn: nc, out: map[uint16]bool{}}
	c, err := NewConn(tc, "glenda")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, name := range []string{"file", "stream"} {
		got, err := c.ReadAll(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: read %d bytes, not what it holds (%d bytes)", name, len(got), len(data))
		}
		var b bytes.Buffer
		const from = 200000
		end, err := c.FollowFrom(ctx, name, from, &b)
		if err != nil {
			t.Fatalf("%s from %d: %v", name, from, err)
		}
		if end != int64(len(data)) || !bytes.Equal(b.Bytes(), data[from:]) {
			t.Errorf("%s from %d: reached %d with %d bytes, want %d and the file's bytes from there", name, from, end, b.Len(), len(data))
		}
	}
	tc.mu.Lock()
	most := tc.most
	tc.mu.Unlock()
	if most < 2 {
		t.Errorf("at most %d Tread in flight, want several", most)
	}
}

// TestConnectionDiesInsideRread: the server's connection ends in the
// middle of an Rread's data, which goes straight to Follow's buffer. The
// read must fail as a lost connection, not wait forever.
func TestConnectionDiesInsideRread(t *testing.T) {
	cc, sc := net.Pipe()
	go func() {
		defer sc.Close()
		for {
			f, err := plan9.ReadFcall(sc)
			if err != nil {
				return
			}
			r := &plan9.Fcall{Type: f.Type + 1, Tag: f.Tag}
			switch f.Type {
			case plan9.Tversion:
				r.Msize, r.Version = f.Msize, "9P2000"
			case plan9.Tattach:
				r.Qid = plan9.Qid{Type: plan9.QTDIR}
			case plan9.Twalk:
				for range f.Wname {
					r.Wqid = append(r.Wqid, plan9.Qid{Path: 1})
				}
			case plan9.Tread:
				// A header announcing 100 bytes, then 10, then the end.
				b, _ := (&plan9.Fcall{Type: plan9.Rread, Tag: f.Tag, Data: make([]byte, 100)}).Bytes()
				sc.Write(b[:11+10])
				return
			}
			if plan9.WriteFcall(sc, r) != nil {
				return
			}
		}
	}()
	c, err := NewConn(cc, "glenda")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadAll(context.Background(), "file")
		errc <- err
	}()
	if err := wait(t, "a read cut short by the connection", errc); !errors.Is(err, ErrConnLost) {
		t.Errorf("read cut short: %v, want ErrConnLost", err)
	}
}

// TestReadAfterConnectionClosed: olliesrv closes the connection (a
// restart) between two reads of a stream someone follows. The read sent
// after that must fail as a lost connection: the connection's own error,
// io.EOF, is not the end of the file (a chat said its agent had stopped
// for good when olliesrv restarted).
func TestReadAfterConnectionClosed(t *testing.T) {
	s := stream.NewStream(0)
	s.Write([]byte("so far\n"))
	tree, err := ns.NewTree(ns.Dir("", 0555, "",
		ns.StreamFile("stream", 0444, "", func(context.Context, *ns.Call) (*stream.Stream, error) { return s, nil }),
	), "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sock := listenUnix(t, srv)
	c, err := DialAs(sock, "glenda")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.w.open("/stream")
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown(context.Background())
	waitFailed(t, c)
	var b bytes.Buffer
	off, err := f.follow(0, &b, 8192)
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a read after the connection closed: offset %d, %q, err %v; want a lost connection", off, b.String(), err)
	}
	if _, err := c.FollowFrom(context.Background(), "stream", 0, &b); !errors.Is(err, ErrConnLost) {
		t.Errorf("FollowFrom on the closed connection: %v, want ErrConnLost", err)
	}
}
