// Package demohost runs SSH hosts inside the current process, on loopback,
// for ollie-remote demo and for tests that need a host but no root: each
// host is a gliderlabs/ssh server with its own ed25519 host key, port and
// home directory, serving the SSH features ollie-remote uses over one
// connection (exec, the sftp subsystem, Unix sockets both ways,
// keepalives).
//
// Every host runs its commands as the current user, on this machine; what
// sets the hosts apart is the environment each command gets (HOME, the XDG
// directories, NAMESPACE). A host trusts exactly one client key, given at
// Start, and refuses every other key and every other user name. Past that it
// confines nothing: a client may run any command, read and write any file
// and reach any Unix socket the current user can. It is a demo, not a
// sandbox.
package demohost

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"golang.org/x/crypto/ssh/knownhosts"
	"ollie/internal/accept"
	"ollie/internal/sshsrv"
)

// Options adjust the hosts of a fleet. The zero value is usable.
type Options struct {
	// Env is added to the environment of every command on every host,
	// after the host's own variables (so it may not override HOME and
	// the like). The demo passes the model variables (OLLAMA_HOST,
	// OPENAI_API_KEY, ...) this way.
	Env []string
	// Log receives connection errors; nil discards them.
	Log *slog.Logger
}

// A Fleet is a set of hosts started together.
type Fleet struct {
	Dir   string  // the hosts' homes are Dir/NAME
	Hosts []*Host // demo1, demo2, ...

	nsRoot string // the short directory holding each host's NAMESPACE
}

// A Host is one SSH server on 127.0.0.1.
type Host struct {
	Name    string // demo1, demo2, ...
	Addr    string // 127.0.0.1
	Port    int
	User    string // the one user name accepted: the current user's
	Home    string // HOME of every command
	NSDir   string // NAMESPACE of every command: where olliesrv puts its socket
	HostKey ssh.PublicKey

	clientKey ssh.PublicKey
	env       []string
	log       *slog.Logger
	srv       *gliderssh.Server
	served    chan struct{} // closed when Serve returns
	fwd       sshsrv.Forwards

	mu       sync.Mutex
	closing  bool
	sessions sync.WaitGroup // channels being served
}

// Start starts n hosts named demo1 … demoN, their homes under dir (made if
// missing), each accepting clientKey alone. Close stops them.
func Start(dir string, n int, clientKey ssh.PublicKey, o *Options) (*Fleet, error) {
	if o == nil {
		o = &Options{}
	}
	if clientKey == nil {
		return nil, errors.New("demohost: no client key: a host with no key lets no one in")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("demohost: who am I: %w", err)
	}
	// A Unix socket path has at most 107 bytes, and dir may be long: the
	// namespaces go under a short directory of their own.
	nsRoot, err := os.MkdirTemp("", "ollie-demo-ns-")
	if err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	f := &Fleet{Dir: dir, nsRoot: nsRoot}
	for i := 1; i <= n; i++ {
		h, err := f.start(fmt.Sprintf("demo%d", i), u.Username, clientKey, o.Env, log)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.Hosts = append(f.Hosts, h)
	}
	return f, nil
}

func (f *Fleet) start(name, userName string, clientKey ssh.PublicKey, extra []string, log *slog.Logger) (*Host, error) {
	h := &Host{
		Name:      name,
		Addr:      "127.0.0.1",
		User:      userName,
		Home:      filepath.Join(f.Dir, name),
		NSDir:     filepath.Join(f.nsRoot, name),
		clientKey: clientKey,
		log:       log.With("host", name),
		served:    make(chan struct{}),
	}
	for _, d := range []string{h.Home, h.NSDir} {
		if err := os.MkdirAll(d, 0700); err != nil {
			return nil, fmt.Errorf("demohost: %s: %w", name, err)
		}
	}
	h.env = append(h.ownEnv(), extra...)
	l, err := sshsrv.ServeLoopback("ollie_demohost", h.authorize, map[string]gliderssh.ChannelHandler{
		"session":                        h.session,
		"direct-streamlocal@openssh.com": h.directStreamLocal,
	}, h.fwd.Handlers(h.socketPath, h.trackDone, h.log), h.log)
	if err != nil {
		return nil, fmt.Errorf("demohost: %s: %w", name, err)
	}
	h.srv, h.served, h.Port, h.HostKey = l.Srv, l.Served, l.Port, l.HostKey
	return h, nil
}

// authorize lets in the fleet's client key, as the current user only.
func (h *Host) authorize(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
	return ctx.User() == h.User && gliderssh.KeysEqual(key, h.clientKey)
}

