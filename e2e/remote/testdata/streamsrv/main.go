// Command streamsrv serves the namespace BenchmarkForward reads through
// the tunnels: "small", a few bytes, and "big", a closed stream of 64 MiB,
// which olliesrv's own tree has no file to match. It listens on the Unix
// socket named by its argument and prints "ready" once it does.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"ollie/ns"
	"ollie/ns/stream"
)

const bigSize = 64 << 20

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: streamsrv SOCKET")
		os.Exit(2)
	}
	sock := os.Args[1]
	// Written once and closed: every read from offset 0 gets all of it,
	// then EOF, so each reader measures transport and not the writer.
	big := stream.NewStream(bigSize)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>8)
	}
	for range bigSize / len(chunk) {
		big.Write(chunk)
	}
	big.Close()
	root := ns.Dir("", 0555, "BenchmarkForward's tree",
		ns.ReadFile("small", 0444, "a few bytes", func(context.Context, *ns.Call) ([]byte, error) {
			return []byte("hello, world\n"), nil
		}),
		ns.StreamFile("big", 0444, "64 MiB, closed", func(context.Context, *ns.Call) (*stream.Stream, error) {
			return big, nil
		}),
	)
	tree, err := ns.NewTree(root, "bench", "bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, "streamsrv:", err)
		os.Exit(1)
	}
	os.Remove(sock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "streamsrv:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.DiscardHandler)}
	err = srv.ServeUnix(l)
	fmt.Fprintln(os.Stderr, "streamsrv:", err)
	os.Exit(1)
}
