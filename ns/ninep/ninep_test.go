package ninep

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"9fans.net/go/plan9"
)

// fields is a message body with one field of each kind, in the order
// TestParserReadsFields reads them.
func fields() []byte {
	var b []byte
	b = append(b, 0x7f)
	b = binary.LittleEndian.AppendUint16(b, 0xbeef)
	b = binary.LittleEndian.AppendUint32(b, 0xdeadbeef)
	b = binary.LittleEndian.AppendUint64(b, 0x0123456789abcdef)
	b = binary.LittleEndian.AppendUint16(b, 5)
	b = append(b, "hello"...)
	b = append(b, plan9.QTDIR)
	b = binary.LittleEndian.AppendUint32(b, 7)
	b = binary.LittleEndian.AppendUint64(b, 42)
	b = append(b, "data"...)
	return b
}

func TestParserReadsFields(t *testing.T) {
	p := NewParser(fields())
	if v := p.U8(); v != 0x7f {
		t.Errorf("U8 = %#x", v)
	}
	if v := p.U16(); v != 0xbeef {
		t.Errorf("U16 = %#x", v)
	}
	if v := p.U32(); v != 0xdeadbeef {
		t.Errorf("U32 = %#x", v)
	}
	if v := p.U64(); v != 0x0123456789abcdef {
		t.Errorf("U64 = %#x", v)
	}
	if v := p.Str(); v != "hello" {
		t.Errorf("Str = %q", v)
	}
	if q := p.Qid(); q != (plan9.Qid{Type: plan9.QTDIR, Vers: 7, Path: 42}) {
		t.Errorf("Qid = %v", q)
	}
	if p.Done() {
		t.Errorf("Done with 4 bytes left")
	}
	data := p.Take(4)
	if string(data) != "data" {
		t.Errorf("Take = %q", data)
	}
	if cap(data) != len(data) {
		t.Errorf("Take left room to append over the message: cap %d, len %d", cap(data), len(data))
	}
	if !p.Done() {
		t.Errorf("not Done after reading every field")
	}
}

// However a message is cut short, every read returns, and Done says no.
func TestParserPastEnd(t *testing.T) {
	full := fields()
	for n := range len(full) {
		p := NewParser(full[:n])
		p.U8()
		p.U16()
		p.U32()
		p.U64()
		s := p.Str()
		p.Qid()
		p.Take(4)
		if p.Done() {
			t.Errorf("cut at %d bytes: Done", n)
		}
		if n < 1+2+4+8+2+5 && s != "" {
			t.Errorf("cut at %d bytes: Str = %q, want \"\" past the end", n, s)
		}
	}
}

func TestParserClaimedLengths(t *testing.T) {
	p := NewParser([]byte{1, 2, 3})
	if b := p.Take(1 << 30); len(b) > 8 {
		t.Errorf("Take of a length a peer claimed allocated %d bytes", len(b))
	}
	if p.Done() {
		t.Errorf("Done after a read past the end")
	}
	p = NewParser([]byte{1, 2, 3})
	if b := p.Take(-1); len(b) != 0 {
		t.Errorf("Take(-1) = %v", b)
	}
	if p.Done() {
		t.Errorf("Done after Take(-1)")
	}
	// A string claiming more than the message holds.
	p = NewParser([]byte{0xff, 0xff, 'a', 'b'})
	if s := p.Str(); s != "" || p.Done() {
		t.Errorf("Str of a string longer than its message = %q, Done %v", s, p.Done())
	}
}

