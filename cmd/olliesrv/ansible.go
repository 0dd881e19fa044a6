package main

// "olliesrv ansible goal|info ARGSFILE": the ollie.fleet collection's
// modules (contrib/ansible/ollie/fleet). The collection's module files
// are two-line wrappers that exec the deployed olliesrv with Ansible's
// arguments file; ollie_goal's action plugin runs the same wrapper with
// the become password on standard input. The logic is in package
// ansible.

import (
	"fmt"
	"os"
	"time"

	"ollie/internal/termsafe"
	"ollie/ns/client"
	"ollie/ns/daemon"
	"ollie/ns/nsdir"
)

// ensureDaemon dials the host's daemon, starting it first when none
// runs, as "olliesrv start" does.
func ensureDaemon() (*client.Conn, error) {
	if daemon.PID() == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if _, err := daemon.StartDetached(exe, 15*time.Second); err != nil {
			return nil, fmt.Errorf("olliesrv ansible: starting the daemon: %s", termsafe.Line(err.Error()))
		}
	}
	c, err := client.DialTimeout(nsdir.SocketPath(), "", 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("olliesrv ansible: %w", err)
	}
	return c, nil
}
