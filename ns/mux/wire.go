package mux

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"9fans.net/go/plan9"
)

// errMalformed reports a message that does not parse, or a size outside
// what was negotiated. From a client it ends the client's connection; from
// a mount it ends that mount's connection.
var errMalformed = errors.New("mux: malformed 9P message")

// preVersionMax bounds messages before Tversion settles msize: only
// Tversion and Rversion, both small, are legal then.
const preVersionMax = 8 << 10

// readFrame reads one 9P message whose size lies in [7, max]. The bytes
// are its own: decode's fields may alias them.
func readFrame(br *bufio.Reader, max uint32) ([]byte, error) {
	hdr, err := br.Peek(4)
	if err != nil {
		if err == io.EOF && br.Buffered() > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	size := binary.LittleEndian.Uint32(hdr)
	if size < 7 {
		return nil, fmt.Errorf("%w: size %d", errMalformed, size)
	}
	if size > max {
		return nil, fmt.Errorf("%w: message of %d bytes exceeds msize %d", errMalformed, size, max)
	}
	f := make([]byte, size)
	if _, err := io.ReadFull(br, f); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f, nil
}

// decode parses a whole 9P2000 message strictly: every field present,
// nothing left over, counts within the protocol's bounds. Unlike
// plan9.UnmarshalFcall it prints nothing, so that a peer sending garbage
// cannot fill a log. Data and Stat alias f.
func decode(f []byte) (*plan9.Fcall, error) {
	if len(f) < 7 || binary.LittleEndian.Uint32(f) != uint32(len(f)) {
		return nil, errMalformed
	}
	m := &plan9.Fcall{Type: f[4], Tag: binary.LittleEndian.Uint16(f[5:7])}
	p := parser{b: f[7:]}
	switch m.Type {
	case plan9.Tversion, plan9.Rversion:
		m.Msize = p.u32()
		m.Version = p.str()
	case plan9.Tauth:
		m.Afid = p.u32()
		m.Uname, m.Aname = p.str(), p.str()
	case plan9.Tattach:
		m.Fid, m.Afid = p.u32(), p.u32()
		m.Uname, m.Aname = p.str(), p.str()
	case plan9.Tflush:
		m.Oldtag = p.u16()
	case plan9.Twalk:
		m.Fid, m.Newfid = p.u32(), p.u32()
		n := int(p.u16())
		if n > plan9.MAXWELEM {
			return nil, fmt.Errorf("%w: walk of %d names", errMalformed, n)
		}
		m.Wname = make([]string, n)
		for i := range m.Wname {
			m.Wname[i] = p.str()
		}
	case plan9.Topen:
		m.Fid, m.Mode = p.u32(), p.u8()
	case plan9.Tcreate:
		m.Fid = p.u32()
		m.Name = p.str()
		m.Perm = plan9.Perm(p.u32())
		m.Mode = p.u8()
	case plan9.Tread:
		m.Fid, m.Offset, m.Count = p.u32(), p.u64(), p.u32()
	case plan9.Twrite:
		m.Fid, m.Offset = p.u32(), p.u64()
		m.Data = p.take(int(p.u32()))
	case plan9.Tclunk, plan9.Tremove, plan9.Tstat:
		m.Fid = p.u32()
	case plan9.Twstat:
		m.Fid = p.u32()
		m.Stat = p.take(int(p.u16()))
	case plan9.Rerror:
		m.Ename = p.str()
	case plan9.Rflush, plan9.Rclunk, plan9.Rremove, plan9.Rwstat:
	case plan9.Rauth:
		m.Aqid = p.qid()
	case plan9.Rattach:
		m.Qid = p.qid()
	case plan9.Rwalk:
		n := int(p.u16())
		if n > plan9.MAXWELEM {
			return nil, fmt.Errorf("%w: walk of %d qids", errMalformed, n)
		}
		m.Wqid = make([]plan9.Qid, n)
		for i := range m.Wqid {
			m.Wqid[i] = p.qid()
		}
	case plan9.Ropen, plan9.Rcreate:
		m.Qid = p.qid()
		m.Iounit = p.u32()
	case plan9.Rread:
		m.Data = p.take(int(p.u32()))
	case plan9.Rwrite:
		m.Count = p.u32()
	case plan9.Rstat:
		m.Stat = p.take(int(p.u16()))
	default:
		return nil, fmt.Errorf("%w: type %d", errMalformed, m.Type)
	}
	if p.bad || len(p.b) != 0 {
		return nil, fmt.Errorf("%w: %s of %d bytes", errMalformed, typeName(m.Type), len(f))
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
		return make([]byte, 8) // zeros for the fixed-size fields
	}
	v := p.b[:n:n]
	p.b = p.b[n:]
	return v
}

func (p *parser) u8() uint8   { return p.take(1)[0] }
func (p *parser) u16() uint16 { return binary.LittleEndian.Uint16(p.take(2)) }
func (p *parser) u32() uint32 { return binary.LittleEndian.Uint32(p.take(4)) }
func (p *parser) u64() uint64 { return binary.LittleEndian.Uint64(p.take(8)) }
func (p *parser) str() string {
	n := int(p.u16())
	if p.bad {
		return ""
	}
	return string(p.take(n))
}

func (p *parser) qid() plan9.Qid {
	return plan9.Qid{Type: p.u8(), Vers: p.u32(), Path: p.u64()}
}

// typeName names a message type for errors and logs.
func typeName(t uint8) string {
	if t >= plan9.Tversion && t < plan9.Tmax {
		names := [...]string{"Tversion", "Rversion", "Tauth", "Rauth", "Tattach", "Rattach",
			"Terror", "Rerror", "Tflush", "Rflush", "Twalk", "Rwalk", "Topen", "Ropen",
			"Tcreate", "Rcreate", "Tread", "Rread", "Twrite", "Rwrite", "Tclunk", "Rclunk",
			"Tremove", "Rremove", "Tstat", "Rstat", "Twstat", "Rwstat"}
		return names[t-plan9.Tversion]
	}
	return fmt.Sprintf("type %d", t)
}

// isRequest reports whether t is a T-message a client may send.
func isRequest(t uint8) bool {
	return t >= plan9.Tversion && t < plan9.Tmax && t%2 == 0 && t != plan9.Terror
}

// Offsets into an encoded Dir (size[2] type[2] dev[4] qid[13] ...): the
// qid's path, patched in place for a mount's qids.
const (
	dirQidPath = 2 + 2 + 4 + 1 + 4
	dirFixLen  = 2 + 2 + 4 + 13 + 4 + 4 + 4 + 8 + 4*2 // STATFIXLEN
)

// mapDirs applies fn to the qid path of every directory entry in data, in
// place. Entries must be whole, as 9P requires of a directory read.
func mapDirs(data []byte, fn func(uint64) uint64) error {
	for len(data) > 0 {
		if len(data) < 2 {
			return fmt.Errorf("%w: a directory entry cut short", errMalformed)
		}
		n := int(binary.LittleEndian.Uint16(data)) + 2
		if n < dirFixLen || n > len(data) {
			return fmt.Errorf("%w: a directory entry of %d bytes in %d", errMalformed, n, len(data))
		}
		q := data[dirQidPath : dirQidPath+8]
		binary.LittleEndian.PutUint64(q, fn(binary.LittleEndian.Uint64(q)))
		data = data[n:]
	}
	return nil
}

// encode returns m's bytes. Only the mux's own messages, and messages
// decoded under the same limits, are encoded, so an error is a bug; it
// still becomes an error rather than a panic.
func encode(m *plan9.Fcall) (b []byte, err error) {
	defer func() {
		if recover() != nil {
			b, err = nil, fmt.Errorf("mux: cannot encode %s", typeName(m.Type))
		}
	}()
	return m.Bytes()
}
