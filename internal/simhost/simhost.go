// Package simhost runs simulated ollie hosts inside the current process, on
// loopback, for the benchmarks and tests that hold more hosts from one
// desktop than this machine could run olliesrv daemons for (a thousand):
// each host is a real SSH server (gliderlabs/ssh) with its own ed25519 host
// key and port, and its namespace is served by the real 9P server (package
// ns) from inside the process, as goroutines, with no process per host.
//
// What stands behind the namespace is simulated, and small: a host answers
// the commands ollie-remote runs over SSH (olliesrv start and stop, the
// deploy probe, the keeper's looks at the daemon) as a host with
// Options.Installed deployed would, without a shell (exec.go); its
// namespace has the files that up, status and a fleet run read and write,
// with the real approval gate behind bypass/broker and an agent that
// answers its goal at once, without a model (namespace.go). A command it
// does not know fails with exit status 127, so a desktop that starts to
// ask something new fails here rather than being answered wrongly.
//
// A host trusts exactly one client key, given at Start, and refuses every
// other key and every other user name. It runs nothing and reaches no
// socket but its own namespace's.
package simhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/accept"
	"ollie/internal/demohost"
	"ollie/internal/sshsrv"
	"ollie/tunnel/deploy"
)

// Options adjust the hosts of a fleet. The zero value is usable: hosts on
// which nothing is deployed.
type Options struct {
	// Installed is what every host has deployed: the deploy probe finds
	// it up to date, and olliesrv start serves the namespace. Nil: nothing
	// is, so olliesrv start fails as it does on such a host.
	Installed *deploy.Bundle
	// Answer is what a host's agent answers a goal with; nil answers
	// "HOST: all is well".
	Answer func(host, goal string) string
	// Log receives connection errors; nil discards them.
	Log *slog.Logger
}

// A Fleet is a set of hosts started together.
type Fleet struct {
	Dir   string  // each host's home is Dir/NAME, its sockets in it
	Hosts []*Host // sim1, sim2, ...

	opts    Options
	version string // the installed version, "" when none
	log     *slog.Logger
}

// A Host is one SSH server on 127.0.0.1.
type Host struct {
	Name    string // sim1, sim2, ...
	Addr    string // 127.0.0.1
	Port    int
	User    string // the one user name accepted: the current user's
	Home    string // its HOME; its namespace's socket and the broker sockets forwarded to it are here
	HostKey ssh.PublicKey

	f         *Fleet
	clientKey ssh.PublicKey
	uid       int
	log       *slog.Logger
	srv       *gliderssh.Server
	served    chan struct{} // closed when Serve returns
	fwd       sshsrv.Forwards

	mu       sync.Mutex
	closing  bool
	daemon   *daemon        // the namespace, while "olliesrv" runs
	channels sync.WaitGroup // channels being served
}

// Start starts n hosts named sim1 … simN, their homes under dir (made if
// missing; keep it short, as a Unix socket's path is at most 107 bytes),
// each accepting clientKey alone. Close stops them.
func Start(dir string, n int, clientKey ssh.PublicKey, o *Options) (*Fleet, error) {
	if o == nil {
		o = &Options{}
	}
	if clientKey == nil {
		return nil, errors.New("simhost: no client key: a host with no key lets no one in")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("simhost: %w", err)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("simhost: who am I: %w", err)
	}
	f := &Fleet{Dir: dir, opts: *o, log: o.Log}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if o.Installed != nil {
		bin, ok := o.Installed.Bins[platform()]
		if !ok {
			return nil, fmt.Errorf("simhost: the installed bundle has no olliesrv for %s", platform())
		}
		f.version = deploy.VersionOf(bin)
	}
	for i := 1; i <= n; i++ {
		h, err := f.start(fmt.Sprintf("sim%d", i), u.Username, os.Getuid(), clientKey)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.Hosts = append(f.Hosts, h)
	}
	return f, nil
}

