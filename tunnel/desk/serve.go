package desk

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"ollie/internal/paths"
	"ollie/internal/peer"
	"ollie/ns"
	"ollie/tunnel/mux"
)

// Name is the name ollie -H takes for the desktop's namespace: its socket
// sits beside the hosts' ones, as a host of that name would.
const Name = paths.FleetHost

// Socket is where the namespace of the keeper whose directory is dir
// listens.
func Socket(dir string) string { return paths.RemoteSocketIn(dir, Name) }

// Serve serves the namespace on Socket(dir) until ctx ends: the desktop's
// own tree, with each held host's namespace mounted at host/NAME (tunnel/mux).
//
// Only this desktop user, unsandboxed, is served: the namespace approves
// every host's pending requests, which a Landlock-sandboxed tool running
// on the desktop as the same user must not reach.
func Serve(ctx context.Context, dir string, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	me := "ollie"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	d, root := spec(cfg)
	tree, err := ns.NewTree(root, me, me)
	if err != nil {
		return err
	}
	srv := &ns.Server{Tree: tree, Log: cfg.Log}
	m := &mux.Mux{
		Log: cfg.Log,
		// The local tree is served in this process, over a socket pair,
		// to its owner.
		Local: func(ctx context.Context) (net.Conn, error) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			conns := make([]net.Conn, 2)
			for i, fd := range fds {
				f := os.NewFile(uintptr(fd), "desk")
				conns[i], err = net.FileConn(f)
				f.Close()
				if err != nil {
					if i == 1 {
						conns[0].Close()
					}
					return nil, err
				}
			}
			go srv.ServeConn(conns[1], ns.Peer{Kind: ns.Owner, PID: os.Getpid(), UID: os.Getuid()})
			return conns[0], nil
		},
		Mount: func(path []string) (func(ctx context.Context) (net.Conn, error), bool) {
			if len(path) != 2 || path[0] != "host" {
				return nil, false
			}
			h, ok := d.host(path[1])
			if !ok {
				return nil, false
			}
			return func(ctx context.Context) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, "unix", h.Socket)
			}, true
		},
	}
	sock := Socket(dir)
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process", sock)
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var refused sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if why := stranger(c); why != "" {
				refused.Do(func() { cfg.Log.Warn("the desktop's namespace: a connection refused", "why", why) })
				c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.ServeConn(c)
			}()
		}
	}()
	<-ctx.Done()
	l.Close()
	os.Remove(sock)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m.Shutdown(sctx)
	srv.Shutdown(sctx)
	wg.Wait()
	return nil
}

// stranger says why the peer of c is not this desktop user, unsandboxed;
// "" when it is.
func stranger(c net.Conn) string {
	cred, err := peer.Cred(c)
	if err != nil {
		return err.Error()
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Sprintf("uid %d is not this desktop user's", cred.Uid)
	}
	if nnp, err := peer.NoNewPrivs(int(cred.Pid)); err != nil || nnp {
		return fmt.Sprintf("pid %d runs sandboxed (no_new_privs)", cred.Pid)
	}
	return ""
}
