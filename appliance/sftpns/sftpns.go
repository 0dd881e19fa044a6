// Package sftpns serves the ollie namespace over SFTP: the `sftp`
// subsystem of olliesrv's SSH listener, for people who would rather mount
// the namespace with sshfs, or use any SFTP client, than learn a 9P client.
//
// It is a github.com/pkg/sftp request server whose handlers are calls on
// ns/client: each SFTP session has one 9P connection for listings, stats
// and setstats (and the fids of files open only for writing), and each
// file handle that reads a 9P connection and fid of its own, held for the
// handle's life. The listener decides how to dial (as
// the SSH key's principal); the namespace decides what that principal may
// do. The package trusts the namespace and nothing the SFTP client sends:
// handles, assembled requests and replies are bounded.
//
// How the namespace's files look through SFTP:
//
//   - Directories list with their 9P modes, owners as the listener's own
//     uid and gid, and 9P mtimes; a listing reports 9P's lengths (0 for
//     files not open), while a stat (and an fstat) of a file opens it and
//     reports the open fid's length: a snapshot's size, or how much of a
//     stream has been written so far, so that `tail -f` over sshfs sees a
//     chat grow. That open runs a snapshot's handler; one that takes more
//     than 250 ms leaves the length 0. Mount with sshfs's `-o direct_io`
//     so that the kernel reads a file whatever length it was told, and
//     `dir_cache=no` so that a new session shows in `ls` at once
//     (SSHFSOptions says why).
//   - A snapshot file (Read) reads by offset from the snapshot its handle
//     took at open.
//   - A stream (chat, event, proc/*/out) reads by offset as it grows. A
//     read at the stream's end waits up to Server.StreamWait (default
//     DefaultStreamWait) for more and answers what came, or EOF if nothing
//     did; a read past the end answers EOF at once. So `cat` and `get`
//     end StreamWait after the last byte, and a client that reads again at
//     the same offset later (tail -f, sshfs) follows the stream. A wait
//     file reads likewise: empty unless it changes within StreamWait.
//     pkg/sftp answers a session's requests in the order they came, so
//     while a read waits at a stream's end the session's later answers
//     wait too: StreamWait is short for that reason.
//   - A write-only handle (open for writing without reading, as a shell's
//     `echo prompt > FILE` makes through sshfs) assembles its writes by
//     offset and sends them as one request at close: one SFTP upload is
//     one namespace request, however the client cut it into packets. The
//     request's error is the close's. Truncation (setstat of size 0) and
//     setting times are accepted and do nothing where the file takes
//     writes.
//   - A read-write handle (an rdwr or subscription file) sends its
//     assembled writes as one request at the first read after them, and
//     serves the reply by offset, starting where the request started (a
//     client that seeks back to read it) or where it ended (one that
//     reads on, as a shell's `exec 3<>FILE` does), whichever the first
//     read asks at. Writing again starts the next request on the same
//     fid.
//
// What SFTP asks for and the namespace has no answer to is refused:
// rename, remove, mkdir, rmdir, links and symlinks (readlink included)
// answer "operation unsupported" (SSH_FX_OP_UNSUPPORTED); setstat of
// modes, owners or a non-zero size, and any write when Server.ReadOnly is
// set, answer "permission denied". Opening a file that does not exist for
// writing does not create it: no such file.
package sftpns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/pkg/sftp"

	"ollie/ns/client"
)

// SSHFSOptions are the sshfs options the namespace wants, as README
// gives them: `sshfs -p 2222 HOST:/ mnt -o ` + SSHFSOptions.
//
// direct_io makes the kernel read a file whatever length its stat said.
// dir_cache=no turns off sshfs's directory cache, which keeps a listing
// for dcache_timeout (20 s) on its own clock: nothing an SFTP server
// sends ends it early (sshfs looks at no directory's mtime, and drops an
// entry only when it changes the directory itself), so a session made
// meanwhile, by anyone, would stay out of `ls` until then. A listing of
// the namespace is cheap to ask for again.
const SSHFSOptions = "direct_io,dir_cache=no"

// DefaultStreamWait is how long a read at the end of a stream waits for
// more before it answers EOF, when Server.StreamWait is 0.
const DefaultStreamWait = 500 * time.Millisecond

// DefaultMaxHandles bounds a session's open file handles when
// Server.MaxHandles is 0. Each handle that reads holds a 9P connection:
// keep it below the namespace's cap on connections of the session's kind
// of peer (ns.Server.MaxOwnerConns and friends).
const DefaultMaxHandles = 16

// DefaultMaxRequest bounds a request assembled from a handle's writes, and
// a reply kept to serve by offset, when Server.MaxRequest is 0.
const DefaultMaxRequest = 4 << 20

