package ns_test

// Transcript tests replay testdata/*.txt over a pipe against the test tree,
// in the format of srv9p's own: a T line is a request as plan9.ParseFcall
// reads it (fields left out are zero, so the tag defaults to 0), an R line
// is the reply expected, and consecutive R lines may arrive in any order.
// Beside those:
//
//	serve [untrusted|sandboxed] [maxmsize N] [maxfids N] [maxrequests N]
//	raw HEX           send bytes as they are (frames no client would send)
//	act VERB [ARG]    change the world: log-write, log-close, trim-write,
//	                  wait-return, publish, rename, counter; ARG may be a
//	                  Go string
//	eof               expect the server to close the connection
//
// Note that ParseFcall reads "data 'cafe'" as hex: data that is valid hex
// is hex. Stat times are fixed at 1700000000.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns"
)

// transcriptTime is the atime and mtime stat reports in transcripts.
var transcriptTime = time.Unix(1700000000, 0)

func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			replay(t, file, string(data))
		})
	}
}

type transcript struct {
	t      *testing.T
	w      *world
	srv    *ns.Server
	r      *rawConn
	done   chan error // ServeConn's result
	closed bool       // the server closed the connection ("eof" seen)
}

func replay(t *testing.T, file, script string) {
	tr := &transcript{t: t}
	lines := strings.Split(script, "\n")
	for i := 0; i < len(lines); i++ {
		pos := fmt.Sprintf("%s:%d", file, i+1)
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		switch {
		case verb == "serve":
			tr.serve(pos, strings.Fields(rest))
		case tr.r == nil:
			t.Fatalf("%s: %s before serve", pos, verb)
		case verb[0] == 'T':
			f, err := plan9.ParseFcall(line)
			if err != nil {
				t.Fatalf("%s: %v", pos, err)
			}
			msg, err := f.Bytes()
			if err != nil {
				t.Fatalf("%s: %v", pos, err)
			}
			tr.r.sendBytes(msg)
		case verb[0] == 'R':
			// Gather this run of R lines; they may arrive in any order.
			var want []*plan9.Fcall
			for ; i < len(lines) && strings.HasPrefix(lines[i], "R"); i++ {
				f, err := plan9.ParseFcall(lines[i])
				if err != nil {
					t.Fatalf("%s:%d: %v", file, i+1, err)
				}
				want = append(want, f)
			}
			i--
			tr.expect(pos, want)
		case verb == "raw":
			b, err := hexBytes(rest)
			if err != nil {
				t.Fatalf("%s: %v", pos, err)
			}
			tr.r.sendBytes(b)
		case verb == "act":
			tr.act(pos, rest)
		case verb == "eof":
			tr.eof(pos)
		default:
			t.Fatalf("%s: unknown verb %q", pos, verb)
		}
	}
	if tr.r == nil {
		return
	}
	// Every request must have been answered, and by the replies the script
	// expects: once none is pending, a flush of nothing is a barrier
	// behind which no reply may hide.
	if !tr.closed {
		waitFor(t, "the script's requests to be answered", func() bool { return ns.Pending(tr.srv) == 0 })
		tr.r.send(&plan9.Fcall{Type: plan9.Tflush, Tag: plan9.NOTAG - 1, Oldtag: plan9.NOTAG - 2})
		if f := tr.r.recv(); f.Type != plan9.Rflush || f.Tag != plan9.NOTAG-1 {
			t.Fatalf("%s: reply after the end of the script: %v", file, f)
		}
		tr.r.nc.Close()
	}
	select {
	case <-tr.done:
	case <-time.After(timeout):
		t.Fatalf("%s: ServeConn did not return", file)
	}
}

func (tr *transcript) serve(pos string, opts []string) {
	t := tr.t
	if tr.r != nil {
		t.Fatalf("%s: already serving", pos)
	}
	tr.w = newWorld(t)
	srv := newServer(tr.w)
	ns.SetStarted(srv, transcriptTime)
	tr.srv = srv
	peer := ns.Peer{Kind: ns.Owner, UID: -1}
	for len(opts) > 0 {
		opt := opts[0]
		opts = opts[1:]
		switch opt {
		case "untrusted":
			peer.Kind = ns.Remote
			continue
		case "sandboxed":
			peer.Kind = ns.Sandboxed
			continue
		}
		if len(opts) == 0 {
			t.Fatalf("%s: option %s needs a value", pos, opt)
		}
		n, err := strconv.Atoi(opts[0])
		if err != nil {
			t.Fatalf("%s: option %s: %v", pos, opt, err)
		}
		opts = opts[1:]
		switch opt {
		case "maxmsize":
			srv.MaxMsize = uint32(n)
		case "maxfids":
			srv.MaxFids = n
		case "maxrequests":
			srv.MaxRequests = n
		default:
			t.Fatalf("%s: unknown option %s", pos, opt)
		}
	}
	a, b := net.Pipe()
	tr.done = make(chan error, 1)
	go func() { tr.done <- srv.ServeConn(a, peer) }()
	tr.r = newRaw(t, b)
}

