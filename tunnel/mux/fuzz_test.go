package mux_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/ns"
	"ollie/ns/stream"
	"ollie/tunnel/mux"
)

// FuzzClient feeds arbitrary bytes to one client connection of a mux
// whose local tree and one mount (host/web1, the tree of the other tests,
// with a wait file that blocks) are real ns servers, after a valid
// Tversion and Tattach or without them. Whatever the bytes, the mux must
// not panic nor hang: ServeConn returns once the client is gone, its
// goroutines end, every reply it sent parses, and a fresh connection
// still reads through the mount.
//
// make fuzz runs it briefly with
//
//	go test ./tunnel/mux -run '^$' -fuzz '^FuzzClient$' -fuzztime 12000x -fuzzminimizetime 200x
func FuzzClient(f *testing.F) {
	walk := func(tag uint16, fid, newfid uint32, names ...string) *plan9.Fcall {
		return &plan9.Fcall{Type: plan9.Twalk, Tag: tag, Fid: fid, Newfid: newfid, Wname: names}
	}
	seeds := [][]*plan9.Fcall{
		{walk(1, 0, 1, "host", "web1", "name"), {Type: plan9.Topen, Tag: 1, Fid: 1}, {Type: plan9.Tread, Tag: 1, Fid: 1, Count: 100}, {Type: plan9.Tclunk, Tag: 1, Fid: 1}},
		{walk(1, 0, 1, "host", "web1", "wait"), {Type: plan9.Topen, Tag: 1, Fid: 1}, {Type: plan9.Tread, Tag: 2, Fid: 1, Count: 100}, {Type: plan9.Tflush, Tag: 3, Oldtag: 2}},
		{walk(1, 0, 1, "host", "web1"), {Type: plan9.Tstat, Tag: 1, Fid: 1}, walk(2, 1, 1, "..", "web1", "session", "s1"), {Type: plan9.Topen, Tag: 1, Fid: 1}, {Type: plan9.Tread, Tag: 1, Fid: 1, Count: 1000}},
		{walk(1, 0, 1, "host", "web1", "upper"), {Type: plan9.Topen, Tag: 1, Fid: 1, Mode: plan9.ORDWR}, {Type: plan9.Twrite, Tag: 1, Fid: 1, Data: []byte("hi")}, {Type: plan9.Tread, Tag: 1, Fid: 1, Count: 10}},
		{walk(1, 0, 1, "host", "down", "x"), walk(2, 0, 2), {Type: plan9.Tremove, Tag: 1, Fid: 2}, {Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID}},
		{{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 100, Version: "9P2000"}, {Type: plan9.Tauth, Tag: 1, Afid: 5}},
	}
	for _, s := range seeds {
		f.Add(true, frames(s...))
	}
	f.Add(false, []byte{0, 0, 0, 0})
	prefix := frames(
		&plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8192, Version: "9P2000"},
		&plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: "glenda"},
	)
	f.Fuzz(func(t *testing.T, withPrefix bool, data []byte) {
		before := runtime.NumGoroutine()
		in := data
		if withPrefix {
			in = append(bytes.Clone(prefix), data...)
		}
		m := fuzzMux(t)
		cc, sc := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- m.ServeConn(sc) }()
		replies := make(chan error, 1)
		go func() { replies <- readReplies(cc) }()
		cc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		// A net.Pipe write returns once the mux has read it: every request
		// written is in the mux when the client goes.
		for _, fr := range splitFrames(in) {
			if _, err := cc.Write(fr); err != nil {
				break // the mux ended the connection
			}
		}
		cc.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("ServeConn did not return once the client was gone")
		}
		if err := <-replies; err != nil {
			t.Fatal(err)
		}

		// The mux still serves.
		cc, sc = net.Pipe()
		go m.ServeConn(sc)
		defer cc.Close()
		cc.SetDeadline(time.Now().Add(5 * time.Second))
		for _, tx := range append(frameList(prefix), frameList(frames(
			walk(2, 0, 1, "host", "web1", "name"),
			&plan9.Fcall{Type: plan9.Topen, Tag: 3, Fid: 1},
			&plan9.Fcall{Type: plan9.Tread, Tag: 4, Fid: 1, Count: 100}))...) {
			if _, err := cc.Write(tx); err != nil {
				t.Fatal(err)
			}
			rx, err := plan9.ReadFcall(cc)
			if err != nil {
				t.Fatal(err)
			}
			if rx.Type == plan9.Rerror {
				t.Fatalf("a fresh connection: %s", rx.Ename)
			}
			if rx.Type == plan9.Rread && string(rx.Data) != "web1\n" {
				t.Fatalf("a fresh connection read %q", rx.Data)
			}
		}
		cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		await.Until(t, 5*time.Second, fmt.Sprintf("goroutines back to the %d before", before),
			func() bool { return runtime.NumGoroutine() <= before+2 },
			func() string {
				buf := make([]byte, 1<<20)
				return fmt.Sprintf("%d goroutines left:\n%s", runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
			})
	})
}

