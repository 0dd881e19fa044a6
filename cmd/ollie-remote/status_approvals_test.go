package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/ns"
	"ollie/tunnel/keeper"
)

// hostNS serves a host's status and bypass/broker on a socket.
func hostNS(t *testing.T, sock, brokers string) {
	t.Helper()
	read := func(s string) func(context.Context, *ns.Call) ([]byte, error) {
		return func(context.Context, *ns.Call) ([]byte, error) { return []byte(s), nil }
	}
	root := ns.Dir("", 0555, "",
		ns.ReadFile("status", 0444, "Status.", read("version 1\nuptime 5\nsessions 0\nagents 0\n")),
		ns.Dir("bypass", 0555, "Approvals.", ns.ReadFile("broker", 0444, "Brokers.", read(brokers))),
	)
	serveTree(t, sock, root)
}

// status's APPROVALS column: the keeper's state, an ok checked against the
// host's bypass/broker, and a missing channel's reason after the tunnel's
// state, so that "connected" never hides it.
func TestStatusApprovals(t *testing.T) {
	dir, err := os.MkdirTemp("", "ors")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	t.Setenv("OLLIE_REMOTE_DIR", dir)
	sock := func(h string) string { return filepath.Join(dir, h+".ns") }
	hostNS(t, sock("a"), "/run/ns/broker-b\n/run/ns/broker-a\n")
	hostNS(t, sock("b"), "/run/ns/broker-other\n")
	hostNS(t, sock("c"), "")
	held := []keeper.HeldInfo{
		{Host: "a", Socket: sock("a"), Tunnel: "connected", Proxy: "connected", Approvals: keeper.ApprovalsOK, Broker: "/run/ns/broker-a"},
		{Host: "b", Socket: sock("b"), Tunnel: "connected", Proxy: "connected", Approvals: keeper.ApprovalsOK, Broker: "/run/ns/broker-b"},
		{Host: "c", Socket: sock("c"), Tunnel: "connected", Proxy: "connected", Approvals: keeper.ApprovalsMissing + ": olliesrv does not answer on the host"},
		{Host: "d", Socket: sock("c"), Tunnel: "connected", Proxy: "connected", Approvals: keeper.ApprovalsRegistering},
	}
	l, err := net.Listen("unix", keeper.ControlSocket(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var req keeper.Request
			json.NewDecoder(c).Decode(&req)
			json.NewEncoder(c).Encode(keeper.Reply{Done: true, Held: held})
			c.Close()
		}
	}()

	var out bytes.Buffer
	statusMain(context.Background(), &common{}, nil, &out, &out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	col := strings.Index(lines[0], "APPROVALS")
	if col < 0 || len(lines) != 5 {
		t.Fatalf("status:\n%s", out.String())
	}
	for i, want := range []struct{ cell, tunnel string }{
		{"ok", "connected"},
		{"missing", "connected; approvals: the host does not list this desktop's broker socket"},
		{"missing", "connected; approvals: olliesrv does not answer on the host"},
		{"registering", "connected"},
	} {
		cell, _, _ := strings.Cut(lines[i+1][col:], " ")
		tunnel := strings.TrimSpace(lines[i+1][strings.Index(lines[0], "TUNNEL"):])
		model := strings.TrimSpace(lines[i+1][strings.Index(lines[0], "MODEL"):strings.Index(lines[0], "TUNNEL")])
		if cell != want.cell || tunnel != want.tunnel || model != "host's own" {
			t.Errorf("%s: APPROVALS %q, MODEL %q, TUNNEL %q; want %q, host's own, %q", held[i].Host, cell, model, tunnel, want.cell, want.tunnel)
		}
	}
}