// expect reads len(want) replies and matches them to want in any order,
// comparing their encodings.
func (tr *transcript) expect(pos string, want []*plan9.Fcall) {
	t := tr.t
	wantBytes := make([][]byte, len(want))
	for i, f := range want {
		b, err := f.Bytes()
		if err != nil {
			t.Fatalf("%s: %v: %v", pos, f, err)
		}
		wantBytes[i] = b
	}
	var extra []*plan9.Fcall
Reply:
	for range want {
		var f *plan9.Fcall
		select {
		case got, ok := <-tr.r.in:
			if !ok {
				t.Fatalf("%s: connection closed (%v), want %s", pos, tr.r.rerr, fcallList(want))
			}
			f = got
		case <-time.After(timeout):
			t.Fatalf("%s: no reply within %v, want %s", pos, timeout, fcallList(want))
		}
		b, err := f.Bytes()
		if err != nil {
			t.Fatalf("%s: %v: %v", pos, f, err)
		}
		for i := range want {
			if wantBytes[i] != nil && bytes.Equal(b, wantBytes[i]) {
				wantBytes[i] = nil
				continue Reply
			}
		}
		extra = append(extra, f)
	}
	if len(extra) == 0 {
		return
	}
	var missing []*plan9.Fcall
	for i, b := range wantBytes {
		if b != nil {
			missing = append(missing, want[i])
		}
	}
	t.Fatalf("%s: reply mismatch:\nhave %s\nwant %s", pos, fcallList(extra), fcallList(missing))
}

// fcallList renders fcalls as a transcript would, Rread data in full.
func fcallList(fs []*plan9.Fcall) string {
	var s []string
	for _, f := range fs {
		if f.Type == plan9.Rread || f.Type == plan9.Twrite {
			s = append(s, fmt.Sprintf("%v (data %q)", f, f.Data))
		} else {
			s = append(s, f.String())
		}
	}
	return strings.Join(s, "\n     ")
}

func (tr *transcript) act(pos, rest string) {
	t, w := tr.t, tr.w
	verb, arg, _ := strings.Cut(rest, " ")
	args := strings.Fields(arg)
	if strings.HasPrefix(strings.TrimSpace(arg), `"`) {
		s, err := strconv.Unquote(strings.TrimSpace(arg))
		if err != nil {
			t.Fatalf("%s: %v", pos, err)
		}
		arg = s
	}
	switch verb {
	case "log-write":
		w.log.Write([]byte(arg))
	case "log-close":
		w.log.Close()
	case "trim-write":
		w.trim.Write([]byte(arg))
	case "wait-return":
		select {
		case <-w.waitIn:
		case <-time.After(timeout):
			t.Fatalf("%s: the wait handler never started", pos)
		}
		w.waitOut <- []byte(arg)
	case "publish":
		if len(args) != 2 {
			t.Fatalf("%s: publish TOPIC DATA", pos)
		}
		w.bus.Publish(args[0], args[1])
	case "rename":
		if len(args) != 2 {
			t.Fatalf("%s: rename ID NAME", pos)
		}
		w.rename(args[0], args[1])
	case "counter":
		n, err := strconv.Atoi(arg)
		if err != nil {
			t.Fatalf("%s: %v", pos, err)
		}
		w.setCounter(n)
	default:
		t.Fatalf("%s: unknown act %q", pos, verb)
	}
}

func (tr *transcript) eof(pos string) {
	select {
	case f, ok := <-tr.r.in:
		if ok {
			tr.t.Fatalf("%s: got %v, want the connection closed", pos, f)
		}
	case <-time.After(timeout):
		tr.t.Fatalf("%s: connection still open", pos)
	}
	tr.closed = true
}

func hexBytes(s string) ([]byte, error) {
	s = strings.Join(strings.Fields(s), "")
	b := make([]byte, len(s)/2)
	for i := range b {
		n, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("raw: %v", err)
		}
		b[i] = byte(n)
	}
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("raw: odd number of hex digits")
	}
	return b, nil
}
