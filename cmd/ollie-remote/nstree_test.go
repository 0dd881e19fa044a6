package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"ollie/ns"
)

// serveTree serves a namespace of root on the Unix socket sock, standing
// in for a host's olliesrv behind a keeper, until the test ends.
func serveTree(t *testing.T, sock string, root *ns.Node) {
	t.Helper()
	tree, err := ns.NewTree(root, "owner", "owner")
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeUnix(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
}
