package mux_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"ollie/ns"
	"ollie/ns/client"
	"ollie/tunnel/mux"
)

// A desktop tree with host/ listing one host, and that host's namespace
// mounted at host/web1: one client reads both, as one namespace.
func Example() {
	text := func(s string) func(context.Context, *ns.Call) ([]byte, error) {
		return func(context.Context, *ns.Call) ([]byte, error) { return []byte(s), nil }
	}
	serve := func(root *ns.Node) func(context.Context) (net.Conn, error) {
		tree, err := ns.NewTree(root, "glenda", "glenda")
		if err != nil {
			log.Fatal(err)
		}
		srv := &ns.Server{Tree: tree}
		return func(context.Context) (net.Conn, error) {
			a, b := net.Pipe()
			go srv.ServeConn(b, ns.Peer{Kind: ns.Owner, UID: -1})
			return a, nil
		}
	}
	hosts := ns.Listing(func(context.Context, *ns.Call) ([]string, error) { return []string{"web1"}, nil },
		func(h string) ns.Entry { return ns.Entry{Name: h, Key: h} })
	local := serve(ns.Dir("", 0555, "",
		ns.ReadFile("idx", 0444, "The held hosts.", text("web1 up\n")),
		ns.Dir("host", 0555, "Each held host's namespace.", ns.Dynamic("h", 0555, "A host.", hosts))))
	web1 := serve(ns.Dir("", 0555, "",
		ns.ReadFile("name", 0444, "The host's name.", text("web1\n"))))

	m := &mux.Mux{
		Local: local,
		Mount: func(path []string) (func(context.Context) (net.Conn, error), bool) {
			if len(path) == 2 && path[0] == "host" && path[1] == "web1" {
				return web1, true
			}
			return nil, false
		},
	}
	a, b := net.Pipe()
	go m.ServeConn(b)
	c, err := client.NewConn(a, "glenda")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, p := range []string{"idx", "host/web1/name"} {
		b, err := c.ReadAll(ctx, p)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s", p, b)
	}
	d, err := c.Stat(ctx, "host/web1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stat host/web1:", d.Name)

	// Output:
	// idx: web1 up
	// host/web1/name: web1
	// stat host/web1: web1
}
