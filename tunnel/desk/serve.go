package desk

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"time"

	"ollie/internal/paths"
	"ollie/ns"
)

// Name is the name ollie -H takes for the desktop's namespace: its socket
// sits beside the hosts' ones, as a host of that name would.
const Name = "fleet"

// Socket is where the namespace of the keeper whose directory is dir
// listens.
func Socket(dir string) string { return paths.RemoteSocketIn(dir, Name) }

// Serve serves the namespace on Socket(dir) until ctx ends.
func Serve(ctx context.Context, dir string, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	me := "ollie"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	tree, err := ns.NewTree(Spec(cfg), me, me)
	if err != nil {
		return err
	}
	sock := Socket(dir)
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process", sock)
	}
	os.Remove(sock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err
	}
	srv := &ns.Server{Tree: tree, Log: cfg.Log}
	served := make(chan error, 1)
	go func() { served <- srv.ServeUnix(l) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	os.Remove(sock)
	<-served
	return nil
}