func TestPeekSize(t *testing.T) {
	msg := func(size uint32, rest string) string {
		return string(binary.LittleEndian.AppendUint32(nil, size)) + rest
	}
	for _, tc := range []struct {
		name, in string
		max      uint32
		size     uint32
		err      error  // errors.Is
		text     string // of a *SizeError
	}{
		{name: "a message", in: msg(11, "\x65\x01\x00abcd"), max: 64, size: 11},
		{name: "the largest", in: msg(64, ""), max: 64, size: 64},
		{name: "the smallest", in: msg(7, "\x65\x01\x00"), max: 64, size: 7},
		{name: "nothing", in: "", max: 64, err: io.EOF},
		{name: "half a size", in: "\x0b\x00", max: 64, err: io.ErrUnexpectedEOF},
		{name: "too small", in: msg(6, "ab"), max: 64, text: "size 6"},
		{name: "too large", in: msg(65, ""), max: 64, text: "message of 65 bytes exceeds msize 64"},
	} {
		br := bufio.NewReader(strings.NewReader(tc.in))
		size, err := PeekSize(br, tc.max)
		var se *SizeError
		switch {
		case tc.text != "":
			if !errors.As(err, &se) || err.Error() != tc.text {
				t.Errorf("%s: PeekSize = %d, %v; want a *SizeError %q", tc.name, size, err, tc.text)
			}
		case tc.err != nil:
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: PeekSize = %d, %v; want %v", tc.name, size, err, tc.err)
			}
		default:
			if err != nil || size != tc.size {
				t.Errorf("%s: PeekSize = %d, %v; want %d", tc.name, size, err, tc.size)
			}
			if rest, _ := io.ReadAll(br); string(rest) != tc.in {
				t.Errorf("%s: PeekSize consumed input: %q left of %q", tc.name, rest, tc.in)
			}
		}
	}
}

func TestReadMessage(t *testing.T) {
	msg := func(size uint32, rest string) string {
		return string(binary.LittleEndian.AppendUint32(nil, size)) + rest
	}
	small, large := msg(11, "\x65\x01\x00abcd"), msg(64, strings.Repeat("x", 60))
	for _, tc := range []struct {
		name, in string
		buf      int // capacity of the buffer passed
		want     []string
		err      error  // errors.Is, after the messages
		text     string // of a *SizeError, after the messages
	}{
		{name: "into buf", in: small + large, buf: 64, want: []string{small, large}, err: io.EOF},
		{name: "into new slices", in: small + large, buf: 8, want: []string{small, large}, err: io.EOF},
		{name: "no buf", in: small, want: []string{small}, err: io.EOF},
		{name: "cut short", in: small + large[:20], buf: 64, want: []string{small}, err: io.ErrUnexpectedEOF},
		{name: "half a size", in: "\x0b\x00", err: io.ErrUnexpectedEOF},
		{name: "too large", in: small + msg(65, ""), buf: 1 << 10, want: []string{small}, text: "message of 65 bytes exceeds msize 64"},
		{name: "too small", in: msg(6, "ab"), text: "size 6"},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
		buf := make([]byte, 0, tc.buf)
		var got []string
		var err error
		for {
			var f []byte
			if f, err = ReadMessage(br, 64, buf); err != nil {
				break
			}
			fits := len(f) <= tc.buf
			if inBuf := tc.buf > 0 && &f[0] == &buf[:1][0]; inBuf != fits {
				t.Errorf("%s: a message of %d bytes read into the buffer of %d: %v", tc.name, len(f), tc.buf, inBuf)
			}
			got = append(got, string(f))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: read %q, want %q", tc.name, got, tc.want)
		}
		var se *SizeError
		switch {
		case tc.text != "":
			if !errors.As(err, &se) || err.Error() != tc.text {
				t.Errorf("%s: ended with %v; want a *SizeError %q", tc.name, err, tc.text)
			}
		case !errors.Is(err, tc.err):
			t.Errorf("%s: ended with %v; want %v", tc.name, err, tc.err)
		}
	}
}

func TestSplit(t *testing.T) {
	tread, _ := (&plan9.Fcall{Type: plan9.Tread, Tag: 0x1234, Fid: 5, Offset: 9, Count: 100}).Bytes()
	h, p, ok := Split(tread)
	if !ok || h != (Header{Type: plan9.Tread, Tag: 0x1234}) {
		t.Fatalf("Split(Tread) = %+v, %v", h, ok)
	}
	if fid, off, n := p.U32(), p.U64(), p.U32(); fid != 5 || off != 9 || n != 100 || !p.Done() {
		t.Errorf("Split(Tread)'s fields: fid %d offset %d count %d, done %v", fid, off, n, p.Done())
	}
	for _, tc := range []struct {
		name string
		f    []byte
	}{
		{"nothing", nil},
		{"shorter than a header", []byte{6, 0, 0, 0, plan9.Rflush, 0}},
		{"size says more", append([]byte{8}, tread[1:7]...)},
		{"size says less", append([]byte{7}, tread[1:]...)},
	} {
		if h, _, ok := Split(tc.f); ok || h != (Header{}) {
			t.Errorf("Split of %s = %+v, %v", tc.name, h, ok)
		}
	}
}

