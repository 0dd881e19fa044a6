// Package shell is the ollie command: the namespace client ("ollie ls",
// "read", "write", "rdwr", "stat", with stable exit statuses) and the
// interactive shell over it, with completion, history and ^C as Tflush.
// ls, read (the shell's cat) and stat take globs, expanded against the
// server's listings by ns/client's Glob, and prefix each line of output
// with the path of the file it came from (glob.go); commands that write
// refuse them, since a request goes to one file. It is a client only: it
// trusts the server it dials no further than to show its text made safe
// (internal/termsafe), and it serves no files, so the appliance listener
// can run it over SSH as readily as a terminal does.
package shell

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"9fans.net/go/plan9"

	"golang.org/x/term"

	"ollie/internal/termsafe"
	"ollie/ns/chat"
	"ollie/ns/client"
	"ollie/ns/nsdir"
)

// Exit statuses of ollie. Scripts depend on them: keep them stable and in
// step with the usage text.
const (
	ollieExitOK          = 0
	ollieExitFailed      = 1 // the server answered an error, or a script command failed
	ollieExitUsage       = 2
	ollieExitNoServer    = 3 // cannot connect, or the connection was lost
	ollieExitInterrupted = 130
)

const ollieUsage = `usage: ollie [-a ADDR | -H HOST] [-u UNAME] [COMMAND ARGS]

Commands:
  ls [-l] [PATH]  list a directory (default /)
  read PATH       print a file; a stream is followed until it ends or ^C
  write PATH      write standard input to PATH as one request
  rdwr PATH       send standard input as a request to PATH, print the reply
  rdwrs PATH      send standard input as a filter to PATH, print the items
                  as they come until ^C
  stat PATH       print a file's metadata
  chat [-profile P] [-model M] [AGENT-PATH]
                  talk to an agent (default: the agent "chat" of the session
                  named after this directory, made if need be); /help there
  help            print this help (read /help for the namespace reference)

PATH may be a glob for ls, read and stat: *, ? and [...] ([^...] negates)
match within one element of the path, against the names its directory
lists (\ quotes them), so 'host/*/session/*/agent/*/state' names every
agent's state on every host of a fleet. The files matched are taken in
lexical order, each line of output prefixed with the file's path and
": " (ls shows a file as its path). A directory that cannot be listed
matches nothing; no match at all is an error (exit 1). A glob in write,
rdwr or rdwrs is refused.

With no command ollie is a shell on the namespace: interactive on a
terminal (type help there), otherwise it runs the commands on standard
input, one a line.

What the server chose is shown as text, never as terminal commands: in
names, metadata and error messages every control character (escape
sequences, newlines, tabs, bidi controls, bytes that are not UTF-8) is
shown escaped, as \x1b or \u009b; so is the content read, rdwr and rdwrs
print when standard output is a terminal (keeping newlines and tabs). Piped
or redirected, content is passed on byte for byte.

Flags:
  -a ADDR   the namespace: a Unix socket path, tcp!HOST!PORT or HOST:PORT
            (default %s, from $NAMESPACE)
  -H HOST   the namespace of HOST, forwarded by "ollie-remote up HOST"
  -u UNAME  the user name to attach with (default $OLLIE_UNAME). It
            proves nothing: olliesrv's own user is the admin whatever the
            name, a sandboxed tool is the agent whose $OLLIE_AGENT_TOKEN it
            holds, and anyone else only reads
  -start    start olliesrv first if the default namespace has none (the
            command ollie-remote installs on hosts passes it)

Exit status:
  0    success
  1    the server answered an error; in a script, some command failed
  2    usage error
  3    cannot connect to olliesrv, or the connection was lost
  130  interrupted (SIGINT or SIGTERM)
`

// Main is the ollie command on the process's own stdin, stdout and stderr.
func Main(args []string) int { return Run(args, os.Stdin, os.Stdout, os.Stderr) }

