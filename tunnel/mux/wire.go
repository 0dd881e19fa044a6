package mux

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"

	"9fans.net/go/plan9"

	"ollie/ns/ninep"
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
	f, err := ninep.ReadMessage(br, max, nil)
	if err != nil {
		return nil, malformed(err)
	}
	return f, nil
}

// malformed names a size that ninep refused as the mux's malformed
// message; other errors (the connection's) pass unchanged.
func malformed(err error) error {
	var se *ninep.SizeError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return err
}

// decode parses a whole 9P2000 message strictly: every field present,
// nothing left over, counts within the protocol's bounds. Unlike
// plan9.UnmarshalFcall it prints nothing, so that a peer sending garbage
// cannot fill a log. Data and Stat alias f.
func decode(f []byte) (*plan9.Fcall, error) {
	h, p, ok := ninep.Split(f)
	if !ok {
		return nil, errMalformed
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
			return nil, fmt.Errorf("%w: walk of %d names", errMalformed, n)
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
			return nil, fmt.Errorf("%w: walk of %d qids", errMalformed, n)
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
		return nil, fmt.Errorf("%w: type %d", errMalformed, m.Type)
	}
	if !p.Done() {
		return nil, fmt.Errorf("%w: %s of %d bytes", errMalformed, typeName(m.Type), len(f))
	}
	return m, nil
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
