package appliance

// The listener as olliesrv runs it: its own binary re-run for each
// command, the few admin commands ollie-remote needs, and its files in
// the daemon user's own directories.

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"ollie/appliance/sftpns"
	"ollie/internal/paths"
	"ollie/ns/client"
	"ollie/ns/nsdir"
)

// HostKeyPath is the listener's host key:
// $XDG_STATE_HOME/ollie/ssh_host_ed25519_key.
func HostKeyPath() (string, error) {
	dir, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, HostKeyFile), nil
}

// Appliance is the listener for the namespace in dir as olliesrv serves
// it: its commands are exe as "exe ollie ARGS" and its sftp subsystem
// "exe sftp-server", each behind "exe ssh-readonly" for a read-only key;
// admin makes an admin key's "olliesrv ARGS" (see AdminCommand). Keys
// come from ~/.config/ollie/authorized_keys; the host key and each key's
// state are in the state directory.
func Appliance(exe, dir string, admin func(args []string) (*exec.Cmd, error), log *slog.Logger) (*Server, error) {
	keys, ok := paths.UserDir("authorized_keys")
	if !ok {
		return nil, errors.New("no home directory for ~/.config/ollie/authorized_keys")
	}
	state, err := paths.StateDir()
	if err != nil {
		return nil, err
	}
	return &Server{
		HostKey:        filepath.Join(state, HostKeyFile),
		AuthorizedKeys: keys,
		Namespace:      dir,
		Ollie: func(args []string, readOnly bool) *exec.Cmd {
			argv := append([]string{"ollie"}, args...)
			if readOnly {
				argv = append([]string{"ssh-readonly"}, argv...)
			}
			return exec.Command(exe, argv...)
		},
		Admin: admin,
		// The sftp subsystem serves the namespace (appliance/sftpns) in a child,
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

// AdminCommand is the Admin of olliesrv's listener: the commands
// ollie-remote deploys and holds a host with when no OpenSSH serves it
// (tunnel/deploy/appliance.go), nothing else, run with the binary
// binary names. That is the deployed binary when there is one, so that a
// deploy's commit is done by the version it replaces, as over OpenSSH.
// uploads is the one directory "install receive" may write to; ""
// refuses every upload.
func AdminCommand(args []string, uploads string, binary func() (string, error)) (*exec.Cmd, error) {
	allowed := len(args) > 0 && (slices.Contains([]string{"start", "restart", "version"}, args[0]) && len(args) == 1 ||
		args[0] == "install" && len(args) > 1 && slices.Contains([]string{"probe", "receive", "commit", "backends"}, args[1]))
	if !allowed {
		return nil, errors.New("this listener runs only olliesrv start, restart, version and install probe|receive|commit|backends (what ollie-remote uses)")
	}
	if args[0] == "install" && args[1] == "receive" {
		if len(args) != 3 || uploads == "" || filepath.Clean(args[2]) != uploads {
			return nil, errors.New("olliesrv install receive takes uploads under ~/.local/share/ollie only")
		}
	}
	exe, err := binary()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, args...), nil
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

// ServeSFTP serves the namespace over SFTP on standard input and output:
// the child the listener runs for its sftp subsystem. readOnly refuses
// writes here too (a read-only key's namespace rights refuse them
// anyway).
func ServeSFTP(readOnly bool) error {
	srv := &sftpns.Server{ReadOnly: readOnly, Dial: func() (*client.Conn, error) { return client.Dial(nsdir.SocketPath()) }}
	return srv.Serve(stdio{})
}

// stdio is standard input and output as one connection.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	os.Stdin.Close()
	return os.Stdout.Close()
}