// Run runs the ollie command with args (without the program name) and
// returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("ollie", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	addr := fl.String("a", "", "")
	uname := fl.String("u", os.Getenv("OLLIE_UNAME"), "")
	start := fl.Bool("start", false, "")
	host := fl.String("H", "", "")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, ollieUsage, nsdir.SocketPath())
			return ollieExitOK
		}
		return ollieUsageError(stderr, err.Error())
	}
	args = fl.Args()
	if *host != "" {
		if *addr != "" {
			return ollieUsageError(stderr, "-a and -H name the namespace twice: give one")
		}
		sock, err := remoteSocket(*host)
		if err != nil {
			fmt.Fprintf(stderr, "ollie: %v\n", err)
			return ollieExitNoServer
		}
		*addr = sock
		if _, err := os.Stat(*addr); err != nil {
			fmt.Fprintf(stderr, "ollie: no tunnel to %s (%s is missing): run ollie-remote up %s\n", *host, *addr, *host)
			return ollieExitNoServer
		}
	}
	if len(args) == 0 {
		return runShell(*addr, *uname, *start, stdin, stdout, stderr)
	}
	cmd, args := args[0], args[1:]

	// Check the arguments before connecting.
	long := false
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprintf(stdout, ollieUsage, nsdir.SocketPath())
		return ollieExitOK
	case "ls":
		if len(args) > 0 && args[0] == "-l" {
			long, args = true, args[1:]
		}
		if len(args) > 1 {
			return ollieUsageError(stderr, "usage: ollie ls [-l] [PATH]")
		}
		if len(args) == 0 {
			args = []string{"/"}
		}
	case "read", "write", "rdwr", "rdwrs", "stat":
		if len(args) != 1 {
			return ollieUsageError(stderr, "usage: ollie "+cmd+" PATH")
		}
		if cmd != "read" && cmd != "stat" && client.HasGlob(args[0]) {
			return ollieUsageError(stderr, globRefused(cmd))
		}
	case "chat":
		where := ""
		if *host != "" {
			where = *host
		}
		return runChat(args, where, func() (*client.Conn, error) { return dialOrStart(*addr, *uname, *start) }, "", nil, stdin, stdout, stderr)
	default:
		return ollieUsageError(stderr, fmt.Sprintf("unknown command %q", cmd))
	}
	name := args[0]

	// Read the request before catching signals, so that ^C while typing
	// it ends ollie as usual.
	var input []byte
	if cmd == "write" || cmd == "rdwr" || cmd == "rdwrs" {
		var err error
		if input, err = io.ReadAll(stdin); err != nil {
			fmt.Fprintf(stderr, "ollie: reading standard input: %v\n", err)
			return ollieExitFailed
		}
	}

	c, err := dialOrStart(*addr, *uname, *start)
	if err != nil {
		return ollieDialError(stderr, err)
	}
	defer c.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal a second one ends ollie at once, even if the
	// server does not answer the flush.
	context.AfterFunc(ctx, stop)
	// A person waits on these: a host that answers nothing must not hold
	// them (see requestTimeout).
	server := *addr
	if *host != "" {
		server = *host
	}
	rctx, rcancel := bounded(ctx, c, server, requestTimeout())
	defer rcancel()

	content, flush := contentWriter(stdout)
	switch {
	case client.HasGlob(name):
		step := func() (context.Context, context.CancelFunc) { return bounded(ctx, c, server, requestTimeout()) }
		err = globCmd(ctx, step, c, cmd, name, client.Clean(name), "/", long, content, stdout, stderr)
	case cmd == "ls":
		err = ollieLs(rctx, c, name, name, long, stdout)
	case cmd == "read":
		if _, err = c.Stat(rctx, name); err == nil {
			// The read itself waits as long as the person does: a
			// stream (chat) may be silent for as long as a tool runs.
			rcancel()
			err = c.Follow(ctx, name, content)
		}
	case cmd == "write":
		err = c.Write(rctx, name, input)
	case cmd == "rdwr":
		var reply []byte
		reply, err = c.RdWr(rctx, name, input)
		content.Write(reply)
	case cmd == "rdwrs":
		rcancel() // a subscription waits for events as long as the person does
		err = c.Subscribe(ctx, name, input, content)
	case cmd == "stat":
		err = ollieStat(rctx, c, name, stdout)
	}
	if te := timedOut(rctx); te != nil && err != nil {
		err = te
	}
	flush()
	return ollieReport(ctx, err, stderr)
}

func ollieUsageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "ollie: %s\nrun 'ollie help' for usage\n", termsafe.Line(msg))
	return ollieExitUsage
}

// contentWriter is where a file's content goes: w itself when it is piped
// or redirected, so that scripts get the bytes, and on a terminal a
// termsafe.Writer, so that the server's bytes are shown rather than acted
// on (as ls quotes names on a terminal). flush ends the output.
func contentWriter(w io.Writer) (out io.Writer, flush func()) {
	if !writesToTerminal(w) {
		return w, func() {}
	}
	sw := termsafe.NewWriter(w)
	return sw, func() { sw.Flush() }
}

// writesToTerminal reports whether w is a terminal.
func writesToTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ollieDialError reports a failure to connect: a bad address is a usage
// error, anything else means no server.
func ollieDialError(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, termsafe.Line(err.Error()))
	var de *client.DialError
	if !errors.As(err, &de) {
		return ollieExitUsage
	}
	return ollieExitNoServer
}

// ollieReport prints err, if any, and returns the exit status for it.
// Nothing is printed for an interruption the user asked for.
func ollieReport(ctx context.Context, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return ollieExitOK
	case ctx.Err() != nil:
		return ollieExitInterrupted
	case errors.Is(err, errReported):
		return ollieExitFailed
	}
	ollieError(stderr, err)
	if errors.Is(err, client.ErrConnLost) {
		return ollieExitNoServer
	}
	return ollieExitFailed
}