func (f *Fleet) start(name, userName string, uid int, clientKey ssh.PublicKey) (*Host, error) {
	h := &Host{Name: name, Addr: "127.0.0.1", User: userName, Home: filepath.Join(f.Dir, name), f: f,
		clientKey: clientKey, uid: uid, log: f.log.With("host", name), served: make(chan struct{})}
	if err := os.MkdirAll(h.Home, 0700); err != nil {
		return nil, fmt.Errorf("simhost: %s: %w", name, err)
	}
	if n := len(h.Socket()) + len("/broker-") + 16; n > 107 {
		return nil, fmt.Errorf("simhost: %s: the sockets under %s would be %d bytes, over the 107 of a Unix socket: start the fleet in a shorter directory", name, h.Home, n)
	}
	l, err := sshsrv.ServeLoopback("ollie_simhost", h.authorize, map[string]gliderssh.ChannelHandler{
		"session":                        h.session,
		"direct-streamlocal@openssh.com": h.directStreamLocal,
	}, h.fwd.Handlers(h.socketPath, h.trackDone, h.log), h.log)
	if err != nil {
		return nil, fmt.Errorf("simhost: %s: %w", name, err)
	}
	h.srv, h.served, h.Port, h.HostKey = l.Srv, l.Served, l.Port, l.HostKey
	return h, nil
}

// authorize lets in the fleet's client key, as the current user only.
func (h *Host) authorize(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
	return ctx.User() == h.User && gliderssh.KeysEqual(key, h.clientKey)
}

// Socket is where the host's olliesrv would listen: the path olliesrv
// start names, which direct-streamlocal reaches the namespace at.
func (h *Host) Socket() string { return filepath.Join(h.Home, "ollie") }

// Running reports whether the host's "olliesrv" serves its namespace.
func (h *Host) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.daemon != nil
}

// String is the host's name, its alias in the ssh config WriteClientFiles
// writes.
func (h *Host) String() string { return h.Name }

// HostPort is the address to dial, 127.0.0.1:PORT.
func (h *Host) HostPort() string { return net.JoinHostPort(h.Addr, strconv.Itoa(h.Port)) }

// Names are the hosts' names, in order.
func (f *Fleet) Names() []string {
	names := make([]string, len(f.Hosts))
	for i, h := range f.Hosts {
		names[i] = h.Name
	}
	return names
}

// WriteClientFiles writes dir/ssh_config and dir/known_hosts for the
// fleet, as demohost's fleet does; identityFile is the private half of
// the client key given to Start (demohost.NewClientKey writes one).
func (f *Fleet) WriteClientFiles(dir, identityFile string) (demohost.ClientFiles, error) {
	hosts := make([]demohost.ClientHost, len(f.Hosts))
	for i, h := range f.Hosts {
		hosts[i] = demohost.ClientHost{Name: h.Name, Addr: h.Addr, Port: h.Port, User: h.User, HostKey: h.HostKey}
	}
	return demohost.WriteClientFiles(dir, identityFile, "simulated ollie hosts", hosts)
}

// track counts a channel in, unless the host is closing.
func (h *Host) track() bool { return accept.Track(&h.mu, &h.closing, &h.channels) }

// trackDone is track for sshsrv's forwards.
func (h *Host) trackDone() (func(), bool) { return h.channels.Done, h.track() }

// close stops serving: listener, connections, the forwards they made and
// the namespace.
func (h *Host) close() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.srv.Close()
	<-h.served
	h.fwd.CloseAll()
	h.stopDaemon()
	h.channels.Wait()
}

// Close stops every host and removes Dir.
func (f *Fleet) Close() error {
	var wg sync.WaitGroup
	for _, h := range f.Hosts {
		wg.Go(h.close)
	}
	wg.Wait()
	return os.RemoveAll(f.Dir)
}

// stopDaemon ends the host's namespace, as olliesrv stop would, within
// 5 s; false when none ran.
func (h *Host) stopDaemon() bool {
	h.mu.Lock()
	d := h.daemon
	h.daemon = nil
	h.mu.Unlock()
	if d == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.shutdown(ctx)
	return true
}
