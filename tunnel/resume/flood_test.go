package resume_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/tunnel/resume"
)

type countW struct{ n atomic.Int64 }

func (c *countW) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

func hwm() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return ""
}

// floodEnv is a proxy in front of a hostile server. The flood tests
// measure, for docs/benchmarks.md, what the process holds under each
// flood (VmHWM: run each in a process of its own, as the doc's command
// does); they run only with OLLIE_FLOOD=1.
func floodEnv(t *testing.T, handler func(net.Conn)) (string, *atomic.Int32, *countW) {
	if os.Getenv("OLLIE_FLOOD") == "" {
		t.Skip("measurement: OLLIE_FLOOD=1 go test ./tunnel/resume -run TestFloodX -v")
	}
	dir := t.TempDir()
	ln, _ := net.Listen("unix", filepath.Join(dir, "s"))
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer nc.Close(); handler(nc) }()
		}
	}()
	var dials atomic.Int32
	lw := &countW{}
	p := &resume.Proxy{Log: slog.New(slog.NewTextHandler(lw, nil)), Dial: func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(dir, "s"))
	}}
	pl, _ := net.Listen("unix", filepath.Join(dir, "p"))
	go p.Serve(pl)
	return filepath.Join(dir, "p"), &dials, lw
}

func clientVersion(addr string, msize uint32) net.Conn {
	c, _ := net.Dial("unix", addr)
	plan9.WriteFcall(c, &plan9.Fcall{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: msize, Version: "9P2000"})
	return c
}

func ver(nc net.Conn, msize uint32) bool {
	tx, err := plan9.ReadFcall(nc)
	if err != nil {
		return false
	}
	return plan9.WriteFcall(nc, &plan9.Fcall{Type: plan9.Rversion, Tag: tx.Tag, Msize: msize, Version: "9P2000"}) == nil
}

func TestFloodIdle(t *testing.T) {
	addr, _, _ := floodEnv(t, func(nc net.Conn) { ver(nc, 8216); select {} })
	for range 3 {
		clientVersion(addr, 8216)
	}
	// Idle connections held for a second: what they cost is the measure.
	await.For(t.Context(), time.Second)
	t.Log("idle:", hwm())
}

func TestFloodMsize(t *testing.T) {
	addr, _, _ := floodEnv(t, func(nc net.Conn) {
		if !ver(nc, 1<<32-1) {
			return
		}
		hdr := make([]byte, 7)
		binary.LittleEndian.PutUint32(hdr, 1<<32-1)
		hdr[4] = plan9.Rread
		nc.Write(hdr)
		zero := make([]byte, 1<<20)
		for range 512 {
			if _, err := nc.Write(zero); err != nil {
				return
			}
		}
		select {}
	})
	for range 3 {
		c := clientVersion(addr, 1<<32-1)
		go plan9.ReadFcall(c)
	}
	// 5 s for the 512 MiB each server sends: what the proxy holds meanwhile is the measure.
	await.For(t.Context(), 5*time.Second)
	t.Log("msize 4 GiB, 3 connections, 512 MiB each:", hwm())
}

func TestFloodUnexpected(t *testing.T) {
	addr, dials, lw := floodEnv(t, func(nc net.Conn) {
		if !ver(nc, 8216) {
			return
		}
		bw := bufio.NewWriter(nc)
		for tag := uint16(1000); ; tag++ {
			if plan9.WriteFcall(bw, &plan9.Fcall{Type: plan9.Rclunk, Tag: tag}) != nil || bw.Flush() != nil {
				return
			}
		}
	})
	c := clientVersion(addr, 8216)
	go func() {
		for {
			if _, err := plan9.ReadFcall(c); err != nil {
				return
			}
		}
	}()
	// 10 s of flood: the memory, log and dials it costs are the measure.
	await.For(t.Context(), 10*time.Second)
	t.Logf("unexpected replies 10 s: %s, log %d bytes, %d dials", hwm(), lw.n.Load(), dials.Load())
}

func TestFloodReconnect(t *testing.T) {
	addr, dials, lw := floodEnv(t, func(nc net.Conn) { ver(nc, 8216) })
	c := clientVersion(addr, 8216)
	plan9.ReadFcall(c)
	plan9.WriteFcall(c, &plan9.Fcall{Type: plan9.Tattach, Tag: 1, Fid: 1, Afid: plan9.NOFID, Uname: "x"})
	// 15 s of a server failing after Tversion: the dials and log it costs are the measure.
	await.For(t.Context(), 15*time.Second)
	defer c.Close()
	t.Logf("fail after Tversion 15 s: %s, %d dials, log %d bytes", hwm(), dials.Load(), lw.n.Load())
}
