package resume

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"9fans.net/go/plan9"
)

// errMalformed reports a message that does not parse. A client that sends
// one is cut off: forwarding it would make the server end the connection,
// and resending it would do so again after every reconnect.
var errMalformed = errors.New("resume: malformed 9P message")

// preVersionMax bounds messages before Tversion settles msize: only
// Tversion and Rversion, both small, are legal then.
const preVersionMax = 64 << 10

// readBufSize is the read buffer of every connection: large enough for
// ns's largest msize, so that messages are handed on from the buffer
// without a copy and a large read takes one system call, not several.
const readBufSize = 256<<10 + 8<<10

// A frameReader reads 9P messages from a buffered connection.
type frameReader struct {
	br   *bufio.Reader
	buf  []byte // for messages larger than br's buffer
	held int    // bytes of the last message, handed out in place, still in br
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(r, readBufSize)}
}

// next returns the next message, valid until the following call. A size
// outside [7, max] is a protocol error.
func (r *frameReader) next(max uint32) ([]byte, error) {
	r.release()
	hdr, err := r.br.Peek(4)
	if err != nil {
		return nil, unexpected(err, r.br.Buffered())
	}
	size := binary.LittleEndian.Uint32(hdr)
	if size < 7 {
		return nil, fmt.Errorf("%w: size %d", errMalformed, size)
	}
	if size > max {
		return nil, fmt.Errorf("%w: message of %d bytes exceeds msize %d", errMalformed, size, max)
	}
	if int(size) <= r.br.Size() {
		f, err := r.br.Peek(int(size))
		if err != nil {
			return nil, unexpected(err, 1)
		}
		r.held = int(size)
		return f, nil
	}
	if uint32(cap(r.buf)) < size {
		r.buf = make([]byte, size)
	}
	f := r.buf[:size]
	if _, err := io.ReadFull(r.br, f); err != nil {
		return nil, unexpected(err, 1)
	}
	return f, nil
}

// unexpected turns EOF in the middle of a message into ErrUnexpectedEOF.
func unexpected(err error, buffered int) error {
	if err == io.EOF && buffered > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *frameReader) release() {
	if r.held > 0 {
		r.br.Discard(r.held)
		r.held = 0
	}
}

// ready reports whether a whole message after the current one is
// buffered, so that writing what has been relayed can wait for it.
func (r *frameReader) ready() bool {
	n := r.br.Buffered() - r.held
	if n < 4 {
		return false
	}
	hdr, _ := r.br.Peek(r.held + 4)
	return int64(binary.LittleEndian.Uint32(hdr[r.held:])) <= int64(n)
}

// tmsg is what the proxy needs from a request. Strings and names are
// filled in only for the rare messages that carry them, so that the
// frequent ones (Tread, Twrite, Tclunk, Tstat) parse without allocating.
type tmsg struct {
	typ    uint8
	tag    uint16
	fid    uint32 // also Tauth's afid
	newfid uint32 // Twalk
	afid   uint32 // Tattach
	oldtag uint16 // Tflush
	mode   uint8  // Topen, Tcreate
	msize  uint32 // Tversion
	uname  string // Tattach, Tauth
	aname  string // Tattach, Tauth
	name   string // Tcreate
	names  []string
}

// usesFid reports whether a request of type typ acts on an existing fid
// in its fid field.
func usesFid(typ uint8) bool {
	switch typ {
	case plan9.Twalk, plan9.Topen, plan9.Tcreate, plan9.Tread, plan9.Twrite,
		plan9.Tclunk, plan9.Tremove, plan9.Tstat, plan9.Twstat:
		return true
	}
	return false
}

// resendable reports whether a request of type typ may be sent again to a
// new connection when the first one died with it in flight: it changes
// nothing in the server that the replay does not set up again.
func resendable(typ uint8) bool {
	switch typ {
	case plan9.Tversion, plan9.Tattach, plan9.Twalk, plan9.Topen,
		plan9.Tread, plan9.Tstat, plan9.Tclunk:
		return true
	}
	return false
}

// parseT checks that f is a well-formed 9P2000 request and returns what
// the proxy tracks of it.
func parseT(f []byte) (tmsg, error) {
	var m tmsg
	if len(f) < 7 {
		return m, errMalformed
	}
	m.typ, m.tag = f[4], binary.LittleEndian.Uint16(f[5:7])
	p := parser{b: f[7:]}
	switch m.typ {
	case plan9.Tversion:
		m.msize = p.u32()
		p.str() // version: the server judges it
	case plan9.Tauth:
		m.fid = p.u32()
		m.uname, m.aname = p.str(), p.str()
	case plan9.Tattach:
		m.fid, m.afid = p.u32(), p.u32()
		m.uname, m.aname = p.str(), p.str()
	case plan9.Tflush:
		m.oldtag = p.u16()
	case plan9.Twalk:
		m.fid, m.newfid = p.u32(), p.u32()
		n := int(p.u16())
		if n > plan9.MAXWELEM {
			return m, errMalformed
		}
		if n > 0 {
			m.names = make([]string, n)
			for i := range m.names {
				m.names[i] = p.str()
			}
		}
	case plan9.Topen:
		m.fid, m.mode = p.u32(), p.u8()
	case plan9.Tcreate:
		m.fid = p.u32()
		m.name = p.str()
		p.u32() // perm
		m.mode = p.u8()
	case plan9.Tread:
		m.fid = p.u32()
		p.skip(12) // offset, count
	case plan9.Twrite:
		m.fid = p.u32()
		p.skip(8)
		p.skip(int(p.u32()))
	case plan9.Tclunk, plan9.Tremove, plan9.Tstat:
		m.fid = p.u32()
	case plan9.Twstat:
		m.fid = p.u32()
		p.skip(int(p.u16()))
	default:
		return m, fmt.Errorf("%w: type %d", errMalformed, m.typ)
	}
	if p.bad || len(p.b) != 0 {
		return m, errMalformed
	}
	return m, nil
}

// parser reads little-endian fields; reading past the end sets bad.
type parser struct {
	b   []byte
	bad bool
}

func (p *parser) take(n int) []byte {
	if n < 0 || len(p.b) < n {
		p.bad = true
		p.b = nil
		// Enough zeros for the fixed-size fields; n may be any length
		// a client claims.
		return make([]byte, min(max(n, 0), 8))
	}
	v := p.b[:n]
	p.b = p.b[n:]
	return v
}

func (p *parser) skip(n int)  { p.take(n) }
func (p *parser) u8() uint8   { return p.take(1)[0] }
func (p *parser) u16() uint16 { return binary.LittleEndian.Uint16(p.take(2)) }
func (p *parser) u32() uint32 { return binary.LittleEndian.Uint32(p.take(4)) }
func (p *parser) str() string { return string(p.take(int(p.u16()))) }

// Replies the proxy makes itself.

func rerror(tag uint16, msg string) []byte {
	b, _ := (&plan9.Fcall{Type: plan9.Rerror, Tag: tag, Ename: msg}).Bytes()
	return b
}

// empty returns a reply with no body (Rflush, Rclunk).
func empty(typ uint8, tag uint16) []byte {
	b := []byte{7, 0, 0, 0, typ, 0, 0}
	binary.LittleEndian.PutUint16(b[5:], tag)
	return b
}
