package resume

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"9fans.net/go/plan9"

	"ollie/ns/ninep"
)

// errMalformed reports a message that does not parse. A client that sends
// one is cut off: forwarding it would make the server end the connection,
// and resending it would do so again after every reconnect.
var errMalformed = errors.New("resume: malformed 9P message")

// preVersionMax bounds messages before Tversion settles msize: only
// Tversion and Rversion, both small, are legal then.
const preVersionMax = 64 << 10

// readBufSize is the read buffer of a connection that has carried a
// large message: large enough for ns's largest msize, so that messages
// are handed on from the buffer without a copy and a large read takes one
// system call, not several. A connection starts with smallBufSize and
// grows to it at its first message that does not fit: most connections
// (status, a fleet run's set-up and watch) never carry one, and two
// buffers of 264 KiB for each of them were a quarter of a keeper's CPU
// in a 1,000-host fleet run, and most of its memory after a status.
const (
	readBufSize  = 256<<10 + 8<<10
	smallBufSize = 16 << 10
)

// A frameReader reads 9P messages from a buffered connection.
type frameReader struct {
	r    io.Reader
	br   *bufio.Reader
	buf  []byte // for messages larger than br's buffer
	held int    // bytes of the last message, handed out in place, still in br
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, br: bufio.NewReaderSize(r, smallBufSize)}
}

// grow moves to a buffer of readBufSize, keeping what is buffered.
func (r *frameReader) grow() {
	pending, _ := r.br.Peek(r.br.Buffered())
	src := r.r
	if len(pending) > 0 {
		src = io.MultiReader(bytes.NewReader(bytes.Clone(pending)), r.r)
	}
	r.br = bufio.NewReaderSize(src, readBufSize)
}

// next returns the next message, valid until the following call. A size
// outside [7, max] is a protocol error.
func (r *frameReader) next(max uint32) ([]byte, error) {
	r.release()
	size, err := ninep.PeekSize(r.br, max)
	if err != nil {
		return nil, malformed(err)
	}
	if int(size) > r.br.Size() && int(size) <= readBufSize {
		r.grow()
	}
	if int(size) <= r.br.Size() {
		f, err := r.br.Peek(int(size))
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		r.held = int(size)
		return f, nil
	}
	f, err := ninep.ReadMessage(r.br, max, r.buf)
	if err != nil {
		return nil, malformed(err)
	}
	r.buf = f // kept, and grown when a larger message needs it
	return f, nil
}

// malformed is ninep.Refuse with this package's malformed message.
func malformed(err error) error { return ninep.Refuse(err, errMalformed) }

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
	fc, err := ninep.Decode(f)
	if err != nil {
		return tmsg{}, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if !ninep.IsRequest(fc.Type) {
		return tmsg{}, fmt.Errorf("%w: %s from a client", errMalformed, ninep.TypeName(fc.Type))
	}
	m := tmsg{
		typ: fc.Type, tag: fc.Tag, msize: fc.Msize, oldtag: fc.Oldtag,
		fid: fc.Fid, afid: fc.Afid, newfid: fc.Newfid,
		uname: fc.Uname, aname: fc.Aname, name: fc.Name, mode: fc.Mode,
	}
	if fc.Type == plan9.Tauth {
		m.fid, m.afid = fc.Afid, 0 // the fid a Tauth makes is its afid
	}
	if len(fc.Wname) > 0 {
		m.names = fc.Wname
	}
	return m, nil
}

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
