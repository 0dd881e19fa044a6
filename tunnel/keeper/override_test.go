package keeper

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"ollie/internal/paths"
	"ollie/tunnel"
)

// TestUpDialsOverride: up reaches a host at the address its Request's
// Override gives, for a name the ssh config does not know.
func TestUpDialsOverride(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case dialled <- struct{}{}:
			default:
			}
			c.Close()
		}
	}()
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(cfg, []byte("Host other\n  HostName 192.0.2.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k := &keeper{ssh: paths.NewSSHConfig(cfg, nil), hosts: map[string]*heldHost{}, log: slog.New(slog.DiscardHandler)}
	req := Request{Op: "up", Host: "app", Config: cfg, Override: &tunnel.Override{HostName: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, User: "nobody"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, _, err := k.up(ctx, req, func(string) {}); err == nil {
		t.Fatal("up succeeded against a listener that is no sshd")
	}
	select {
	case <-dialled:
	default:
		t.Fatal("up did not dial the Override's address")
	}
}
