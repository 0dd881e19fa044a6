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

// malformed is ninep.Refuse with this package's malformed message.
func malformed(err error) error { return ninep.Refuse(err, errMalformed) }

// decode is ninep.Decode with its failures the mux's malformed message.
func decode(f []byte) (*plan9.Fcall, error) {
	m, err := ninep.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return m, nil
}

// typeName and isRequest are ninep's, named here for brevity.
var (
	typeName  = ninep.TypeName
	isRequest = ninep.IsRequest
)

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
