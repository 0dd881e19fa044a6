// Package appliance is the appliance listener: olliesrv's own SSH server, for
// hosts where OpenSSH's sshd is not there to carry ollie (a container, an
// appliance VM, a host whose sshd_config nobody may touch). It runs on
// gliderlabs/ssh in the daemon's process, beside the 9P socket, and serves
// ollie and nothing else:
//
//   - a session with a pty is the ollie shell, run as a child on a real pty
//     (completion, history, Ctrl-C as Tflush, window-size changes);
//   - an exec runs one ollie subcommand (ls, read, write, rdwr, rdwrs, stat,
//     chat, help), with the local client's exit codes; "ollie ls /" and
//     "ls /" are the same request; "olliesrv ARGS" from an admin key runs
//     what the Server's Admin allows (ollie-remote's deploy and start);
//   - a subsystem runs only if the Server names it (Subsystems: sftp is
//     plugged in there), as a child on the channel's stdin and stdout, so
//     that a read-only key's subsystem has the read-only rights too;
//   - direct-streamlocal@openssh.com reaches the 9P socket only, and
//     streamlocal-forward@openssh.com listens only on the broker-* and
//     models.sock paths ollie-remote's keeper forwards into the namespace
//     directory.
//
// Everything else is refused: passwords and keyboard-interactive,
// arbitrary commands, agent and X11 forwarding, TCP forwarding both ways,
// any other socket path, any other subsystem. Each refusal is logged once
// per kind, key fingerprint and source address.
//
// What a client that has not logged in can make the listener hold is
// bounded as OpenSSH's sshd bounds it: MaxStartups (10:30:100), 5
// connections not yet logged in per source (an IPv4 address, an IPv6
// /64), and 30 s from accept to log in (LoginGraceTime). Such a
// connection costs the listener a descriptor and a few KiB until it logs
// in or is closed, and a dropped one only its accept, so a flood cannot
// take the descriptors or the memory the namespace needs. An accept that
// fails for want of descriptors backs off (internal/accept). Each limit
// is logged at its first drop, then at most once every 10 s, with the
// source and how many went unlogged. Read-only keys have at most 8
// sessions open together.
//
// Who may log in is AuthorizedKeys, OpenSSH's authorized_keys format. The
// options honoured are from= (address patterns and CIDRs, ! negates; host
// names are not resolved, so only address patterns can match), command=
// (a forced command, itself held to the exec rule), no-pty, restrict (no
// pty, no forwarding; pty and port-forwarding lift those again), and
// ollie-read-only, ours: that key's commands run with no_new_privs, which
// the namespace's trust model (ns/trust.go) makes "none", a reader of what
// is world-readable, and it may not forward sockets. Every other key is an
// admin of the namespace, as the daemon's own user is. OpenSSH's sshd
// refuses a key with an option it does not know, so a read-only line
// copied into its authorized_keys grants nothing there.
//
// cmd/olliesrv runs it with "olliesrv -ssh ADDR" (the host key is
// $XDG_STATE_HOME/ollie/ssh_host_ed25519_key, "olliesrv ssh-fingerprint"
// prints it), and contrib/systemd/olliesrv-ssh.service as a user service.
//
// The server trusts its authorized_keys file and its host key file (both
// the daemon user's own); it trusts nothing the client says.
package appliance

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/accept"
	"ollie/internal/sshsrv"
)

// HostKeyFile is the host key's name in the state directory.
const HostKeyFile = "ssh_host_ed25519_key"

