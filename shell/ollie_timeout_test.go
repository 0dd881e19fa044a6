package shell

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/internal/paths"
)

// silentHost serves h4's tunnel socket with a server that answers the
// handshake if handshake is set, and then nothing at all.
func silentHost(t *testing.T, handshake bool) {
	t.Setenv("OLLIE_REMOTE_DIR", t.TempDir())
	ln, err := net.Listen("unix", paths.RemoteSocket("h4"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				for handshake {
					tx, err := plan9.ReadFcall(nc)
					if err != nil {
						return
					}
					rx := &plan9.Fcall{Type: tx.Type + 1, Tag: tx.Tag}
					switch tx.Type {
					case plan9.Tversion:
						rx.Msize, rx.Version = tx.Msize, "9P2000"
					case plan9.Tattach:
						rx.Qid = plan9.Qid{Type: plan9.QTDIR}
					default:
						io.Copy(io.Discard, nc)
						return
					}
					plan9.WriteFcall(nc, rx)
				}
				io.Copy(io.Discard, nc)
			}()
		}
	}()
}

// TestOllieTimeouts: ollie -H against a host that answers nothing ends,
// saying so, instead of hanging: the handshake within
// OLLIE_HANDSHAKE_TIMEOUT, a request a person waits on within
// OLLIE_TIMEOUT.
func TestOllieTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handshake bool
		args      []string
		want      string
	}{
		{"handshake", false, []string{"ls", "/"}, "no answer to the 9P handshake within 300ms"},
		{"ls", true, []string{"ls", "/"}, "no answer from h4 within 300ms"},
		{"stat", true, []string{"stat", "status"}, "no answer from h4 within 300ms"},
		{"read", true, []string{"read", "status"}, "no answer from h4 within 300ms"},
		{"write", true, []string{"write", "ctl"}, "no answer from h4 within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			silentHost(t, tc.handshake)
			t.Setenv("OLLIE_HANDSHAKE_TIMEOUT", "300ms")
			t.Setenv("OLLIE_TIMEOUT", "300ms")
			var stdout, stderr bytes.Buffer
			// The message names the time-out that ended it: the
			// variable's 300 ms, not the default.
			code := Run(append([]string{"-H", "h4"}, tc.args...), strings.NewReader("kill"), &stdout, &stderr)
			if code != ollieExitNoServer || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), ollieExitNoServer, tc.want)
			}
		})
	}
}

// TestOllieFollowOutlivesTimeout (issue 30): OLLIE_TIMEOUT bounds what a
// person waits on, never a stream followed or a subscription: ollie read
// of a stream silent for many times the time-out, and ollie rdwrs of
// events, still show what comes after the silence.
func TestOllieFollowOutlivesTimeout(t *testing.T) {
	n := newOllieNS(t)
	t.Setenv("OLLIE_TIMEOUT", "200ms")
	for _, c := range []struct {
		name string
		args []string
		send func()
		want string
	}{
		{"read", []string{"read", "stream"}, func() { n.stream.Write([]byte("after the silence\n")) }, "after the silence"},
		{"rdwrs", []string{"rdwrs", "event"}, func() { n.bus.Publish("late", "after the silence") }, "after the silence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out nstest.SyncBuffer
			var errb bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- Run(append([]string{"-a", n.sock}, c.args...), strings.NewReader(""), &out, &errb) }()
			select {
			case code := <-done:
				t.Fatalf("ollie %s ended (exit %d) before anything came: %s", c.name, code, errb.String())
			case <-time.After(2 * time.Second): // ten times OLLIE_TIMEOUT
			}
			c.send()
			await.Until(t, 10*time.Second, "ollie "+c.name+" to show what came after the silence",
				func() bool { return strings.Contains(out.String(), c.want) },
				func() string {
					select {
					case code := <-done:
						return fmt.Sprintf("it exited %d after the silence: %s", code, errb.String())
					default:
						return fmt.Sprintf("it showed %q", out.String())
					}
				})
		})
	}
}
