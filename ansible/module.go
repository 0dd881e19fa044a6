package ansible

// "olliesrv ansible goal|info ARGSFILE": the collection's module files
// are two-line wrappers that exec the deployed olliesrv with Ansible's
// arguments file; ollie_goal's action plugin runs the same wrapper with
// the become password on standard input.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"ollie/broker"
	"ollie/host/daemon"
	"ollie/internal/termsafe"
	"ollie/ns/client"
	"ollie/ns/nsdir"
)

// Usage is "olliesrv ansible"'s usage text.
const Usage = `usage: olliesrv ansible goal ARGSFILE   the ollie_goal module: run one agent goal, print its result as JSON
       olliesrv ansible info ARGSFILE   the ollie_info module: this host's version, sessions, agents and tools
       olliesrv ansible data ROOT TAR   the deploy role: make ROOT/data what TAR holds, print what changed
`

// A Module runs the collection's modules on this host.
type Module struct {
	// Version is this host's olliesrv version, given in ollie_info's result.
	Version string
	// Dial connects to the host's daemon, starting it when none runs
	// (DialDaemon).
	Dial func() (*client.Conn, error)
	// Stdin is where ollie_goal's action plugin writes the become password.
	Stdin io.Reader
}

// Main runs "olliesrv ansible ARGS" and prints one JSON object, as
// Ansible reads it: the module's result (its "failed" says whether the
// goal failed), or, exiting 1, why the module could not run.
func (m Module) Main(args []string, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	if len(args) == 3 && args[0] == "data" {
		changed, err := SyncData(args[1], args[2])
		if changed == nil {
			changed = []string{}
		}
		if err != nil {
			enc.Encode(map[string]any{"failed": true, "changed": changed, "msg": err.Error()})
			return 1
		}
		enc.Encode(map[string]any{"changed": changed})
		return 0
	}
	if len(args) != 2 || (args[0] != "goal" && args[0] != "info") {
		fmt.Fprint(stderr, Usage)
		return 2
	}
	failed := func(msg string) int {
		enc.Encode(map[string]any{"failed": true, "changed": false, "msg": msg})
		return 1
	}
	raw, err := ReadArgsFile(args[1])
	if err != nil {
		return failed(err.Error())
	}
	defer broker.Zero(raw)
	ctx := context.Background()
	switch args[0] {
	case "goal":
		a, err := ParseGoalArgs(raw)
		broker.Zero(raw)
		if a.PasswordInFile {
			ScrubArgsFile(args[1])
		}
		if err != nil {
			return failed(err.Error())
		}
		if a.PasswordStdin {
			if a.BecomePassword, err = readPasswordWithin(m.Stdin, passwordWait); err != nil {
				return failed(err.Error())
			}
		}
		c, err := m.Dial()
		if err != nil {
			broker.Zero(a.BecomePassword)
			return failed(err.Error())
		}
		defer c.Close()
		res := RunGoal(ctx, c, nsdir.NamespaceDir(), a)
		if a.PasswordInFile {
			res.Warnings = append(res.Warnings, "ollie_goal: become_password came in the arguments file, which Ansible wrote to disk, so it was ignored: "+
				"run ollie.fleet.ollie_goal from the installed collection, whose action plugin gives the password on standard input")
		}
		enc.Encode(res)
	case "info":
		c, err := m.Dial()
		if err != nil {
			return failed(err.Error())
		}
		defer c.Close()
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res := Info(ictx, c)
		res.Version = m.Version
		enc.Encode(res)
	}
	return 0
}

// passwordWait bounds the wait for the become password on standard
// input: the action plugin writes it at once and closes the pipe; a
// module run with the flag but no writer (a terminal, say) fails rather
// than hang its task.
const passwordWait = 10 * time.Second

// readPasswordWithin is ReadPassword, failing past d.
func readPasswordWithin(r io.Reader, d time.Duration) ([]byte, error) {
	type read struct {
		pw  []byte
		err error
	}
	ch := make(chan read, 1)
	go func() {
		pw, err := ReadPassword(r)
		ch <- read{pw, err}
	}()
	select {
	case x := <-ch:
		return x.pw, x.err
	case <-time.After(d):
		return nil, fmt.Errorf("olliesrv ansible: _ollie_password_stdin is set but standard input did not end within %s: run ollie_goal through the collection's action plugin", d)
	}
}

// DialDaemon dials the host's daemon, starting it first when none runs,
// as "olliesrv start" does: the running binary is the olliesrv that
// serves it.
func DialDaemon() (*client.Conn, error) {
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