// ownEnv is what sets the host apart: its home, its XDG directories, its
// namespace directory, and its ~/.local/bin first on PATH (where deploy
// puts the ollie command; sshd would find it through ~/.bashrc).
func (h *Host) ownEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{
		"HOME=" + h.Home,
		"USER=" + h.User,
		"LOGNAME=" + h.User,
		"SHELL=/bin/sh",
		"PATH=" + filepath.Join(h.Home, ".local", "bin") + ":" + path,
		"NAMESPACE=" + h.NSDir,
		"XDG_CONFIG_HOME=" + filepath.Join(h.Home, ".config"),
		"XDG_STATE_HOME=" + filepath.Join(h.Home, ".local", "state"),
		"XDG_DATA_HOME=" + filepath.Join(h.Home, ".local", "share"),
	}
	for _, k := range []string{"LANG", "TZ", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Env is the environment every command on the host starts with.
func (h *Host) Env() []string { return append([]string(nil), h.env...) }

// ConfigDir is the host's XDG_CONFIG_HOME: ollie reads
// ConfigDir()/ollie/backends.json.
func (h *Host) ConfigDir() string { return filepath.Join(h.Home, ".config") }

// String is the host's name, its alias in the ssh config WriteClientFiles
// writes.
func (h *Host) String() string { return h.Name }

// HostPort is the address to dial, 127.0.0.1:PORT.
func (h *Host) HostPort() string { return net.JoinHostPort(h.Addr, strconv.Itoa(h.Port)) }

// Host returns the host called name, or nil.
func (f *Fleet) Host(name string) *Host {
	for _, h := range f.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Names are the hosts' names, in order.
func (f *Fleet) Names() []string {
	var names []string
	for _, h := range f.Hosts {
		names = append(names, h.Name)
	}
	return names
}

// ClientFiles are what a client needs to reach the fleet.
type ClientFiles struct {
	Config     string // ssh config: one Host block per host
	KnownHosts string // every host's key, for [127.0.0.1]:PORT
}

// WriteClientFiles writes dir/ssh_config and dir/known_hosts for the
// fleet. identityFile is the client's private key file, the one whose
// public key was given to Start. The config is complete: OpenSSH's ssh -F
// reads it as well as ollie-remote -F.
func (f *Fleet) WriteClientFiles(dir, identityFile string) (ClientFiles, error) {
	hosts := make([]ClientHost, len(f.Hosts))
	for i, h := range f.Hosts {
		hosts[i] = ClientHost{h.Name, h.Addr, h.Port, h.User, h.HostKey}
	}
	return WriteClientFiles(dir, identityFile, "ollie demo hosts", hosts)
}

// A ClientHost is what a client's files say of one host inside a process.
type ClientHost struct {
	Name, Addr string
	Port       int
	User       string
	HostKey    ssh.PublicKey
}

// WriteClientFiles writes dir/ssh_config and dir/known_hosts for hosts
// that run inside this process (what names them, in the config's first
// line); identityFile is the private half of the client key they trust.
func WriteClientFiles(dir, identityFile, what string, hosts []ClientHost) (ClientFiles, error) {
	cf := ClientFiles{Config: filepath.Join(dir, "ssh_config"), KnownHosts: filepath.Join(dir, "known_hosts")}
	identityFile, err := filepath.Abs(identityFile)
	if err != nil {
		return cf, fmt.Errorf("demohost: %w", err)
	}
	var cfg, known strings.Builder
	fmt.Fprintf(&cfg, "# %s: SSH servers inside the process %d; they end with it.\n", what, os.Getpid())
	for _, h := range hosts {
		fmt.Fprintf(&cfg, "\nHost %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n",
			h.Name, h.Addr, h.Port, h.User, configQuote(identityFile), configQuote(cf.KnownHosts))
		hostPort := net.JoinHostPort(h.Addr, strconv.Itoa(h.Port))
		known.WriteString(knownhosts.Line([]string{knownhosts.Normalize(hostPort)}, h.HostKey) + "\n")
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return cf, fmt.Errorf("demohost: %w", err)
	}
	if err := os.WriteFile(cf.Config, []byte(cfg.String()), 0600); err != nil {
		return cf, fmt.Errorf("demohost: %w", err)
	}
	if err := os.WriteFile(cf.KnownHosts, []byte(known.String()), 0600); err != nil {
		return cf, fmt.Errorf("demohost: %w", err)
	}
	return cf, nil
}

// configQuote quotes a path with spaces for an ssh config.
func configQuote(s string) string {
	if strings.ContainsAny(s, " \t") {
		return `"` + s + `"`
	}
	return s
}

// NewClientKey writes a new ed25519 key to file (OpenSSH format, 0600) and
// file.pub, and returns its public half.
func NewClientKey(file string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "ollie-demo")
	if err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0600); err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	if err := os.WriteFile(file+".pub", ssh.MarshalAuthorizedKey(sshPub), 0644); err != nil {
		return nil, fmt.Errorf("demohost: %w", err)
	}
	return sshPub, nil
}

// StopDaemon stops the olliesrv deployed on the host, if one runs, as
// "olliesrv stop" would on the host itself.
func (h *Host) StopDaemon(ctx context.Context) error {
	bin := filepath.Join(h.Home, ".local", "share", "ollie", "current", "olliesrv")
	if _, err := os.Stat(bin); err != nil {
		return nil // never deployed
	}
	cmd := exec.CommandContext(ctx, bin, "stop")
	cmd.Env, cmd.Dir = h.Env(), h.Home
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("demohost: %s: olliesrv stop: %v: %s", h.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// track counts a channel in, unless the host is closing.
func (h *Host) track() bool { return accept.Track(&h.mu, &h.closing, &h.sessions) }

// trackDone is track for sshsrv's forwards.
func (h *Host) trackDone() (func(), bool) { return h.sessions.Done, h.track() }

// close stops serving: listener, connections, and the commands and
// forwards they carried.
func (h *Host) close() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.srv.Close()
	<-h.served
	h.fwd.CloseAll()
	h.sessions.Wait()
}

// Close stops every host's olliesrv, then the hosts, and removes the
// namespace directories. The homes under Dir are left to the caller.
func (f *Fleet) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, h := range f.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := h.StopDaemon(ctx)
			h.close()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := os.RemoveAll(f.nsRoot); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
