// Command olliesrv is ollie's host daemon. It serves sessions, agents,
// tools and approvals as a 9P2000 file system on the Unix socket
// $NAMESPACE/ollie.
//
// One binary carries every command a host needs: installed or linked under
// the name "ollie" it is the namespace client and shell.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"ollie/ansible"
	"ollie/shell"
	"ollie/toolsrv"
	"ollie/toolsrv/sandbox"
	"ollie/tunnel/deploy"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// The sandbox helper re-execs this binary to confine a tool; it must
	// run before anything else starts threads or reads arguments.
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	if toolsrv.IsChild() {
		toolsrv.ChildMain()
	}
	if filepath.Base(os.Args[0]) == "ollie" {
		os.Exit(shell.Main(os.Args[1:]))
	}
	os.Exit(olliesrvMain(os.Args[1:], os.Stdout, os.Stderr))
}

const olliesrvUsage = `usage: olliesrv [serve] [-tcp ADDR] [-ssh ADDR] [-v]   serve the namespace on $NAMESPACE/ollie
       olliesrv ollie ARGS...             the ollie client and shell (also as "ollie")
       olliesrv tools [run NAME [JSON]]   list this host's tools, or run one as an agent would
       olliesrv start | stop | restart    start the daemon detached, stop it, or restart it on the deployed binary
       olliesrv install manifest|commit   the host side of ollie-remote deploy (and probe|receive|backends)
       olliesrv ansible goal|info ARGSFILE the ollie.fleet collection's modules (contrib/ansible)
       olliesrv ssh-fingerprint           print the -ssh listener's host key fingerprint
       olliesrv version                   print the version
`

func olliesrvMain(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "" || args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveMain(args, stderr)
	case "ollie":
		return shell.Main(args)
	case "tools":
		return toolsMain(args, os.Stdin, stdout, stderr)
	case "start":
		return startMain(args, stdout, stderr)
	case "stop":
		return stopMain(args, stdout, stderr)
	case "restart":
		return restartMain(args, stdout, stderr)
	case "ansible":
		return ansible.Module{Version: version, Dial: ansible.DialDaemon, Stdin: os.Stdin}.Main(args, stdout, stderr)
	case "install":
		return deploy.Install(args, os.Stdin, stdout, stderr)
	case "ssh-fingerprint":
		return sshFingerprintMain(args, stdout, stderr)
	case "ssh-readonly":
		return sshReadOnlyMain(args, stderr)
	case "sftp-server":
		return sftpServerMain(args, false, stderr)
	case "version":
		fmt.Fprintln(stdout, "olliesrv", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, olliesrvUsage)
		return 0
	}
	fmt.Fprintf(stderr, "olliesrv: unknown command %q\n%s", cmd, olliesrvUsage)
	return 2
}
