package ns

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// sockIO reads requests from a connected socket and writes replies to it
// with raw system calls.
//
// syscall.Read and friends announce each call to the runtime
// (entersyscall), and when every P is idle, as in a server between two
// requests of a client that keeps one in flight, that wakes sysmon from
// its deep sleep: a futex wake on the request's path, then sysmon's own
// thread runs, sleeps 20 µs, finds nothing to do and sleeps again. On the
// benchmarks' 2-core VM that was a fifth to a third of the server's CPU
// for each 128 KiB Rread and one of its three context switches
// (docs/benchmarks.md, issue 33). The socket is non-blocking (the runtime's poller waits for
// it), so a read or write returns at once and needs no announcing; going
// through the connection's syscall.RawConn keeps the poller's waiting,
// deadlines and Close as they are.
type sockIO struct {
	rc  syscall.RawConn
	iov [2]syscall.Iovec // writev's, under guard.wmu
}

// newSockIO returns a sockIO for conn if it is a socket, else nil.
func newSockIO(conn io.ReadWriteCloser) *sockIO {
	switch conn.(type) {
	case *net.UnixConn, *net.TCPConn:
	default:
		return nil
	}
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	return &sockIO{rc: rc}
}

// Read reads into p as the connection's Read does.
func (s *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case 0:
				n = int(r)
				raceAcquireIO(fd)
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // the poller waits for more
			default:
				errno = e
			}
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// writev writes hdr, then data (which may be nil), as one write, and
// returns when all of it is written or the connection fails.
func (s *sockIO) writev(hdr, data []byte) (int, error) {
	iov := s.iov[:0]
	for _, b := range [2][]byte{hdr, data} {
		if len(b) > 0 {
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	// Let go of the buffers once written: a stream's may be large.
	defer clear(s.iov[:])
	raceReleaseIO()
	total := 0
	var errno syscall.Errno
	err := s.rc.Write(func(fd uintptr) bool {
		for len(iov) > 0 {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
			switch e {
			case 0:
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // the poller waits for room
			default:
				errno = e
				return true
			}
			n := int(r)
			total += n
			for len(iov) > 0 && n >= int(iov[0].Len) {
				n -= int(iov[0].Len)
				iov = iov[1:]
			}
			if n > 0 {
				iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), n))
				iov[0].SetLen(int(iov[0].Len) - n)
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("writev", errno)
	}
	return total, err
}
