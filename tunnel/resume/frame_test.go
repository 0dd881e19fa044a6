package resume

import (
	"io"
	"slices"
	"testing"

	"9fans.net/go/plan9"

	"ollie/ns/ninep"
)

var requests = []*plan9.Fcall{
	{Type: plan9.Tversion, Tag: plan9.NOTAG, Msize: 8216, Version: "9P2000"},
	{Type: plan9.Tauth, Tag: 1, Afid: 5, Uname: "glenda", Aname: ""},
	{Type: plan9.Tattach, Tag: 1, Fid: 0, Afid: plan9.NOFID, Uname: "glenda", Aname: "main"},
	{Type: plan9.Tflush, Tag: 2, Oldtag: 1},
	{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1, Wname: []string{"a", "..", "b"}},
	{Type: plan9.Twalk, Tag: 1, Fid: 0, Newfid: 1},
	{Type: plan9.Topen, Tag: 1, Fid: 1, Mode: plan9.ORDWR | plan9.OTRUNC},
	{Type: plan9.Tcreate, Tag: 1, Fid: 1, Name: "new", Perm: 0644, Mode: plan9.OWRITE},
	{Type: plan9.Tread, Tag: 1, Fid: 1, Offset: 1 << 40, Count: 8192},
	{Type: plan9.Twrite, Tag: 1, Fid: 1, Offset: 3, Data: []byte("data")},
	{Type: plan9.Tclunk, Tag: 1, Fid: 1},
	{Type: plan9.Tremove, Tag: 1, Fid: 1},
	{Type: plan9.Tstat, Tag: 1, Fid: 1},
	{Type: plan9.Twstat, Tag: 1, Fid: 1, Stat: []byte{1, 2, 3}},
}

func TestParseT(t *testing.T) {
	for _, f := range requests {
		b, err := f.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		m, err := parseT(b)
		if err != nil {
			t.Errorf("%v: %v", f, err)
			continue
		}
		check(t, b, m)
		for cut := 1; cut < len(b)-4; cut++ {
			short := slices.Clone(b[:len(b)-cut])
			short[0] = byte(len(short)) // keep the size field honest
			if _, err := parseT(short); err == nil {
				t.Errorf("%v cut by %d: accepted", f, cut)
			}
		}
	}
	if _, err := parseT([]byte{7, 0, 0, 0, plan9.Rread, 0, 0}); err == nil {
		t.Error("a reply was accepted as a request")
	}
}

// check compares what parseT found with what plan9.UnmarshalFcall does.
func check(t testing.TB, b []byte, m tmsg) {
	t.Helper()
	f, err := plan9.UnmarshalFcall(b)
	if err != nil {
		t.Fatalf("parseT accepted what UnmarshalFcall refuses (%v): %x", err, b)
	}
	fid := f.Fid
	if f.Type == plan9.Tauth {
		fid = f.Afid
	}
	switch {
	case m.typ != f.Type, m.tag != f.Tag:
		t.Errorf("%v: type/tag %d/%d", f, m.typ, m.tag)
	case ninep.UsesFid(m.typ) && m.fid != fid:
		t.Errorf("%v: fid %d", f, m.fid)
	case m.typ == plan9.Twalk && (m.newfid != f.Newfid || !slices.Equal(m.names, f.Wname)):
		t.Errorf("%v: walk %d %q", f, m.newfid, m.names)
	case m.typ == plan9.Tattach && (m.afid != f.Afid || m.uname != f.Uname || m.aname != f.Aname):
		t.Errorf("%v: attach %d %q %q", f, m.afid, m.uname, m.aname)
	case (m.typ == plan9.Topen || m.typ == plan9.Tcreate) && m.mode != f.Mode:
		t.Errorf("%v: mode %d", f, m.mode)
	case m.typ == plan9.Tcreate && m.name != f.Name:
		t.Errorf("%v: name %q", f, m.name)
	case m.typ == plan9.Tflush && m.oldtag != f.Oldtag:
		t.Errorf("%v: oldtag %d", f, m.oldtag)
	case m.typ == plan9.Tversion && m.msize != f.Msize:
		t.Errorf("%v: msize %d", f, m.msize)
	}
}

// FuzzParseT checks that parseT never panics, and that whatever it accepts
// is a request plan9.UnmarshalFcall reads the same way.
func FuzzParseT(f *testing.F) {
	for _, r := range requests {
		b, _ := r.Bytes()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 4 {
			// Frames reach parseT with a size field that matches.
			n := uint32(len(b))
			b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
		}
		m, err := parseT(b)
		if err == nil {
			check(t, b, m)
		}
	})
}

// A connection reads small messages from a small buffer and moves to the
// large one at its first large message, losing nothing that was already
// buffered behind it; a large message is then handed on in place.
func TestFrameReaderGrows(t *testing.T) {
	var msgs [][]byte
	for i, n := range []int{10, 200 << 10, 5, 120 << 10, 300 << 10, 7} {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(i + j)
		}
		m, err := (&plan9.Fcall{Type: plan9.Twrite, Tag: uint16(i), Fid: 1, Data: data}).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	var stream []byte
	for _, m := range msgs {
		stream = append(stream, m...)
	}
	// One byte a read at first, so that the small buffer holds the start
	// of the large message when it grows; then whole reads.
	fr := newFrameReader(&trickle{data: stream})
	if fr.br.Size() != smallBufSize {
		t.Fatalf("a new connection's buffer is %d bytes, want %d", fr.br.Size(), smallBufSize)
	}
	for i, want := range msgs {
		got, err := fr.next(1 << 20)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("message %d: %d bytes, not the %d sent", i, len(got), len(want))
		}
		if len(want) > smallBufSize && len(want) <= readBufSize && fr.br.Size() != readBufSize {
			t.Errorf("message %d of %d bytes read with a buffer of %d", i, len(want), fr.br.Size())
		}
	}
	if _, err := fr.next(1 << 20); err == nil {
		t.Error("a message past the end")
	}
}

// trickle gives its data a byte a read for the first 20 KiB, then whole.
type trickle struct {
	data []byte
	off  int
}

func (r *trickle) Read(p []byte) (int, error) {
	if r.off == len(r.data) {
		return 0, io.EOF
	}
	n := len(p)
	if r.off < 20<<10 {
		n = min(n, 4096)
	}
	n = copy(p[:n], r.data[r.off:])
	r.off += n
	return n, nil
}
