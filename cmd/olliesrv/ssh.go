package main

// The appliance listener's wiring (appliance): olliesrv -ssh ADDR, the
// ssh-fingerprint command, and the read-only re-exec its commands use.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"

	"ollie/appliance"
	"ollie/shell"
	"ollie/tunnel/deploy"
)

// adminCommand runs an admin key's "olliesrv ARGS" as appliance.AdminCommand
// allows, with uploads only where deploy installs.
func adminCommand(args []string) (*exec.Cmd, error) {
	uploads, _ := deploy.UserRoot() // none without a home
	return appliance.AdminCommand(args, uploads, deploy.CurrentOrSelf)
}

// sshFingerprintMain prints the listener's host key fingerprint as
// ssh-keygen -lf does, making the key if there is none yet.
func sshFingerprintMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: olliesrv ssh-fingerprint")
		return 2
	}
	var fp string
	key, err := appliance.HostKeyPath()
	if err == nil {
		fp, err = appliance.Fingerprint(key)
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
	if err := appliance.ReadOnly(); err != nil {
		fmt.Fprintf(stderr, "olliesrv: %v\n", err)
		return 1
	}
	if args[0] == "sftp-server" {
		return sftpServerMain(args[1:], true, stderr)
	}
	return shell.Main(args[1:])
}

// sftpServerMain is the listener's sftp subsystem (appliance.ServeSFTP).
func sftpServerMain(args []string, readOnly bool, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: olliesrv sftp-server (the listener runs it for the sftp subsystem)")
		return 2
	}
	if err := appliance.ServeSFTP(readOnly); err != nil {
		fmt.Fprintf(stderr, "olliesrv sftp-server: %v\n", err)
		return 1
	}
	return 0
}

// startSSH listens on addr (so that a port in use fails the start) and
// serves the listener; failed receives Serve's error should it end
// before Shutdown.
func startSSH(addr, dir string, log *slog.Logger) (*appliance.Server, <-chan error, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("olliesrv: -ssh: %w", err)
	}
	srv, err := appliance.Appliance(exe, dir, adminCommand, log)
	if err != nil {
		return nil, nil, fmt.Errorf("olliesrv: -ssh: %w", err)
	}
	// The host key first: a bad key file fails the start, not the first login.
	if _, err := appliance.LoadHostKey(srv.HostKey); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("-ssh: %w", err)
	}
	log.Info("olliesrv: ssh listener", "addr", ln.Addr(), "authorized_keys", srv.AuthorizedKeys)
	failed := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, appliance.ErrServerClosed) {
			failed <- err
		}
	}()
	return srv, failed, nil
}
