//go:build !linux

package ns

import (
	"io"
	"net"
)

// sockIO reads and writes a connected socket through the connection
// itself; on Linux (sockio_linux.go) it skips the runtime's announcing of
// each system call.
type sockIO struct{ conn net.Conn }

// newSockIO returns a sockIO for conn if it is a socket, else nil.
func newSockIO(conn io.ReadWriteCloser) *sockIO {
	switch c := conn.(type) {
	case *net.UnixConn:
		return &sockIO{c}
	case *net.TCPConn:
		return &sockIO{c}
	}
	return nil
}

func (s *sockIO) Read(p []byte) (int, error) { return s.conn.Read(p) }

// writev writes hdr, then data (which may be nil), as one write.
func (s *sockIO) writev(hdr, data []byte) (int, error) {
	bufs := net.Buffers{hdr, data}
	n, err := bufs.WriteTo(s.conn)
	return int(n), err
}
