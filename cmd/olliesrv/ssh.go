package main

// The appliance listener's wiring (ns/sshd): olliesrv -ssh ADDR, the
// ssh-fingerprint command, and the read-only re-exec its commands use.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"ollie/internal/paths"
	"ollie/ns/client"
	"ollie/ns/nsdir"
	"ollie/ns/sftpns"
	"ollie/ns/shell"
	"ollie/ns/sshd"
	"ollie/tunnel/deploy"
)

// hostKeyPath is the listener's host key: $XDG_STATE_HOME/ollie/ssh_host_ed25519_key.
func hostKeyPath() (string, error) {
	dir, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, sshd.HostKeyFile), nil
}

// newSSHServer is the listener for the namespace in dir, its commands
// this binary as "olliesrv ollie ARGS".
func newSSHServer(dir string, log *slog.Logger) (*sshd.Server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("olliesrv: -ssh: %w", err)
	}
	keys, ok := paths.UserDir("authorized_keys")
	if !ok {
		return nil, fmt.Errorf("olliesrv: -ssh: no home directory for ~/.config/ollie/authorized_keys")
	}
	state, err := paths.StateDir()
	if err != nil {
		return nil, fmt.Errorf("olliesrv: -ssh: %w", err)
	}
	return &sshd.Server{
		HostKey:        filepath.Join(state, sshd.HostKeyFile),
		AuthorizedKeys: keys,
		Namespace:      dir,
		Ollie: func(args []string, readOnly bool) *exec.Cmd {
			argv := append([]string{"ollie"}, args...)
			if readOnly {
				argv = append([]string{"ssh-readonly"}, argv...)
			}
			return exec.Command(exe, argv...)
		},
		Admin: adminCommand,
		// The sftp subsystem serves the namespace (ns/sftpns) in a child,
		// as a command runs: a read-only key's child has its rights.
		Subsystems: map[string]func(readOnly bool) *exec.Cmd{
			"sftp": func(readOnly bool) *exec.Cmd {
				if readOnly {
					return exec.Command(exe, "ssh-readonly", "sftp-server")
				}
				return exec.Command(exe, "sftp-server")
			},
		},
		Env:      childEnv(),
		KeyState: filepath.Join(state, "ssh"),
		Log:      log,
	}, nil
}

// adminCommand is what the listener runs for "olliesrv ARGS" from an
// admin key: the commands ollie-remote deploys and holds a host with when
// no OpenSSH serves it (tunnel/deploy/appliance.go), nothing else. They
// run the deployed binary when there is one, so that a deploy's commit is
// done by the version it replaces, as over OpenSSH; else this one.
func adminCommand(args []string) (*exec.Cmd, error) {
	allowed := len(args) > 0 && (slices.Contains([]string{"start", "restart", "version"}, args[0]) && len(args) == 1 ||
		args[0] == "install" && len(args) > 1 && slices.Contains([]string{"probe", "receive", "commit", "backends"}, args[1]))
	if !allowed {
		return nil, errors.New("this listener runs only olliesrv start, restart, version and install probe|receive|commit|backends (what ollie-remote uses)")
	}
	if args[0] == "install" && args[1] == "receive" {
		// Uploads go where deploy installs, nowhere else.
		home, err := os.UserHomeDir()
		if len(args) != 3 || err != nil || filepath.Clean(args[2]) != deploy.Root(home) {
			return nil, errors.New("olliesrv install receive takes uploads under ~/.local/share/ollie only")
		}
	}
	exe, err := deployedOrSelf()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, args...), nil
}

// deployedOrSelf is the binary ollie-remote deploy made current on this
// host, else the running one.
func deployedOrSelf() (string, error) {
	if exe := deployedBinary(); exe != "" {
		return exe, nil
	}
	return os.Executable()
}

// deployedBinary is ~/.local/share/ollie/current/olliesrv when it is an
// executable file, else "".
func deployedBinary() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	exe := filepath.Join(deploy.Root(home), "current", "olliesrv")
	if fi, err := os.Stat(exe); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0100 == 0 {
		return ""
	}
	return exe
}

// childEnv is the daemon's environment less what names a principal or a
// namespace: a command's rights come from its key, not from variables.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OLLIE_UNAME=") || strings.HasPrefix(kv, "OLLIE_AGENT") || strings.HasPrefix(kv, "NAMESPACE=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// sshFingerprintMain prints the listener's host key fingerprint as
// ssh-keygen -lf does, making the key if there is none yet.
func sshFingerprintMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: olliesrv ssh-fingerprint")
		return 2
	}
	var fp string
	key, err := hostKeyPath()
	if err == nil {
		fp, err = sshd.Fingerprint(key)
	}
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv ssh-fingerprint: %v\n", err)
		return 1
	}
	host, _ := os.Hostname()
	fmt.Fprintf(stdout, "256 %s olliesrv@%s (ED25519)\n", fp, host)
	return 0
}

// sshReadOnlyMain runs "ollie ARGS" with the namespace's read-only
// rights: what the listener runs for a key marked ollie-read-only.
func sshReadOnlyMain(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "ollie" && args[0] != "sftp-server" {
		fmt.Fprintln(stderr, "usage: olliesrv ssh-readonly ollie ARGS... | sftp-server")
		return 2
	}
	if err := sshd.ReadOnly(); err != nil {
		fmt.Fprintf(stderr, "olliesrv: %v\n", err)
		return 1
	}
	if args[0] == "sftp-server" {
		return sftpServerMain(args[1:], true, stderr)
	}
	return shell.Main(args[1:])
}

// sftpServerMain serves the namespace over SFTP on its standard input and
// output: the listener's sftp subsystem. readOnly refuses writes here too
// (a read-only key's namespace rights refuse them anyway).
func sftpServerMain(args []string, readOnly bool, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: olliesrv sftp-server (the listener runs it for the sftp subsystem)")
		return 2
	}
	srv := &sftpns.Server{ReadOnly: readOnly, Dial: func() (*client.Conn, error) { return client.Dial(nsdir.SocketPath()) }}
	if err := srv.Serve(stdio{}); err != nil {
		fmt.Fprintf(stderr, "olliesrv sftp-server: %v\n", err)
		return 1
	}
	return 0
}

// stdio is standard input and output as one connection.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	os.Stdin.Close()
	return os.Stdout.Close()
}

// startSSH listens on addr (so that a port in use fails the start) and
// serves the listener; failed receives Serve's error should it end
// before Shutdown.
func startSSH(addr, dir string, log *slog.Logger) (*sshd.Server, <-chan error, error) {
	srv, err := newSSHServer(dir, log)
	if err != nil {
		return nil, nil, err
	}
	// The host key first: a bad key file fails the start, not the first login.
	if _, err := sshd.LoadHostKey(srv.HostKey); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("-ssh: %w", err)
	}
	log.Info("olliesrv: ssh listener", "addr", ln.Addr(), "authorized_keys", srv.AuthorizedKeys)
	failed := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, sshd.ErrServerClosed) {
			failed <- err
		}
	}()
	return srv, failed, nil
}
