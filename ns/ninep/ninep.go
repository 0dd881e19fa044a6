// Package ninep is the part of the 9P2000 wire format that tunnel/mux and
// tunnel/resume read by hand: a message's size, its header, its fields,
// and a whole message decoded strictly (Decode).
//
// Both relay messages from peers they do not trust and parse them
// strictly themselves rather than through plan9.UnmarshalFcall, which
// prints what it cannot parse (a peer sending garbage would fill a log)
// and allocates for every message. So a size is checked before a message
// is read, and no read of a field goes past the message, whatever lengths
// the message claims. What each relay makes of the fields is its own.
package ninep

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"9fans.net/go/plan9"
)

// HeaderSize is the smallest a message can be: size[4] type[1] tag[2].
const HeaderSize = 7

// A SizeError is a message size outside [HeaderSize, Max]. Nothing after
// it can be framed, so the connection that sent it is done. Its text
// names no package: the relay that met it wraps it in its own error.
type SizeError struct {
	Size, Max uint32
}

func (e *SizeError) Error() string {
	if e.Size < HeaderSize {
		return fmt.Sprintf("size %d", e.Size)
	}
	return fmt.Sprintf("message of %d bytes exceeds msize %d", e.Size, e.Max)
}

// Refuse wraps a *SizeError as the relay's own malformed-message error
// (malformed); any other error, the connection's, passes unchanged.
func Refuse(err, malformed error) error {
	var se *SizeError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: %v", malformed, err)
	}
	return err
}

