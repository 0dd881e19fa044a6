package ns_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"ollie/ns"
	"ollie/ns/client"
)

// A tree of three files, served on a Unix socket and read with the
// namespace client: a snapshot, a request file, and a file in a dynamic
// directory whose one entry is reached by its name or by its ID.
func Example() {
	type worker struct{ id, name string }
	workers := []worker{{id: "7f3a", name: "scribe"}}

	root := ns.Dir("", 0555, "",
		ns.ReadFile("motd", 0444, "The message of the day.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			return []byte("hello from ns\n"), nil
		}),
		ns.RdWrFile("upper", 0666, "Write text; read it back in capitals.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			return bytes.ToUpper(req), nil
		}),
		ns.Dir("worker", 0555, "The workers.",
			ns.Dynamic("wid", 0555, "One worker, by name or ID.",
				ns.Listing(func(ctx context.Context, c *ns.Call) ([]worker, error) { return workers, nil },
					func(w worker) ns.Entry { return ns.Entry{Name: w.name, Key: w.id} }),
				ns.ReadFile("id", 0444, "Its immutable ID.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
					return []byte(c.Key("wid") + "\n"), nil
				}))))
	tree, err := ns.NewTree(root, "glenda", "glenda")
	if err != nil {
		log.Fatal(err)
	}

	dir, err := os.MkdirTemp("", "ns-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "ollie")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		log.Fatal(err)
	}
	srv := &ns.Server{Tree: tree}
	served := make(chan error, 1)
	go func() { served <- srv.ServeUnix(l) }()
	defer func() {
		srv.Shutdown(context.Background())
		<-served
	}()

	// The peer is this process: the server's own user, so the admin.
	c, err := client.DialAs(sock, "glenda")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	for _, name := range []string{"/", "worker"} {
		dirs, err := c.Ls(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(name, ":")
		for _, d := range dirs {
			fmt.Print(" ", d.Name)
		}
		fmt.Println()
	}
	motd, err := c.ReadAll(ctx, "motd")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("motd: ", string(motd))
	reply, err := c.RdWr(ctx, "upper", []byte("shout this\n"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("upper: ", string(reply))
	for _, name := range []string{"worker/scribe/id", "worker/7f3a/id"} {
		id, err := c.ReadAll(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(name, ": ", string(id))
	}
	if _, err := c.ReadAll(ctx, "worker/nobody/id"); err != nil {
		fmt.Println(err)
	}

	// Output:
	// /: motd upper worker
	// worker: scribe
	// motd: hello from ns
	// upper: SHOUT THIS
	// worker/scribe/id: 7f3a
	// worker/7f3a/id: 7f3a
	// read /worker/nobody/id: file '/worker/nobody/id' not found
}
