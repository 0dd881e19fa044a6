package tunnel_test

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"

	"ollie/tunnel"
)

// config is an ssh config of two hosts, one reached through the other.
const config = `Host bastion
    HostName bastion.example.net
    User admin

Host db
    HostName 10.0.0.5
    User postgres
    Port 2222
    ProxyJump bastion
    ServerAliveInterval 30
    IdentityFile /etc/ollie/keys/db
    IdentitiesOnly yes
`

// An alias resolved through an ssh config named in Options, as with ssh
// -F: the address, user and jump hosts it dials, without connecting and
// without reading ~/.ssh.
func ExampleResolve() {
	dir, err := os.MkdirTemp("", "tunnel-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		log.Fatal(err)
	}
	o := tunnel.Options{ConfigFile: cfg, KnownHosts: []string{filepath.Join(dir, "known_hosts")}}

	t, err := tunnel.Resolve("db", o)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t)
	fmt.Println("jump:", t.ProxyJump, "keys:", t.IdentityFiles, "only:", t.IdentitiesOnly)
	fmt.Println("keepalive every", t.AliveInterval, "up to", t.AliveCountMax, "unanswered; connect timeout", t.ConnectTimeout)

	// user@ and :port in the alias win over the config.
	t, err = tunnel.Resolve("root@bastion:2200", o)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t)

	// An inventory's host vars win over the config for that alias.
	o.Override = &tunnel.Override{HostName: "10.0.0.6", ProxyJump: []string{"none"}}
	t, err = tunnel.Resolve("db", o)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t, "jump:", t.ProxyJump)
	// Output:
	// postgres@db (10.0.0.5:2222)
	// jump: [bastion] keys: [/etc/ollie/keys/db] only: true
	// keepalive every 30s up to 3 unanswered; connect timeout 15s
	// root@bastion (bastion.example.net:2200)
	// postgres@db (10.0.0.6:2222) jump: []
}

// Which errors a caller should stop retrying on: a bad ssh config or a
// name that does not resolve is permanent; a refused connection may mend.
func ExamplePermanent() {
	dir, err := os.MkdirTemp("", "tunnel-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(cfg, []byte("Host db\n    Port twentytwo\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	_, badConfig := tunnel.Resolve("db", tunnel.Options{ConfigFile: cfg, KnownHosts: []string{filepath.Join(dir, "known_hosts")}})
	var ce *tunnel.ConfigError
	fmt.Println("a *ConfigError:", errors.As(badConfig, &ce))

	for _, err := range []error{
		badConfig,
		&net.DNSError{Err: "no such host", Name: "db.example.nte", IsNotFound: true},
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
	} {
		// The temporary dir is not printed: it changes on every run.
		msg := strings.ReplaceAll(err.Error(), dir, "$DIR")
		fmt.Printf("permanent %v: %s\n", tunnel.Permanent(err), msg)
	}
	// Output:
	// a *ConfigError: true
	// permanent true: tunnel: ssh config $DIR/ssh_config: Host db: Port "twentytwo" is not a number
	// permanent true: lookup db.example.nte: no such host
	// permanent false: dial tcp: connection refused
}