// fuzzMux is a mux whose local tree and host/web1 are ns servers reached
// over pipes; host/down cannot be dialled.
func fuzzMux(t *testing.T) *mux.Mux {
	h := &host{name: "web1", chat: stream.NewStream(0), release: make(chan struct{}), flushed: make(chan struct{}, 1<<10)}
	hostSrv := &ns.Server{Tree: h.tree(t), Log: quiet}
	list := ns.Listing(func(context.Context, *ns.Call) ([]string, error) { return []string{"down", "web1"}, nil },
		func(s string) ns.Entry { return ns.Entry{Name: s, Key: s} })
	tree, err := ns.NewTree(ns.Dir("", 0555, "", ns.Dir("host", 0555, "", ns.Dynamic("h", 0555, "", list))), "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	localSrv := &ns.Server{Tree: tree, Log: quiet}
	t.Cleanup(func() {
		localSrv.Shutdown(context.Background())
		hostSrv.Shutdown(context.Background())
	})
	return &mux.Mux{
		Local: pipeDialer(localSrv),
		Mount: func(path []string) (func(context.Context) (net.Conn, error), bool) {
			switch {
			case len(path) != 2 || path[0] != "host":
				return nil, false
			case path[1] == "web1":
				return pipeDialer(hostSrv), true
			case path[1] == "down":
				return func(context.Context) (net.Conn, error) { return nil, io.ErrClosedPipe }, true
			}
			return nil, false
		},
		HandshakeTimeout: time.Second,
	}
}

func pipeDialer(srv *ns.Server) func(context.Context) (net.Conn, error) {
	return func(context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		go srv.ServeConn(b, ns.Peer{Kind: ns.Owner, UID: -1})
		return a, nil
	}
}

// readReplies reads the mux's replies until the connection ends, and
// reports one that does not parse.
func readReplies(c net.Conn) error {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return nil
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n < 7 || n > mux.DefaultMaxMsize {
			return errBadReply(n)
		}
		b := make([]byte, n)
		copy(b, hdr[:])
		if _, err := io.ReadFull(c, b[4:]); err != nil {
			return nil
		}
		if rx, err := plan9.UnmarshalFcall(b); err != nil || rx.Type%2 != 1 {
			return errBadReply(n)
		}
	}
}

var quiet = slog.New(slog.DiscardHandler)

type errBadReply uint32

func (e errBadReply) Error() string { return "the mux sent a malformed reply" }

func frames(fs ...*plan9.Fcall) []byte {
	var b []byte
	for _, f := range fs {
		fb, err := f.Bytes()
		if err != nil {
			panic(err)
		}
		b = append(b, fb...)
	}
	return b
}

func frameList(b []byte) [][]byte { return splitFrames(b) }

// splitFrames cuts b where its size fields say; what does not parse as
// a size goes as it is, in one piece.
func splitFrames(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint32(b))
		if n < 4 || n > len(b) {
			break
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	if len(b) > 0 {
		out = append(out, b)
	}
	return out
}