// FuzzReadMessage reads a stream of messages and checks that each is one
// whole message within its bound, and that the stream ends in an error
// only at a size out of bounds or at the end of the input.
func FuzzReadMessage(f *testing.F) {
	f.Add([]byte("\x07\x00\x00\x00\x6b\x01\x00\x0b\x00\x00\x00\x65\x01\x00abcd"), uint16(16))
	f.Add([]byte("\x40\x00\x00\x00xyz"), uint16(64))
	f.Fuzz(func(t *testing.T, in []byte, max16 uint16) {
		max := uint32(max16)
		br := bufio.NewReaderSize(bytes.NewReader(in), 16)
		buf := make([]byte, 0, 32)
		read := 0
		for {
			m, err := ReadMessage(br, max, buf)
			if err != nil {
				var se *SizeError
				if !errors.As(err, &se) && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("ReadMessage ended with %v", err)
				}
				if err == io.EOF && read != len(in) {
					t.Fatalf("io.EOF after %d bytes of %d", read, len(in))
				}
				return
			}
			if uint32(len(m)) > max || !bytes.Equal(m, in[read:read+len(m)]) {
				t.Fatalf("read %x at %d, max %d", m, read, max)
			}
			if _, _, ok := Split(m); !ok {
				t.Fatalf("Split refuses what ReadMessage read: %x", m)
			}
			read += len(m)
		}
	})
}

// The requests whose fid field names a fid the client already has; Tauth
// and Tattach make theirs, and the rest have none.
func TestUsesFid(t *testing.T) {
	want := map[uint8]bool{
		plan9.Twalk: true, plan9.Topen: true, plan9.Tcreate: true, plan9.Tread: true,
		plan9.Twrite: true, plan9.Tclunk: true, plan9.Tremove: true, plan9.Tstat: true,
		plan9.Twstat: true,
	}
	for typ := uint8(0); typ < 255; typ++ {
		if got := UsesFid(typ); got != want[typ] {
			t.Errorf("UsesFid(%d) = %v", typ, got)
		}
	}
}

// FuzzParser reads fields of the kinds a script names and checks each
// against a reading of its own: the same values while the message lasts,
// and Done exactly when the reads met its end.
func FuzzParser(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4}, fields())
	f.Add([]byte{4, 4, 5}, []byte{2, 0, 'h', 'i'})
	f.Add([]byte{3}, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, script, msg []byte) {
		p := NewParser(msg)
		off, past := 0, false
		want := func(n int) []byte {
			if past || off+n > len(msg) {
				past = true
				return nil
			}
			b := msg[off : off+n]
			off += n
			return b
		}
		for _, op := range script {
			switch op % 6 {
			case 0:
				v, b := p.U8(), want(1)
				if b != nil && v != b[0] {
					t.Fatalf("U8 = %d, want %d", v, b[0])
				}
			case 1:
				v, b := p.U16(), want(2)
				if b != nil && v != binary.LittleEndian.Uint16(b) {
					t.Fatalf("U16 = %d", v)
				}
			case 2:
				v, b := p.U32(), want(4)
				if b != nil && v != binary.LittleEndian.Uint32(b) {
					t.Fatalf("U32 = %d", v)
				}
			case 3:
				v, b := p.U64(), want(8)
				if b != nil && v != binary.LittleEndian.Uint64(b) {
					t.Fatalf("U64 = %d", v)
				}
			case 4:
				v := p.Str()
				if n := want(2); n != nil {
					if b := want(int(binary.LittleEndian.Uint16(n))); b != nil && v != string(b) {
						t.Fatalf("Str = %q, want %q", v, b)
					}
				}
				if past && v != "" {
					t.Fatalf("Str past the end = %q", v)
				}
			case 5:
				n := int(op / 6)
				v, b := p.Take(n), want(n)
				if b != nil && !bytes.Equal(v, b) {
					t.Fatalf("Take(%d) = %x, want %x", n, v, b)
				}
				if len(v) > max(n, 8) {
					t.Fatalf("Take(%d) returned %d bytes", n, len(v))
				}
			}
		}
		if done := !past && off == len(msg); p.Done() != done {
			t.Fatalf("Done = %v after reading %d of %d bytes (past the end: %v)", p.Done(), off, len(msg), past)
		}
	})
}