// A Server serves SFTP sessions on the namespace. The zero value with Dial
// set is ready to use.
type Server struct {
	// Dial connects to the namespace as the session's principal. It is
	// called at the start of a session, at its first stat of a file (the
	// connection stats measure files on), and for each file the session
	// opens for reading (that connection is closed with the file).
	// Required.
	Dial func() (*client.Conn, error)

	// ReadOnly refuses every open for writing and every setstat, whatever
	// the namespace would allow the principal.
	ReadOnly bool

	// StreamWait is how long a read at the end of a stream waits for
	// more (see the package doc); 0 means DefaultStreamWait.
	StreamWait time.Duration

	// MaxHandles bounds the files a session holds open; 0 means
	// DefaultMaxHandles. Directory handles do not count: a listing is
	// read whole at opendir.
	MaxHandles int

	// MaxRequest bounds the bytes of one request assembled from writes,
	// and of a reply kept to serve by offset; 0 means DefaultMaxRequest.
	MaxRequest int
}

// Serve serves one SFTP session on rwc with the namespace dial reaches; see
// Server.Serve.
func Serve(rwc io.ReadWriteCloser, dial func() (*client.Conn, error)) error {
	return (&Server{Dial: dial}).Serve(rwc)
}

// Serve serves one SFTP session on rwc, an SSH channel of the `sftp`
// subsystem or any other stream, until the client ends it or rwc fails,
// and closes rwc. It returns nil when the client ended the session (with
// files open or not), else the error that ended it.
func (s *Server) Serve(rwc io.ReadWriteCloser) error {
	if s.Dial == nil {
		rwc.Close()
		return errors.New("sftpns: Server.Dial is nil")
	}
	conn, err := s.Dial()
	if err != nil {
		rwc.Close()
		return fmt.Errorf("sftpns: %w", err)
	}
	defer conn.Close()
	ss := &session{srv: s, conn: conn}
	defer ss.endMeasuring()
	h := sftp.Handlers{FileGet: ss, FilePut: ss, FileCmd: ss, FileList: ss}
	rs := sftp.NewRequestServer(rwc, h)
	err = rs.Serve()
	rs.Close()
	// The request server answers io.ErrUnexpectedEOF for a client that
	// left with files open: it ended the session all the same.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return fmt.Errorf("sftpns: %w", err)
}

func (s *Server) streamWait() time.Duration {
	if s.StreamWait > 0 {
		return s.StreamWait
	}
	return DefaultStreamWait
}

func (s *Server) maxHandles() int {
	if s.MaxHandles > 0 {
		return s.MaxHandles
	}
	return DefaultMaxHandles
}

func (s *Server) maxRequest() int {
	if s.MaxRequest > 0 {
		return s.MaxRequest
	}
	return DefaultMaxRequest
}

// A session is one SFTP session: its 9P connection and its open handles.
type session struct {
	srv  *Server
	conn *client.Conn

	// The connection stats measure files on (openLength), dialled at
	// the first, and whether a measurement runs on it.
	mmu   sync.Mutex
	mconn *client.Conn
	mbusy bool
	ended bool

	mu      sync.Mutex
	handles int
}

// errNotExist makes the namespace's "does not exist" the SFTP client's
// "no such file"; other errors reach the client as their text.
func errNotExist(err error) error {
	if client.IsNotExist(err) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: fs.ErrNotExist}
		}
		return fs.ErrNotExist
	}
	return err
}

// refuse is the answer to what the namespace cannot do, with code one of
// sftp's ErrSSHFx codes; the client sees the text and the code.
func refuse(op, path, why string, code error) error {
	return fmt.Errorf("sftpns: %s %s: %s: %w", op, path, why, code)
}

// reserve takes one of the session's handle slots.
func (ss *session) reserve(path string) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.handles >= ss.srv.maxHandles() {
		return fmt.Errorf("sftpns: open %s: this session already holds %d files open; close some", path, ss.handles)
	}
	ss.handles++
	return nil
}

func (ss *session) release() {
	ss.mu.Lock()
	ss.handles--
	ss.mu.Unlock()
}

// background is the context of calls on the session's connection. Not
// the SFTP request's: ending a context interrupts every call on the
// connection, and the session's calls share it. The session's end closes
// the connection, which ends its calls.
var background = context.Background()

// mode turns a 9P permission into a file mode.
func mode(d uint32, dir bool) os.FileMode {
	m := os.FileMode(d & 0777)
	if dir {
		m |= os.ModeDir
	}
	return m
}

// ensure the session implements what the request server looks for.
var (
	_ sftp.FileReader     = (*session)(nil)
	_ sftp.OpenFileWriter = (*session)(nil)
	_ sftp.FileCmder      = (*session)(nil)
	_ sftp.FileLister     = (*session)(nil)
)
