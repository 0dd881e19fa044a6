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
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"9fans.net/go/plan9"

	"golang.org/x/term"

	"ollie/chat"
	"ollie/internal/termsafe"
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

const (
	ollieUsageHead = `usage: ollie [-a ADDR | -H HOST] [-u UNAME] [COMMAND ARGS]

Commands:
`
	ollieUsageColumn = 18 // where the text of each command's help starts
)

// ollieUsageTail follows the commands in the usage text; %s is the
// default namespace.
const ollieUsageTail = `
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

// An ollieSubcommand is one command of ollie's. ollieTable declares them
// all: the usage text and Run's dispatch are both read from it.
type ollieSubcommand struct {
	name     string
	synopsis string // as the usage shows it; after "usage: ollie " it is the usage error
	help     string // what it does; the usage indents its further lines under the first
	// alone runs a command that is not one request on a connection (help, chat).
	alone func(o ollieOptions, args []string, stdin io.Reader, stdout, stderr io.Writer) int
	// args reads the command's arguments; nil means one PATH.
	args  func(args []string) (path string, long bool, ok bool)
	glob  bool // PATH may be a glob
	input bool // standard input is the request
	do    func(rq *ollieRequest) error
}

// ollieTable is in the order the usage lists the commands.
var ollieTable = []ollieSubcommand{
	{name: "ls", synopsis: "ls [-l] [PATH]", help: "list a directory (default /)",
		args: lsArgs, glob: true, do: (*ollieRequest).ls},
	{name: "read", synopsis: "read PATH", help: "print a file; a stream is followed until it ends or ^C",
		glob: true, do: (*ollieRequest).read},
	{name: "write", synopsis: "write PATH", help: "write standard input to PATH as one request",
		input: true, do: (*ollieRequest).write},
	{name: "rdwr", synopsis: "rdwr PATH", help: "send standard input as a request to PATH, print the reply",
		input: true, do: (*ollieRequest).rdwr},
	{name: "rdwrs", synopsis: "rdwrs PATH", help: "send standard input as a filter to PATH, print the items\nas they come until ^C",
		input: true, do: (*ollieRequest).rdwrs},
	{name: "stat", synopsis: "stat PATH", help: "print a file's metadata",
		glob: true, do: (*ollieRequest).stat},
	{name: "chat", synopsis: "chat [-profile P] [-model M] [AGENT-PATH]",
		help: "talk to an agent (default: the agent \"chat\" of the session\n" +
			"named after this directory, made if need be); /help there",
		alone: ollieChat},
	{name: "help", synopsis: "help", help: "print this help (read /help for the namespace reference)",
		alone: ollieHelp},
}

// ollieUsage is the usage text, a format for the default namespace, made
// from ollieTable by init: the table holds the help command, which prints
// it, so the text cannot be made in the table's own initialization.
var ollieUsage string

func init() {
	var b strings.Builder
	b.WriteString(ollieUsageHead)
	for _, c := range ollieTable {
		writeCommandHelp(&b, ollieUsageColumn, true, c.synopsis, c.help)
	}
	b.WriteString(ollieUsageTail)
	ollieUsage = b.String()
}

// ollieOptions are ollie's flags: which namespace, and as whom.
type ollieOptions struct {
	addr  string // -a, or the socket of -H's tunnel
	host  string // -H
	uname string
	start bool
}

func (o ollieOptions) dial() (*client.Conn, error) { return dialOrStart(o.addr, o.uname, o.start) }

// Main is the ollie command on the process's own stdin, stdout and stderr.
func Main(args []string) int { return Run(args, os.Stdin, os.Stdout, os.Stderr) }

// Run runs the ollie command with args (without the program name) and
// returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, args, status, done := parseOllieFlags(args, stdout, stderr)
	if done {
		return status
	}
	if len(args) == 0 {
		return runShell(o.addr, o.uname, o.start, stdin, stdout, stderr)
	}
	name, args := args[0], args[1:]
	if name == "-h" || name == "--help" {
		name = "help"
	}
	i := slices.IndexFunc(ollieTable, func(c ollieSubcommand) bool { return c.name == name })
	if i < 0 {
		return ollieUsageError(stderr, fmt.Sprintf("unknown command %q", name))
	}
	cmd := ollieTable[i]
	if cmd.alone != nil {
		return cmd.alone(o, args, stdin, stdout, stderr)
	}
	return o.request(cmd, args, stdin, stdout, stderr)
}

// parseOllieFlags reads ollie's flags and finds -H's tunnel; done says
// Run is to end with status.
func parseOllieFlags(args []string, stdout, stderr io.Writer) (o ollieOptions, rest []string, status int, done bool) {
	fl := flag.NewFlagSet("ollie", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringVar(&o.addr, "a", "", "")
	fl.StringVar(&o.uname, "u", os.Getenv("OLLIE_UNAME"), "")
	fl.BoolVar(&o.start, "start", false, "")
	fl.StringVar(&o.host, "H", "", "")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, ollieUsage, nsdir.SocketPath())
			return o, nil, ollieExitOK, true
		}
		return o, nil, ollieUsageError(stderr, err.Error()), true
	}
	if o.host == "" {
		return o, fl.Args(), 0, false
	}
	if o.addr != "" {
		return o, nil, ollieUsageError(stderr, "-a and -H name the namespace twice: give one"), true
	}
	sock, err := remoteSocket(o.host)
	if err != nil {
		fmt.Fprintf(stderr, "ollie: %v\n", err)
		return o, nil, ollieExitNoServer, true
	}
	o.addr = sock
	if _, err := os.Stat(o.addr); err != nil {
		fmt.Fprintf(stderr, "ollie: no tunnel to %s (%s is missing): run ollie-remote up %s\n", o.host, o.addr, o.host)
		return o, nil, ollieExitNoServer, true
	}
	return o, fl.Args(), 0, false
}

func ollieHelp(o ollieOptions, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, ollieUsage, nsdir.SocketPath())
	return ollieExitOK
}

func ollieChat(o ollieOptions, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runChat(args, o.host, o.dial, "", nil, stdin, stdout, stderr)
}

// onePath is the arguments of most commands: one PATH.
func onePath(args []string) (path string, long bool, ok bool) {
	if len(args) != 1 {
		return "", false, false
	}
	return args[0], false, true
}

// lsArgs is ls's arguments: -l, then a PATH, / if none.
func lsArgs(args []string) (path string, long bool, ok bool) {
	if len(args) > 0 && args[0] == "-l" {
		long, args = true, args[1:]
	}
	switch len(args) {
	case 0:
		return "/", long, true
	case 1:
		return args[0], long, true
	}
	return "", false, false
}

// An ollieRequest is what a command of ollie's works with: one path on
// one connection.
type ollieRequest struct {
	c       *client.Conn
	name    string // the path
	long    bool   // ls -l
	input   []byte // standard input, for a command that sends it
	ctx     context.Context
	rctx    context.Context    // ctx, bounded by requestTimeout
	rcancel context.CancelFunc // lifts the bound, for a command that waits as long as the person does
	content io.Writer          // a file's content goes here (contentWriter)
	stdout  io.Writer
}

// request runs cmd as one request on a connection of its own; ^C or
// SIGTERM flushes it.
func (o ollieOptions) request(cmd ollieSubcommand, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Check the arguments before connecting.
	parse := cmd.args
	if parse == nil {
		parse = onePath
	}
	name, long, ok := parse(args)
	if !ok {
		return ollieUsageError(stderr, "usage: ollie "+cmd.synopsis)
	}
	if !cmd.glob && client.HasGlob(name) {
		return ollieUsageError(stderr, globRefused(cmd.name))
	}

	// Read the request before catching signals, so that ^C while typing
	// it ends ollie as usual.
	var input []byte
	if cmd.input {
		var err error
		if input, err = io.ReadAll(stdin); err != nil {
			fmt.Fprintf(stderr, "ollie: reading standard input: %v\n", err)
			return ollieExitFailed
		}
	}

	c, err := o.dial()
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
	server := o.addr
	if o.host != "" {
		server = o.host
	}
	rctx, rcancel := bounded(ctx, c, server, requestTimeout())
	defer rcancel()

	content, flush := contentWriter(stdout)
	if client.HasGlob(name) {
		step := func() (context.Context, context.CancelFunc) { return bounded(ctx, c, server, requestTimeout()) }
		err = globCmd(ctx, step, c, cmd.name, name, client.Clean(name), "/", long, content, stdout, stderr)
	} else {
		rq := &ollieRequest{c: c, name: name, long: long, input: input, ctx: ctx, rctx: rctx, rcancel: rcancel, content: content, stdout: stdout}
		err = cmd.do(rq)
	}
	if te := timedOut(rctx); te != nil && err != nil {
		err = te
	}
	flush()
	return ollieReport(ctx, err, stderr)
}

func (rq *ollieRequest) ls() error {
	return ollieLs(rq.rctx, rq.c, rq.name, rq.name, rq.long, rq.stdout)
}

func (rq *ollieRequest) read() error {
	if _, err := rq.c.Stat(rq.rctx, rq.name); err != nil {
		return err
	}
	// The read itself waits as long as the person does: a stream (chat)
	// may be silent for as long as a tool runs.
	rq.rcancel()
	return rq.c.Follow(rq.ctx, rq.name, rq.content)
}

func (rq *ollieRequest) write() error { return rq.c.Write(rq.rctx, rq.name, rq.input) }

func (rq *ollieRequest) rdwr() error {
	reply, err := rq.c.RdWr(rq.rctx, rq.name, rq.input)
	rq.content.Write(reply)
	return err
}

func (rq *ollieRequest) rdwrs() error {
	rq.rcancel() // a subscription waits for events as long as the person does
	return rq.c.Subscribe(rq.ctx, rq.name, rq.input, rq.content)
}

func (rq *ollieRequest) stat() error { return ollieStat(rq.rctx, rq.c, rq.name, rq.stdout) }

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
