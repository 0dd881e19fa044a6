package client

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/ns/nsdir"
)

// recorder is a Unix socket that speaks no 9P: it counts the connections
// it accepts and the bytes they bring, as a squatter would.
type recorder struct {
	mu    sync.Mutex
	conns int
	bytes int
	open  int // connections accepted and not yet read to their end
}

func record(t *testing.T, sock string) *recorder {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns++
			r.open++
			r.mu.Unlock()
			go func() {
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.Copy(io.Discard, c)
				r.mu.Lock()
				r.bytes += int(n)
				r.open--
				r.mu.Unlock()
			}()
		}
	}()
	return r
}

// got waits for the connections' ends and returns what they brought.
func (r *recorder) got() (conns, bytes int) { return r.gotAfter(0) }

// gotAfter is got once want connections have been accepted (or 6 s have
// passed): a client that connected and hung up may be done before the
// listener's Accept returns.
func (r *recorder) gotAfter(want int) (conns, bytes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	await.Poll(ctx, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.conns >= want && r.open == 0
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns, r.bytes
}

// shortDir is a fresh directory of mode 0700 whose path suits a socket.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// The namespace's own socket is not dialled unless its directory is the
// user's, real and private: whoever listens there gets no connection.
func TestDialChecksNamespaceDir(t *testing.T) {
	setups := map[string]func(t *testing.T) (ns string, want error){
		"open to others": func(t *testing.T) (string, error) {
			dir := shortDir(t)
			os.Chmod(dir, 0777)
			return dir, nsdir.ErrNotPrivate
		},
		"readable by others": func(t *testing.T) (string, error) {
			dir := shortDir(t)
			os.Chmod(dir, 0755)
			return dir, nsdir.ErrNotPrivate
		},
		"a symbolic link": func(t *testing.T) (string, error) {
			dir := shortDir(t)
			link := filepath.Join(shortDir(t), "l")
			if err := os.Symlink(dir, link); err != nil {
				t.Fatal(err)
			}
			return link, nsdir.ErrSymlink
		},
		"another user's": func(t *testing.T) (string, error) {
			if os.Geteuid() != 0 {
				t.Skip("giving a directory away needs root")
			}
			dir := shortDir(t)
			os.Chmod(dir, 0777)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir, nsdir.ErrNotYours
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			dir, want := setup(t)
			t.Setenv("NAMESPACE", dir)
			r := record(t, filepath.Join(dir, nsdir.Service))
			// By default, and named.
			for _, addr := range []string{"", nsdir.SocketPath(), "unix!" + nsdir.SocketPath()} {
				_, err := DialTimeout(addr, "", time.Second)
				var de *DialError
				if !errors.As(err, &de) || !errors.Is(err, want) || !IsUntrusted(err) {
					t.Errorf("dial %q: %v, want a *DialError wrapping %v", addr, err, want)
					continue
				}
				if !strings.HasPrefix(err.Error(), "ollie: namespace directory "+dir) {
					t.Errorf("dial %q: %q does not name the directory", addr, err)
				}
			}
			if conns, n := r.got(); conns != 0 || n != 0 {
				t.Errorf("the socket got %d connections and %d bytes", conns, n)
			}
		})
	}
}

// A Unix socket whose other end runs as another user is closed before a
// byte is sent to it. (The lab test in ns/nsdir plays it with a real
// other user; here peerUID stands one in.)
func TestDialChecksPeer(t *testing.T) {
	other := os.Geteuid() + 4242
	peerUID = func(net.Conn) (int, error) { return other, nil }
	t.Cleanup(func() { peerUID = defaultPeerUID })

	dir := shortDir(t)
	t.Setenv("NAMESPACE", dir)
	r := record(t, filepath.Join(dir, nsdir.Service))
	_, err := DialTimeout("", "", time.Second)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.UID != other || !IsUntrusted(err) {
		t.Fatalf("dial: %v, want a *PeerError for uid %d", err, other)
	}
	if !strings.Contains(err.Error(), "served by uid") || !strings.Contains(err.Error(), "nothing was sent") {
		t.Errorf("%q does not say who serves it", err)
	}
	if conns, n := r.gotAfter(1); conns != 1 || n != 0 {
		t.Errorf("the socket got %d connections and %d bytes, want 1 and 0", conns, n)
	}

	// A peer whose uid cannot be read is refused too.
	peerUID = func(net.Conn) (int, error) { return -1, errors.New("no credentials") }
	if _, err := DialTimeout("", "", time.Second); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Errorf("dial with no credentials: %v", err)
	}
}

// Who may serve whom: the user's own uid only, except that root may name
// another user's socket (not its own namespace's).
func TestAdmitPeer(t *testing.T) {
	for _, tt := range []struct {
		peer, me int
		ownNS    bool
		want     bool
	}{
		{1000, 1000, true, true},
		{1000, 1000, false, true},
		{1002, 1000, true, false},
		{1002, 1000, false, false},
		{0, 1000, true, false}, // a root-run server is not the user's
		{0, 1000, false, false},
		{0, 0, true, true},
		{1000, 0, false, true}, // root attaching to a user's daemon
		{1000, 0, true, false}, // but not in root's own namespace
	} {
		if got := admitPeer(tt.peer, tt.me, tt.ownNS); got != tt.want {
			t.Errorf("admitPeer(peer %d, me %d, ownNS %v) = %v, want %v", tt.peer, tt.me, tt.ownNS, got, tt.want)
		}
	}
}