// A Server is the appliance listener. Fields are read once, by Serve.
type Server struct {
	// HostKey is the private host key file: an ed25519 key in OpenSSH
	// format, made (0600) on first use.
	HostKey string
	// AuthorizedKeys is the authorized_keys file, read again at each
	// login so that an edit takes effect without a restart. A missing
	// file lets no one in.
	AuthorizedKeys string
	// Namespace is the daemon's namespace directory: its ollie socket is
	// the one direct-streamlocal may reach, and forwards may listen
	// there on broker-* and models.sock.
	Namespace string
	// Ollie makes the command that runs the ollie client with args (nil
	// for the interactive shell). With readOnly it must drop to the
	// namespace's read-only rights before connecting (see ReadOnly). Nil
	// refuses every shell and exec.
	Ollie func(args []string, readOnly bool) *exec.Cmd
	// Admin makes the command for an exec of "olliesrv ARGS" by an admin
	// key: the few commands ollie-remote deploys and holds a host with
	// where no OpenSSH runs (probe, install, start, restart), or an error
	// saying why args are not one of them. Nil, or a read-only key,
	// refuses every such exec.
	Admin func(args []string) (*exec.Cmd, error)
	// Subsystems make the command serving a subsystem on its stdin and
	// stdout, by name ("sftp"), under the same rights rule as Ollie. A
	// name not here is refused.
	Subsystems map[string]func(readOnly bool) *exec.Cmd
	// Env is the environment every command starts with, before what
	// Ollie or a subsystem put in the command's own Env; the server adds
	// NAMESPACE and, on a pty, TERM.
	Env []string
	// KeyState, if set, gives each key's commands a state directory of
	// their own, KeyState/KEYID, as XDG_STATE_HOME: the shell's and
	// chat's histories are then one key's, so a read-only key does not
	// read what an admin typed.
	KeyState string
	// Log receives logins, refusals and what the limits drop; nil
	// discards them.
	Log *slog.Logger

	// Limits on connections not yet logged in, as OpenSSH's sshd has
	// them. The zero value of each is its default.
	//
	// MaxStartups drops new connections while many have not logged in:
	// past Start of them, with the chance Rate%, rising to 100% at Full
	// (DefaultMaxStartups, 10:30:100). A dropped connection reads one
	// line saying so, then its end.
	MaxStartups Startups
	// MaxStartupsPerSource is how many connections not yet logged in
	// one source may hold (an IPv4 address, an IPv6 /64); the next is
	// dropped (DefaultMaxStartupsPerSource, 5). A connection that has
	// logged in no longer counts.
	MaxStartupsPerSource int
	// LoginGraceTime is how long a connection has, from its accept, to
	// finish the handshake and log in; then it is closed
	// (DefaultLoginGraceTime, 30 s).
	LoginGraceTime time.Duration

	// MaxReadOnlySessions is how many sessions (shells, execs,
	// subsystems) read-only keys may have open at once, over all their
	// connections (DefaultMaxReadOnlySessions, 8); one more is refused
	// as a resource shortage. Their commands reach the namespace as
	// peers it reads as none (ns/trust.go), counted apart from agents'
	// tools, and this keeps them within that count.
	MaxReadOnlySessions int

	once             sync.Once
	srv              *gliderssh.Server
	signer           ssh.Signer
	refused          refusals
	limitLog         rateLog
	startups         startups
	intn             func(n int) int // MaxStartups' draw, in [0, n)
	fwd              sshsrv.Forwards
	mu               sync.Mutex
	closing          bool
	listeners        map[net.Listener]struct{} // Serve's, under mu
	conns            map[*conn]struct{}        // connections served, under mu
	readOnlySessions int                       // under mu
	work             sync.WaitGroup            // connections, channels and forwarded connections in flight
	ctx              context.Context
	cancel           context.CancelFunc
}

// ErrServerClosed is what Serve returns after Shutdown.
var ErrServerClosed = errors.New("sshd: server closed")

func (s *Server) init() error {
	var err error
	s.once.Do(func() {
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.listeners, s.conns = map[net.Listener]struct{}{}, map[*conn]struct{}{}
		s.setLimits()
		s.signer, err = LoadHostKey(s.HostKey)
		if err != nil {
			return
		}
		s.srv = &gliderssh.Server{
			HostSigners:      []gliderssh.Signer{s.signer},
			Version:          "ollie",
			PublicKeyHandler: s.authorize,
			ChannelHandlers: map[string]gliderssh.ChannelHandler{
				"session":                        s.session,
				"direct-streamlocal@openssh.com": s.directStreamLocal,
				"default":                        s.otherChannel,
			},
			RequestHandlers: map[string]gliderssh.RequestHandler{
				"streamlocal-forward@openssh.com":        s.streamLocalForward,
				"cancel-streamlocal-forward@openssh.com": s.cancelStreamLocalForward,
				"default":                                s.otherRequest,
			},
			ConnCallback:             bindConn,
			ServerConfigCallback:     handshakeConfig,
			ConnectionFailedCallback: s.handshakeFailed,
		}
	})
	if err == nil && s.srv == nil {
		err = errors.New("sshd: server failed to start earlier")
	}
	return err
}

