package main

// Starting and stopping the daemon from a command: "olliesrv start" (what
// ollie-remote up and the ollie command run on a host), "olliesrv stop",
// and the restart an upgrade needs.

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"ollie/host/daemon"
	"ollie/internal/termsafe"
	"ollie/ns/nsdir"
)

const startUsage = `usage: olliesrv start     start the daemon detached (or report the running one)
       olliesrv stop      stop the running daemon and wait for it to exit
       olliesrv restart   have the running daemon start again on the deployed binary (SIGHUP)
`

func startMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprint(stderr, startUsage)
		return 2
	}
	sock := nsdir.SocketPath()
	if pid := daemon.PID(); pid != 0 {
		fmt.Fprintf(stdout, "running %s pid %d\n", sock, pid)
		return 0
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv start: %v\n", err)
		return 1
	}
	pid, err := daemon.StartDetached(exe, 15*time.Second)
	if err != nil {
		// The error carries the daemon log's tail: one line, made safe.
		fmt.Fprintf(stderr, "olliesrv start: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "started %s pid %d\n", sock, pid)
	return 0
}

func stopMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprint(stderr, startUsage)
		return 2
	}
	pid := daemon.PID()
	if pid == 0 {
		fmt.Fprintln(stdout, "not running")
		return 0
	}
	if err := daemon.Stop(30 * time.Second); err != nil {
		fmt.Fprintf(stderr, "olliesrv stop: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "stopped pid %d\n", pid)
	return 0
}

// restartMain asks the running daemon to start again on the deployed
// binary: SIGHUP, on which serve shuts down as on SIGTERM and re-executes
// itself in the same process, so a supervisor (systemd, a container's
// runtime) sees no exit, and its -ssh listener comes back on its port.
// It does not wait: the listener that ran this command is going away.
func restartMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprint(stderr, startUsage)
		return 2
	}
	pid := daemon.PID()
	if pid == 0 {
		fmt.Fprintln(stderr, "olliesrv restart: no daemon is running")
		return 1
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		fmt.Fprintf(stderr, "olliesrv restart: pid %d: %v\n", pid, err)
		return 1
	}
	fmt.Fprintf(stdout, "restarting pid %d\n", pid)
	return 0
}
