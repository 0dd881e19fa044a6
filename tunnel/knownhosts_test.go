package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ollie/internal/sshlab"
	"ollie/tunnel"
)

// TestInventoryHostKnownElsewhere (issue 31, item 3): a host that the ssh
// config does not name, reached at the address, port and user an
// inventory gives (Override), is checked against the known_hosts files
// the config names for its other hosts and the user's own, so no
// KnownHosts option is needed when its key was accepted before; a key
// none of them holds is refused, the error naming the files read and the
// commands that accept it.
func TestInventoryHostKnownElsewhere(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{Hosts: 2})
	h11, h12 := l.Host(0), l.Host(1)
	t.Setenv("HOME", t.TempDir()) // no ~/.ssh/known_hosts of the test's user
	o := opts(t, l)
	ov := &tunnel.Override{HostName: h12.Addr, Port: h12.Port, User: h12.User, IdentityFile: l.ClientKey}

	// The lab's config names h11 and h12, each with the lab's known_hosts.
	o.Override = ov
	run(t, dial(t, "web-b", o), "true")

	// A config whose file holds h11's key only: h12's is unknown.
	kh := filepath.Join(t.TempDir(), "known_hosts")
	os.WriteFile(kh, fmt.Appendf(nil, "[%s]:%d %s\n", h11.Addr, h11.Port, h11.HostKeyPub), 0o644)
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	os.WriteFile(cfg, fmt.Appendf(nil, "Host h11\n  HostName %s\n  Port %d\n  UserKnownHostsFile %s\n", h11.Addr, h11.Port, kh), 0o644)
	o.ConfigFile = cfg
	_, err := tunnel.Dial(context.Background(), "web-b", o)
	var ue *tunnel.UnknownHostError
	if !errors.As(err, &ue) {
		t.Fatalf("a host whose key no file holds: %v, want an UnknownHostError", err)
	}
	msg := err.Error()
	t.Log(msg)
	home, _ := os.UserHomeDir()
	for _, want := range []string{"in none of " + kh, "--accept-new to add it to " + filepath.Join(home, ".ssh", "known_hosts"),
		fmt.Sprintf("ssh -p %d %s@%s", h12.Port, h12.User, h12.Addr), fingerprint(t, h12.HostKeyPub)} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	// Once in the user's own known_hosts, as ssh puts it there.
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), fmt.Appendf(nil, "[%s]:%d %s\n", h12.Addr, h12.Port, h12.HostKeyPub), 0o600)
	run(t, dial(t, "web-b", o), "true")
}
