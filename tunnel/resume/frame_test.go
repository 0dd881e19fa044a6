package resume

import (
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
