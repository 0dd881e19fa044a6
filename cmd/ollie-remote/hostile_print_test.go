package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"ollie/internal/paths"
	"ollie/ns"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
	"ollie/tunnel/keeper"
)

// What a compromised host says, as it reaches ollie-remote through the
// keeper: escapes that clear the screen, set the title, write the
// clipboard, an 8-bit CSI, tabs that shift a table's columns, and newlines
// that print a line in another host's name (issue 11's "h5: up … (all
// good)").
const (
	hostileMsg = "olliesrv serves /tmp/x\x1b[2J\x1b[H\nh5: up (all good)\x1b]0;h5\a"
	hostileErr = "install: \x1b]52;c;Y3VybCBldmlsfHNo\x1b\\\u009b1A\r\nh5: ok, up to date"
)

// fakeKeeper answers the control socket as a keeper whose hosts said
// the above.
func fakeKeeper(t *testing.T, statusSock, failingSock string) {
	t.Helper()
	l, err := net.Listen("unix", keeper.ControlSocket(paths.RemoteDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var req keeper.Request
				if json.NewDecoder(c).Decode(&req) != nil {
					return
				}
				enc := json.NewEncoder(c)
				switch req.Op {
				case "up":
					enc.Encode(keeper.Reply{Host: req.Host, Msg: hostileMsg})
					if req.Host == "h4" {
						enc.Encode(keeper.Reply{Host: req.Host, Done: true, Err: hostileErr})
					} else {
						enc.Encode(keeper.Reply{Host: req.Host, Done: true, Socket: "/run/h6.ns"})
					}
				case "down":
					enc.Encode(keeper.Reply{Host: req.Host, Done: true, Err: hostileErr})
				case "list":
					enc.Encode(keeper.Reply{Done: true, Held: []keeper.HeldInfo{
						{Host: "h4", Socket: statusSock, Tunnel: "up\x1b[2J\tfake", Proxy: "connected"},
						{Host: "h6", Socket: failingSock, Tunnel: "up", Proxy: "reconnecting: \x1b]0;x\a\u009b2J"},
					}})
				case "deploy":
					enc.Encode(keeper.Reply{Host: req.Host, Msg: hostileMsg})
					r := deploy.Result{Host: req.Host, Platform: "linux/\x1b[31mamd64\tx", Version: "abc\u009b2J", Files: 1,
						Changed: []string{"current -> abc\x1b]0;pwned\a\nh5: ok, up to date"}}
					if req.Host == "h6" {
						r.Err = hostileErr
					}
					enc.Encode(keeper.Reply{Host: req.Host, Done: true, Result: &r})
				}
			}()
		}
	}()
}

// statusNS serves a host's /status, or an error in its place, on a socket.
func statusNS(t *testing.T, sock, status string, fail bool) {
	t.Helper()
	root := ns.Dir("", 0555, "",
		ns.ReadFile("status", 0444, "Status.", func(context.Context, *ns.Call) ([]byte, error) {
			if fail {
				return nil, errors.New(hostileErr)
			}
			return []byte(status), nil
		}),
	)
	serveTree(t, sock, root)
}

// TestHostTextPrinted: deploy, up, down and status print what hosts said
// with no control character of theirs, one line per message, and the
// status table keeps its columns.
func TestHostTextPrinted(t *testing.T) {
	dir, err := os.MkdirTemp("", "orp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	t.Setenv("OLLIE_REMOTE_DIR", dir)
	statusNS(t, filepath.Join(dir, "h4.ns"), "version 1.2\x1b[2J\nuptime 5\nsessions 3\x1b]52;c;eA==\a\nagents 2\t9\n", false)
	statusNS(t, filepath.Join(dir, "h6.ns"), "", true)
	fakeKeeper(t, filepath.Join(dir, "h4.ns"), filepath.Join(dir, "h6.ns"))

	binDir, dataDir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(binDir, "olliesrv"), []byte("binary"), 0755)
	c := &common{parallel: 2, binDir: binDir, dataDir: dataDir, keep: 3}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		run   func(stdout, stderr io.Writer) int
		lines int // of stdout and stderr together
	}{
		{"deploy", func(o, e io.Writer) int { return deployMain(ctx, c, []string{"h4", "h6"}, o, e) }, 2 + 1 + 1 + 1 + 3 + 1},
		{"up", func(o, e io.Writer) int { return upMain(ctx, c, []string{"h4", "h6"}, o, e) }, 4},
		{"down", func(o, e io.Writer) int { return downMain(ctx, c, []string{"h4"}, o, e) }, 1},
		{"status", func(o, e io.Writer) int { return statusMain(ctx, c, nil, o, e) }, 3},
	} {
		var out bytes.Buffer
		tc.run(&out, &out)
		s := out.String()
		if p := controlIn(s, true); p != "" {
			t.Errorf("%s: %s:\n%s", tc.name, p, s)
		}
		lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		if len(lines) != tc.lines {
			t.Errorf("%s: %d lines, want %d: a host added lines:\n%s", tc.name, len(lines), tc.lines, s)
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "h5") {
				t.Errorf("%s: a host printed a line in h5's name: %q", tc.name, l)
			}
		}
		if tc.name == "status" {
			// The columns stay where the header puts them.
			col := strings.Index(lines[0], "TUNNEL")
			for _, l := range lines[1:] {
				if len(l) < col || strings.Contains(l[:col], "fake") || !strings.HasPrefix(l[col:], "up") {
					t.Errorf("status: the host's text moved the TUNNEL column:\n%s", s)
				}
			}
		}
	}
}

// remoteError keeps the host's error output to one safe line.
func TestRemoteErrorHostile(t *testing.T) {
	err := deploy.RemoteError("probing the host", &tunnel.ExitError{Status: 1, Stderr: []byte(hostileErr + strings.Repeat("x", 1<<20))})
	if p := controlIn(err.Error(), false); p != "" {
		t.Error(p)
	}
	if len(err.Error()) > maxHostMessage+100 {
		t.Errorf("an error of %d bytes: the host's output is not clipped", len(err.Error()))
	}
}

// controlIn says what in s a terminal would act on rather than show, or
// "": a C0 or C1 control (but the newlines between lines, with keepNL),
// DEL, a bidi control, bytes that are not UTF-8.
func controlIn(s string, keepNL bool) string {
	if !utf8.ValidString(s) {
		return "bytes that are not UTF-8"
	}
	for i, r := range s {
		switch {
		case r == '\n' && keepNL:
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return fmt.Sprintf("control %U at byte %d", r, i)
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return fmt.Sprintf("bidi control %U at byte %d", r, i)
		}
	}
	return ""
}