// ollieError prints err as "ollie: PATH: message", one line: the message
// may be the server's (an Rerror's text), so its control characters are
// made visible.
func ollieError(stderr io.Writer, err error) {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		fmt.Fprintf(stderr, "ollie: %s: %s\n", termsafe.Line(pe.Path), termsafe.Line(pe.Err.Error()))
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "ollie: ") {
		msg = "ollie: " + msg
	}
	fmt.Fprintln(stderr, termsafe.Line(msg))
}

// ollieLs lists the directory at name (shown as arg): one entry a line,
// directories with a trailing slash; long adds mode, owner, group and
// length. A file lists as arg. Names, owners and groups are the server's:
// their control characters are made visible, so one entry is one line.
func ollieLs(ctx context.Context, c *client.Conn, name, arg string, long bool, w io.Writer) error {
	dirs, err := c.Ls(ctx, name)
	if err != nil {
		return err
	}
	type row struct{ mode, uid, gid, length, name string }
	var rows []row
	var wuid, wgid, wlen int
	for _, d := range dirs {
		shown := d.Name
		if strings.Contains(shown, "/") { // not an entry of a directory: the file itself
			shown = arg
		}
		shown = termsafe.Line(shown)
		if d.Qid.Type&plan9.QTDIR != 0 && !strings.HasSuffix(shown, "/") {
			shown += "/"
		}
		if !long {
			fmt.Fprintln(w, shown)
			continue
		}
		r := row{ollieMode(d.Mode), termsafe.Line(d.Uid), termsafe.Line(d.Gid), fmt.Sprint(d.Length), shown}
		wuid, wgid, wlen = max(wuid, len(r.uid)), max(wgid, len(r.gid)), max(wlen, len(r.length))
		rows = append(rows, r)
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s %-*s %-*s %*s %s\n", r.mode, wuid, r.uid, wgid, r.gid, wlen, r.length, r.name)
	}
	return nil
}

// ollieMode renders a mode as ls does: d or -, then rwx for owner, group
// and others.
func ollieMode(m plan9.Perm) string {
	const rwx = "rwxrwxrwx"
	b := []byte("----------")
	if m&plan9.DMDIR != 0 {
		b[0] = 'd'
	}
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	return string(b)
}

// ollieStat prints the metadata of the file at name, one "key value"
// line each, the server's strings made safe.
func ollieStat(ctx context.Context, c *client.Conn, name string, w io.Writer) error {
	d, err := c.Stat(ctx, name)
	if err != nil {
		return err
	}
	kind := "file"
	if d.Qid.Type&plan9.QTDIR != 0 {
		kind = "dir"
	}
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintf(tw, "path\t%s\n", termsafe.Line(client.Clean(name)))
	fmt.Fprintf(tw, "name\t%s\n", termsafe.Line(d.Name))
	fmt.Fprintf(tw, "type\t%s\n", kind)
	fmt.Fprintf(tw, "mode\t%s\n", ollieMode(d.Mode))
	fmt.Fprintf(tw, "owner\t%s\n", termsafe.Line(d.Uid))
	fmt.Fprintf(tw, "group\t%s\n", termsafe.Line(d.Gid))
	fmt.Fprintf(tw, "length\t%d\n", d.Length)
	fmt.Fprintf(tw, "qid\t%v\n", d.Qid)
	fmt.Fprintf(tw, "mtime\t%s\n", time.Unix(int64(d.Mtime), 0).UTC().Format(time.RFC3339))
	return tw.Flush()
}

const chatUsage = "usage: ollie chat [-profile PROFILE] [-model MODEL] [AGENT-PATH]"

// runChat is the chat command, from ollie and from the shell (where an
// agent's directory is the default agent, cwd).
func runChat(args []string, where string, dial func() (*client.Conn, error), cwd string, keys io.Reader, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("chat", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	profile := fl.String("profile", "", "")
	model := fl.String("model", "", "")
	if err := fl.Parse(args); err != nil || fl.NArg() > 1 {
		return ollieUsageError(stderr, chatUsage)
	}
	opt := chat.Options{Profile: *profile, Model: *model, Where: where, Dial: dial, Path: fl.Arg(0), Keys: keys}
	if opt.Path == "" && strings.HasPrefix(cwd, "/session/") && strings.Count(cwd, "/") == 4 && strings.Contains(cwd, "/agent/") {
		opt.Path = cwd
	}
	var err error
	if opt.Cwd, err = os.Getwd(); err != nil {
		fmt.Fprintf(stderr, "ollie chat: %v\n", err)
		return ollieExitFailed
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return chat.Run(ctx, opt, stdin, stdout, stderr)
}
