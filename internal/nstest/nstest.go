// Package nstest is what tests of the namespace share: a socket directory
// short enough for Unix sockets, attaching, and the read, write and rdwr
// round trips a client makes, each failing the test or returning the
// server's error as it came. Tests only.
package nstest

import (
	"bytes"
	"io"
	"ollie/toolsrv"
	"ollie/toolsrv/sandbox"
	"os"
	"sync"
	"testing"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"
)

// ShortTempDir returns a temporary directory with a path short enough for
// a Unix socket (t.TempDir paths can exceed 108 bytes), removed when the
// test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Attach dials the namespace socket sock and attaches as user, closing the
// connection when the test ends.
func Attach(t testing.TB, sock, user string) *client.Fsys {
	t.Helper()
	c, err := client.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fs, err := c.Attach(nil, user, "")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// ReadFile reads path to its end, failing the test on an error.
func ReadFile(t testing.TB, fs *client.Fsys, path string) string {
	t.Helper()
	s, err := TryRead(fs, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return s
}

// TryRead reads path to its end.
func TryRead(fs *client.Fsys, path string) (string, error) {
	f, err := fs.Open(path, plan9.OREAD)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// RdWr writes req to path and reads the answer on the same fid, as a
// request/response file wants.
func RdWr(fs *client.Fsys, path, req string) (string, error) {
	f, err := fs.Open(path, plan9.ORDWR)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write([]byte(req)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	return string(b), err
}

// WriteFile writes data to path in one Twrite.
func WriteFile(fs *client.Fsys, path, data string) error {
	f, err := fs.Open(path, plan9.OWRITE)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write([]byte(data))
	return err
}

// SyncBuffer is a bytes.Buffer safe for one writer and a poller: a
// process's output read while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Main is TestMain for a package whose tests start a daemon: the test
// binary is then what olliesrv re-executes itself as (the sandbox helper,
// a session's toolsrv), and no test touches the state directory of the
// person running it.
func Main(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	if toolsrv.IsChild() {
		toolsrv.ChildMain()
	}
	// Helper processes inherit the test's choice rather than make their own.
	if os.Getenv("OLLIE_TEST_STATE") != "" {
		code := m.Run()
		runAtExit()
		os.Exit(code)
	}
	state, err := os.MkdirTemp("", "ollie-test-state")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	os.Setenv("OLLIE_TEST_STATE", state)
	code := m.Run()
	runAtExit()
	os.RemoveAll(state)
	os.Exit(code)
}

var (
	atExitMu sync.Mutex
	atExit   []func()
)

// AtExit runs f when Main's tests have run, before the process exits:
// what a test process builds once for all its tests (a binary in a
// temporary directory) is removed then, not left behind in /tmp.
func AtExit(f func()) {
	atExitMu.Lock()
	defer atExitMu.Unlock()
	atExit = append(atExit, f)
}

func runAtExit() {
	atExitMu.Lock()
	fs := atExit
	atExit = nil
	atExitMu.Unlock()
	for _, f := range fs {
		f()
	}
}