// ListenAndServe listens on the TCP address addr and serves.
func (s *Server) ListenAndServe(addr string) error {
	if err := s.init(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("sshd: %w", err)
	}
	return s.Serve(ln)
}

// setLimits gives each limit left zero its default.
func (s *Server) setLimits() {
	if s.MaxStartups == (Startups{}) {
		s.MaxStartups = DefaultMaxStartups
	}
	m := &s.MaxStartups
	m.Start = max(m.Start, 0)
	m.Rate = min(max(m.Rate, 0), 100)
	m.Full = max(m.Full, m.Start)
	if s.MaxStartupsPerSource <= 0 {
		s.MaxStartupsPerSource = DefaultMaxStartupsPerSource
	}
	if s.LoginGraceTime <= 0 {
		s.LoginGraceTime = DefaultLoginGraceTime
	}
	if s.MaxReadOnlySessions <= 0 {
		s.MaxReadOnlySessions = DefaultMaxReadOnlySessions
	}
	if s.intn == nil {
		s.intn = mathrand.IntN
	}
}

// Serve serves SSH on ln until Shutdown, and closes ln. An accept that
// fails for a while (out of file descriptors) is retried after a
// back-off. It always returns a non-nil error: ErrServerClosed after
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	defer ln.Close()
	if err := s.init(); err != nil {
		return err
	}
	lp := accept.Loop{
		Mu: &s.mu, Closed: &s.closing, Listeners: s.listeners, WG: &s.work,
		Done: s.ctx.Done(), ErrClosed: ErrServerClosed, CloseLate: true,
	}
	return lp.Serve(ln, s.admit)
}

// Shutdown closes the listener and every connection, ends the commands
// they ran, and waits for them within ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.init(); err != nil {
		return nil
	}
	var err error
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		if cerr := ln.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.fwd.CloseAll()
	done := make(chan struct{})
	go func() { s.work.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// track counts a channel in, unless the server is closing.
func (s *Server) track() bool { return accept.Track(&s.mu, &s.closing, &s.work) }

// LoadHostKey reads the ed25519 host key in file, or makes one there
// (0600, its directory 0700) when there is none.
func LoadHostKey(file string) (ssh.Signer, error) {
	if file == "" {
		return nil, errors.New("sshd: no host key file")
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = newHostKey(file)
	}
	if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("sshd: host key %s: %w", file, err)
	}
	return signer, nil
}

func newHostKey(file string) ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "ollie host key")
	if err != nil {
		return nil, err
	}
	b := pem.EncodeToMemory(block)
	if err := os.MkdirAll(filepath.Dir(file), 0700); err != nil {
		return nil, err
	}
	// Written whole under another name, then linked into place: link
	// fails if the name exists, so two daemons starting at once keep the
	// first one's key, and neither can read the other's half-written file
	// (O_EXCL on the name itself could: TestReadOnlySessionsCap once read
	// an empty key).
	tmp, err := os.CreateTemp(filepath.Dir(file), ".hostkey-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), file); errors.Is(err, fs.ErrExist) {
		return os.ReadFile(file)
	} else if err != nil {
		return nil, err
	}
	return b, nil
}

// Fingerprint is the host key's SHA256 fingerprint as ssh-keygen -l
// prints it ("SHA256:..."), for the person to check on first connect.
func Fingerprint(hostKeyFile string) (string, error) {
	signer, err := LoadHostKey(hostKeyFile)
	if err != nil {
		return "", err
	}
	return ssh.FingerprintSHA256(signer.PublicKey()), nil
}