// PeekSize returns the size the next message in br claims (its first four
// bytes, left in br) once it lies in [HeaderSize, max], else a
// *SizeError. At the end of the input it returns io.EOF, or
// io.ErrUnexpectedEOF if a message had begun.
func PeekSize(br *bufio.Reader, max uint32) (uint32, error) {
	hdr, err := br.Peek(4)
	if err != nil {
		if err == io.EOF && br.Buffered() > 0 {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	size := binary.LittleEndian.Uint32(hdr)
	if size < HeaderSize || size > max {
		return 0, &SizeError{Size: size, Max: max}
	}
	return size, nil
}

// ReadMessage reads the next message whole once PeekSize accepts its
// size: into buf when buf has room for it, else into a new slice, so that
// a peer's claimed size never allocates more than max. A message cut
// short is io.ErrUnexpectedEOF.
func ReadMessage(br *bufio.Reader, max uint32, buf []byte) ([]byte, error) {
	size, err := PeekSize(br, max)
	if err != nil {
		return nil, err
	}
	if uint32(cap(buf)) < size {
		buf = make([]byte, size)
	}
	f := buf[:size]
	if _, err := io.ReadFull(br, f); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f, nil
}

// A Header is what every message begins with after its size.
type Header struct {
	Type uint8
	Tag  uint16
}

// Split returns the header of the whole message f and a Parser of the
// fields after it. ok is false unless f is a message: at least HeaderSize
// bytes, as many as its size field says.
func Split(f []byte) (h Header, p Parser, ok bool) {
	if len(f) < HeaderSize || binary.LittleEndian.Uint32(f) != uint32(len(f)) {
		return Header{}, Parser{}, false
	}
	return Header{Type: f[4], Tag: binary.LittleEndian.Uint16(f[5:7])}, NewParser(f[HeaderSize:]), true
}

// UsesFid reports whether a request of type typ acts on an existing fid,
// the one in its fid field.
func UsesFid(typ uint8) bool {
	switch typ {
	case plan9.Twalk, plan9.Topen, plan9.Tcreate, plan9.Tread, plan9.Twrite,
		plan9.Tclunk, plan9.Tremove, plan9.Tstat, plan9.Twstat:
		return true
	}
	return false
}

// A Parser reads a message's fields in order, little-endian as 9P has
// them. A read past the end yields zeros and marks the parser Bad, so
// that a caller reads every field of a message and checks once, at the
// end, with Done. The zero Parser has nothing to read.
type Parser struct {
	b   []byte
	bad bool
}

// NewParser returns a parser of b, usually a message after its header.
func NewParser(b []byte) Parser { return Parser{b: b} }

// Done reports whether the message was exactly its fields: no read went
// past its end, and nothing is left over.
func (p *Parser) Done() bool { return !p.bad && len(p.b) == 0 }

// Take returns the next n bytes, aliasing the message (with no room to
// append into it). Past the end, or for a negative n, it returns zeros:
// n of them, but never more than 8 whatever length a peer claimed.
func (p *Parser) Take(n int) []byte {
	if n < 0 || len(p.b) < n {
		p.bad = true
		p.b = nil
		return make([]byte, min(max(n, 0), 8))
	}
	v := p.b[:n:n]
	p.b = p.b[n:]
	return v
}

// Skip passes over n bytes.
func (p *Parser) Skip(n int) { p.Take(n) }

func (p *Parser) U8() uint8   { return p.Take(1)[0] }
func (p *Parser) U16() uint16 { return binary.LittleEndian.Uint16(p.Take(2)) }
func (p *Parser) U32() uint32 { return binary.LittleEndian.Uint32(p.Take(4)) }
func (p *Parser) U64() uint64 { return binary.LittleEndian.Uint64(p.Take(8)) }

// Str reads a string: its length[2], then its bytes. Past the end it
// returns "".
func (p *Parser) Str() string {
	s := p.Take(int(p.U16()))
	if p.bad {
		return ""
	}
	return string(s)
}

// Qid reads a qid: type[1] vers[4] path[8].
func (p *Parser) Qid() plan9.Qid {
	return plan9.Qid{Type: p.U8(), Vers: p.U32(), Path: p.U64()}
}

// Decode parses a whole 9P2000 message strictly: every field present,
// nothing left over, counts within the protocol's bounds. Unlike
// plan9.UnmarshalFcall it prints nothing, so that a peer sending garbage
// cannot fill a log. Data and Stat alias f. Its error says what was wrong,
// for the relay to wrap in its own.
func Decode(f []byte) (*plan9.Fcall, error) {
	h, p, ok := Split(f)
	if !ok {
		return nil, errors.New("shorter than its header")
	}
	m := &plan9.Fcall{Type: h.Type, Tag: h.Tag}
	switch m.Type {
	case plan9.Tversion, plan9.Rversion:
		m.Msize = p.U32()
		m.Version = p.Str()
	case plan9.Tauth:
		m.Afid = p.U32()
		m.Uname, m.Aname = p.Str(), p.Str()
	case plan9.Tattach:
		m.Fid, m.Afid = p.U32(), p.U32()
		m.Uname, m.Aname = p.Str(), p.Str()
	case plan9.Tflush:
		m.Oldtag = p.U16()
	case plan9.Twalk:
		m.Fid, m.Newfid = p.U32(), p.U32()
		n := int(p.U16())
		if n > plan9.MAXWELEM {
			return nil, fmt.Errorf("walk of %d names", n)
		}
		m.Wname = make([]string, n)
		for i := range m.Wname {
			m.Wname[i] = p.Str()
		}
	case plan9.Topen:
		m.Fid, m.Mode = p.U32(), p.U8()
	case plan9.Tcreate:
		m.Fid = p.U32()
		m.Name = p.Str()
		m.Perm = plan9.Perm(p.U32())
		m.Mode = p.U8()
	case plan9.Tread:
		m.Fid, m.Offset, m.Count = p.U32(), p.U64(), p.U32()
	case plan9.Twrite:
		m.Fid, m.Offset = p.U32(), p.U64()
		m.Data = p.Take(int(p.U32()))
	case plan9.Tclunk, plan9.Tremove, plan9.Tstat:
		m.Fid = p.U32()
	case plan9.Twstat:
		m.Fid = p.U32()
		m.Stat = p.Take(int(p.U16()))
	case plan9.Rerror:
		m.Ename = p.Str()
	case plan9.Rflush, plan9.Rclunk, plan9.Rremove, plan9.Rwstat:
	case plan9.Rauth:
		m.Aqid = p.Qid()
	case plan9.Rattach:
		m.Qid = p.Qid()
	case plan9.Rwalk:
		n := int(p.U16())
		if n > plan9.MAXWELEM {
			return nil, fmt.Errorf("walk of %d qids", n)
		}
		m.Wqid = make([]plan9.Qid, n)
		for i := range m.Wqid {
			m.Wqid[i] = p.Qid()
		}
	case plan9.Ropen, plan9.Rcreate:
		m.Qid = p.Qid()
		m.Iounit = p.U32()
	case plan9.Rread:
		m.Data = p.Take(int(p.U32()))
	case plan9.Rwrite:
		m.Count = p.U32()
	case plan9.Rstat:
		m.Stat = p.Take(int(p.U16()))
	default:
		return nil, fmt.Errorf("type %d", m.Type)
	}
	if !p.Done() {
		return nil, fmt.Errorf("%s of %d bytes", TypeName(m.Type), len(f))
	}
	return m, nil
}

// TypeName names a message type for errors and logs.
func TypeName(t uint8) string {
	if t >= plan9.Tversion && t < plan9.Tmax {
		names := [...]string{"Tversion", "Rversion", "Tauth", "Rauth", "Tattach", "Rattach",
			"Terror", "Rerror", "Tflush", "Rflush", "Twalk", "Rwalk", "Topen", "Ropen",
			"Tcreate", "Rcreate", "Tread", "Rread", "Twrite", "Rwrite", "Tclunk", "Rclunk",
			"Tremove", "Rremove", "Tstat", "Rstat", "Twstat", "Rwstat"}
		return names[t-plan9.Tversion]
	}
	return fmt.Sprintf("type %d", t)
}

// IsRequest reports whether t is a T-message a client may send.
func IsRequest(t uint8) bool {
	return t >= plan9.Tversion && t < plan9.Tmax && t%2 == 0 && t != plan9.Terror
}
