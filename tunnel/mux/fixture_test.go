package mux_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/nstest"
	"ollie/ns"
	"ollie/ns/client"
	"ollie/ns/stream"
	"ollie/tunnel/mux"
)

// A host is a real ns.Server on a Unix socket, serving a small tree with a
// file of each kind, as a held host's namespace would:
//
//	name              read: the host's name
//	upper             rdwr: the request in capitals
//	chat              stream
//	wait              wait: blocks until release is closed, or the read is flushed
//	session/S/agent/A/state   read: "S A NAME"
//	event             subscribe: write patterns, read the events of bus
type host struct {
	name    string
	sock    string
	bus     ns.Bus
	chat    *stream.Stream
	release chan struct{}
	waiting chan struct{} // a wait read has started (if not full)
	flushed chan struct{} // a wait read was interrupted (by a Tflush)

	mu  sync.Mutex
	srv *ns.Server
	ln  *net.UnixListener
}

func newHost(t *testing.T, dir, name string) *host {
	h := &host{name: name, sock: filepath.Join(dir, name), chat: stream.NewStream(0),
		release: make(chan struct{}), waiting: make(chan struct{}, 16), flushed: make(chan struct{}, 16)}
	h.start(t)
	t.Cleanup(h.stop)
	return h
}

func (h *host) tree(t *testing.T) *ns.Tree {
	t.Helper()
	list := func(names ...string) *ns.Each {
		return ns.Listing(func(context.Context, *ns.Call) ([]string, error) { return names, nil },
			func(s string) ns.Entry { return ns.Entry{Name: s, Key: s} })
	}
	root := ns.Dir("", 0555, "",
		ns.ReadFile("name", 0444, "", func(context.Context, *ns.Call) ([]byte, error) {
			return []byte(h.name + "\n"), nil
		}),
		ns.RdWrFile("upper", 0666, "", func(_ context.Context, _ *ns.Call, req []byte) ([]byte, error) {
			return append([]byte(h.name+" "), bytes.ToUpper(req)...), nil
		}),
		ns.StreamFile("chat", 0444, "", func(context.Context, *ns.Call) (*stream.Stream, error) { return h.chat, nil }),
		ns.WaitFile("wait", 0444, "", func(ctx context.Context, _ *ns.Call) ([]byte, error) {
			select {
			case h.waiting <- struct{}{}:
			default:
			}
			select {
			case <-h.release:
				return []byte(h.name + " released\n"), nil
			case <-ctx.Done():
				h.flushed <- struct{}{}
				return nil, ctx.Err()
			}
		}),
		&ns.Node{Name: "event", Mode: 0666, Subscribe: func(_ context.Context, _ *ns.Call, filter []byte) (ns.Source, error) {
			return h.bus.Subscribe(strings.Fields(string(filter))...), nil
		}},
		ns.Dir("session", 0555, "",
			ns.Dynamic("s", 0555, "", list("s1", "s2"),
				ns.Dir("agent", 0555, "",
					ns.Dynamic("a", 0555, "", list("a1", "a2"),
						ns.ReadFile("state", 0444, "", func(_ context.Context, c *ns.Call) ([]byte, error) {
							return fmt.Appendf(nil, "%s %s %s\n", c.Key("s"), c.Key("a"), h.name), nil
						}))))))
	tree, err := ns.NewTree(root, "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func (h *host) start(t *testing.T) {
	t.Helper()
	os.Remove(h.sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: h.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: h.tree(t)}
	h.mu.Lock()
	h.srv, h.ln = srv, ln
	h.mu.Unlock()
	go srv.ServeUnix(ln)
}

// stop ends the host's server and every connection to it.
func (h *host) stop() {
	h.mu.Lock()
	srv := h.srv
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}

// A fleet is the desktop's side: a local tree with host/ listing the
// hosts, the hosts, and a Mux serving them all on a Unix socket.
type fleet struct {
	dir   string
	sock  string
	hosts map[string]*host
	mux   *mux.Mux

	mu     sync.Mutex
	mounts map[string]string // host name → socket; a missing socket is a host that is down
}

func newFleet(t *testing.T, names ...string) *fleet {
	t.Helper()
	dir := nstest.ShortTempDir(t)
	f := &fleet{dir: dir, sock: filepath.Join(dir, "fleet"), hosts: map[string]*host{}, mounts: map[string]string{}}
	for _, n := range names {
		f.hosts[n] = newHost(t, dir, n)
		f.mounts[n] = f.hosts[n].sock
	}
	// "down" is held but unreachable.
	f.mounts["down"] = filepath.Join(dir, "nothing-here")

	hostNames := func(ctx context.Context, c *ns.Call) ([]string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var ns []string
		for n := range f.mounts {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		return ns, nil
	}
	root := ns.Dir("", 0555, "",
		ns.ReadFile("idx", 0444, "", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			hs, _ := hostNames(ctx, c)
			return fmt.Appendf(nil, "%v\n", hs), nil
		}),
		ns.Dir("host", 0555, "",
			ns.Dynamic("h", 0555, "", ns.Listing(hostNames, func(s string) ns.Entry { return ns.Entry{Name: s, Key: s} }))))
	tree, err := ns.NewTree(root, "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	localSock := filepath.Join(dir, "local")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: localSock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	local := &ns.Server{Tree: tree}
	go local.ServeUnix(ln)
	t.Cleanup(func() { local.Shutdown(context.Background()) })

	f.mux = &mux.Mux{
		Local:            unixDialer(localSock),
		Mount:            f.mount,
		HandshakeTimeout: 2 * time.Second,
	}
	mln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.mux.Serve(mln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.mux.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, mux.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return f
}

func (f *fleet) mount(path []string) (func(context.Context) (net.Conn, error), bool) {
	if len(path) != 2 || path[0] != "host" {
		return nil, false
	}
	f.mu.Lock()
	sock, ok := f.mounts[path[1]]
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	return unixDialer(sock), true
}

// setMount points the mount of host name at sock.
func (f *fleet) setMount(name, sock string) {
	f.mu.Lock()
	f.mounts[name] = sock
	f.mu.Unlock()
}

func unixDialer(sock string) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
}

// dial connects to the fleet namespace with ns/client.
func (f *fleet) dial(t testing.TB) *client.Conn {
	t.Helper()
	c, err := client.DialAs(f.sock, "glenda")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func names(t *testing.T, c *client.Conn, path string) []string {
	t.Helper()
	dirs, err := c.Ls(context.Background(), path)
	if err != nil {
		t.Fatalf("ls %s: %v", path, err)
	}
	var ns []string
	for _, d := range dirs {
		ns = append(ns, d.Name)
	}
	slices.Sort(ns)
	return ns
}

func read(t *testing.T, c *client.Conn, path string) string {
	t.Helper()
	b, err := c.ReadAll(context.Background(), path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}
