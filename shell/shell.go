package shell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"9fans.net/go/plan9"
	"github.com/chzyer/readline"

	"ollie/internal/paths"
	"ollie/internal/termsafe"
	"ollie/ns/client"
)

const (
	shellHelpHead = `ollie shell: paths are relative to the working directory; / is the root.
`
	shellHelpTail = `ls, cat and stat take globs (* ? [...] within one element, 'host/*/name'):
each file matched in lexical order, each line prefixed with its path.
Quote with '...' or "..."; # starts a comment. ^C interrupts a command; ^D leaves.
Control characters the server sent are shown escaped (\x1b); content only on a terminal.
`
	shellHelpColumn = 28 // where the text of each command's help starts
)

// A shellCommand is one command of the shell. shellTable declares them
// all: the help text and the dispatch are both read from it.
type shellCommand struct {
	name     string
	synopsis string // as help shows it
	help     string // what it does; help indents its further lines under the first
	run      func(sh *ollieShell, ctx context.Context, call shellCall) error
}

// shellTable is in the order help lists the commands.
var shellTable = []shellCommand{
	{"cd", "cd [DIR]", "change directory (default /)", (*ollieShell).cd},
	{"pwd", "pwd", "print the working directory", (*ollieShell).pwd},
	{"ls", "ls [-l] [PATH...]", "list directories", (*ollieShell).ls},
	{"cat", "cat FILE...", "print files; streams are followed until they end or ^C", (*ollieShell).cat},
	{"echo", "echo [-n] TEXT > FILE", "write TEXT and a newline to FILE as one request (>> too)", (*ollieShell).echo},
	{"rdwr", "rdwr FILE [TEXT...]", "send TEXT and a newline as a request to FILE, print the reply", (*ollieShell).rdwr},
	{"rdwrs", "rdwrs FILE [FILTER...]", "subscribe to FILE with FILTER, print items as they come until ^C", (*ollieShell).rdwr},
	{"stat", "stat PATH...", "print metadata", (*ollieShell).stat},
	{"chat", "chat [-profile P] [-model M] [AGENT]", "talk to an agent (default: this directory's\n" +
		"agent, else the chat agent of the session named after\n" +
		"the directory ollie started in); /help there", (*ollieShell).chat},
	{"help", "help", "this help; cat /help prints the namespace reference", (*ollieShell).help},
	{"exit", "exit [N]", "leave the shell", (*ollieShell).exit},
}

// shellHelp is the help command's text, made from shellTable by init:
// the table holds the help command, so the text cannot be made in the
// table's own initialization.
var shellHelp string

func init() {
	var b strings.Builder
	b.WriteString(shellHelpHead)
	for _, c := range shellTable {
		writeCommandHelp(&b, shellHelpColumn, false, c.synopsis, c.help)
	}
	b.WriteString(shellHelpTail)
	shellHelp = b.String()
}

// shellCommands are the shell's command names in lexical order, for completion.
var shellCommands = func() []string {
	var names []string
	for _, c := range shellTable {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}()

// writeCommandHelp writes one command's entry in a help text: the
// synopsis indented by two spaces, then from column col the help, its
// further lines indented to col. A synopsis too long for its column is
// followed by two spaces, or with wrap by the help on lines of its own.
func writeCommandHelp(b *strings.Builder, col int, wrap bool, synopsis, help string) {
	b.WriteString("  " + synopsis)
	indent := strings.Repeat(" ", col)
	switch gap := col - 2 - len(synopsis); {
	case gap >= 2:
		b.WriteString(strings.Repeat(" ", gap))
	case wrap:
		b.WriteString("\n" + indent)
	default:
		b.WriteString("  ")
	}
	b.WriteString(strings.ReplaceAll(help, "\n", "\n"+indent) + "\n")
}

// An ollieShell runs command lines against one connection to the namespace.
type ollieShell struct {
	conn        *client.Conn
	dial        func() (*client.Conn, error) // a connection of its own, for chat
	cwd         string
	stdout      *shellOutput
	stderr      io.Writer
	interactive bool
	ttyOut      bool // stdout is a terminal: content is made safe (contentWriter)
	failed      bool // a command failed (script mode's exit status)

	mu     sync.Mutex
	cancel context.CancelFunc // ends the running command; nil between commands
}

// shellExit is returned by the exit command.
type shellExit int

func (e shellExit) Error() string { return "exit " + strconv.Itoa(int(e)) }

// runShell connects and runs the shell: interactive when stdin is a
// terminal, else a script read from stdin.
func runShell(addr, uname string, start bool, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := dialOrStart(addr, uname, start)
	if err != nil {
		return ollieDialError(stderr, err)
	}
	defer c.Close()
	sh := &ollieShell{conn: c, cwd: "/", stdout: &shellOutput{w: stdout}, stderr: stderr, ttyOut: writesToTerminal(stdout),
		dial: func() (*client.Conn, error) { return dialOrStart(addr, uname, false) }}

	// SIGINT interrupts the running command, never the shell.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	done := make(chan struct{})
	defer func() {
		signal.Stop(sigs)
		close(done)
	}()
	go func() {
		for {
			select {
			case <-sigs:
				sh.interrupt()
			case <-done:
				return
			}
		}
	}()

	if f, ok := stdin.(*os.File); ok && readline.IsTerminal(int(f.Fd())) {
		sh.interactive = true
		return sh.repl(stdout, stderr)
	}
	return sh.script(stdin)
}

func (sh *ollieShell) interrupt() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cancel != nil {
		sh.cancel()
	}
}

// repl reads commands with line editing, completion and history.
func (sh *ollieShell) repl(stdout, stderr io.Writer) int {
	cfg := &readline.Config{
		Prompt:            sh.prompt(),
		HistoryFile:       shellHistoryPath(),
		HistorySearchFold: true,
		// Saved by repl before it runs the line: readline's own saving
		// races with a shell that exits right after reading "exit".
		DisableAutoSaveHistory: true,
		AutoComplete:           shellCompleter{sh},
		Stdout:                 stdout,
		Stderr:                 stderr,
	}
	hub := newStdinHub(os.Stdin)
	keys := hub.reader()
	cfg.Stdin = keys
	rl, err := readline.NewEx(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ollie: %v\n", err)
		return ollieExitFailed
	}
	defer func() { rl.Close(); keys.Close() }()
	for {
		rl.SetPrompt(sh.prompt())
		line, err := rl.Readline()
		switch {
		case errors.Is(err, readline.ErrInterrupt):
			continue
		case errors.Is(err, io.EOF):
			return ollieExitOK
		case err != nil:
			fmt.Fprintf(stderr, "ollie: %v\n", err)
			return ollieExitFailed
		}
		if strings.TrimSpace(line) != "" {
			rl.SaveHistory(line) // a history that cannot be saved is no reason to stop
		}
		if words := strings.Fields(line); len(words) > 0 && words[0] == "chat" {
			// The chat reads the terminal itself: the line editor, which
			// reads it all the while it is open, makes way.
			rl.Close()
			keys.Close()
			chatKeys := hub.reader()
			runChat(words[1:], "", sh.dial, sh.cwd, chatKeys, os.Stdin, os.Stdout, stderr)
			chatKeys.Close()
			keys = hub.reader()
			cfg.Stdin = keys
			if rl, err = readline.NewEx(cfg); err != nil {
				fmt.Fprintf(stderr, "ollie: %v\n", err)
				return ollieExitFailed
			}
			continue
		}
		if quit, status := sh.runLine(line); quit {
			return status
		}
	}
}

// prompt shows the working directory, whose names the server chose.
func (sh *ollieShell) prompt() string { return "ollie:" + termsafe.Line(sh.cwd) + "% " }

// script runs the commands on r, one a line, and returns 1 if any failed.
func (sh *ollieShell) script(r io.Reader) int {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if quit, status := sh.runLine(sc.Text()); quit {
			return status
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(sh.stderr, "ollie: reading commands: %v\n", err)
		return ollieExitFailed
	}
	return sh.status()
}

func (sh *ollieShell) status() int {
	if sh.failed {
		return ollieExitFailed
	}
	return ollieExitOK
}

// runLine runs one command line; quit says the shell is to end with status.
func (sh *ollieShell) runLine(line string) (quit bool, status int) {
	words, err := shellSplit(line)
	if err != nil {
		fmt.Fprintf(sh.stderr, "ollie: %v\n", err)
		sh.failed = true
		return false, 0
	}
	if len(words) == 0 {
		return false, 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	sh.mu.Lock()
	sh.cancel = cancel
	sh.mu.Unlock()
	sh.stdout.wrote = false
	err = sh.command(ctx, words)
	sh.mu.Lock()
	sh.cancel = nil
	sh.mu.Unlock()
	interrupted := ctx.Err() != nil
	cancel()

	// Keep the prompt at the start of a line.
	if sh.interactive && (interrupted || sh.stdout.wrote && sh.stdout.last != '\n') {
		io.WriteString(sh.stdout, "\n")
	}
	var exit shellExit
	switch {
	case err == nil:
	case errors.As(err, &exit):
		return true, int(exit)
	case interrupted:
		if !sh.interactive {
			fmt.Fprintln(sh.stderr, "ollie: interrupted")
		}
	case errors.Is(err, client.ErrConnLost):
		ollieError(sh.stderr, err)
		return true, ollieExitNoServer
	case errors.Is(err, errReported):
		sh.failed = true
	default:
		ollieError(sh.stderr, err)
		sh.failed = true
	}
	return false, 0
}

// abs resolves a path against the working directory.
func (sh *ollieShell) abs(p string) string {
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	return path.Join(sh.cwd, p)
}

// A shellCall is a command line parsed: the command, its arguments and
// the redirection of its output, if any.
type shellCall struct {
	name     string
	args     []string
	redirect string // ">" or ">>", or "" for none
	target   string // the file redirect names
}

// parseCall reads a command line's words as a shellCall.
func parseCall(words []shellWord) (shellCall, error) {
	if words[0].op != "" {
		return shellCall{}, fmt.Errorf("syntax error: %s with no command", words[0].op)
	}
	call := shellCall{name: words[0].text}
	for i := 1; i < len(words); i++ {
		w := words[i]
		if w.op == "" {
			call.args = append(call.args, w.text)
			continue
		}
		if call.redirect != "" || i+1 == len(words) || words[i+1].op != "" {
			return shellCall{}, fmt.Errorf("syntax error: %s takes one file", w.op)
		}
		call.redirect, call.target = w.op, words[i+1].text
		i++
	}
	return call, nil
}

// command runs one parsed command.
func (sh *ollieShell) command(ctx context.Context, words []shellWord) error {
	call, err := parseCall(words)
	if err != nil {
		return err
	}
	if call.redirect != "" && call.name != "echo" {
		return fmt.Errorf("%s: only echo writes with %s (try rdwr or echo)", call.name, call.redirect)
	}
	i := slices.IndexFunc(shellTable, func(c shellCommand) bool { return c.name == call.name })
	if i < 0 {
		return fmt.Errorf("%s: unknown command (type help)", call.name)
	}
	return shellTable[i].run(sh, ctx, call)
}

func (sh *ollieShell) help(ctx context.Context, call shellCall) error {
	io.WriteString(sh.stdout, shellHelp)
	return nil
}

func (sh *ollieShell) exit(ctx context.Context, call shellCall) error {
	switch len(call.args) {
	case 0:
		if sh.interactive {
			return shellExit(ollieExitOK)
		}
		return shellExit(sh.status())
	case 1:
		n, err := strconv.Atoi(call.args[0])
		if err != nil || n < 0 || n > 255 {
			return fmt.Errorf("exit: %q is not a status from 0 to 255", call.args[0])
		}
		return shellExit(n)
	}
	return errors.New("usage: exit [N]")
}

func (sh *ollieShell) pwd(ctx context.Context, call shellCall) error {
	fmt.Fprintln(sh.stdout, termsafe.Line(sh.cwd))
	return nil
}

func (sh *ollieShell) cd(ctx context.Context, call shellCall) error {
	if len(call.args) > 1 {
		return errors.New("usage: cd [DIR]")
	}
	dir := "/"
	if len(call.args) == 1 {
		if client.HasGlob(call.args[0]) {
			return errors.New("cd: a glob in cd: name one directory")
		}
		dir = sh.abs(call.args[0])
	}
	d, err := sh.conn.Stat(ctx, dir)
	if err != nil {
		return err
	}
	if d.Qid.Type&plan9.QTDIR == 0 {
		return fmt.Errorf("cd: %s: not a directory", dir)
	}
	sh.cwd = dir
	return nil
}

// ls lists each of its arguments in turn: one that fails is reported and
// the rest are still listed, unless the command was interrupted or the
// connection lost.
func (sh *ollieShell) ls(ctx context.Context, call shellCall) error {
	args, out := call.args, sh.stdout
	long := false
	if len(args) > 0 && args[0] == "-l" {
		long, args = true, args[1:]
	}
	if len(args) == 0 {
		args = []string{"."}
	}
	var failed error
	for i, a := range args {
		if len(args) > 1 {
			if i > 0 {
				fmt.Fprintln(out)
			}
			fmt.Fprintf(out, "%s:\n", termsafe.Line(a))
		}
		var err error
		if client.HasGlob(a) {
			err = sh.glob(ctx, "ls", a, long, out)
		} else {
			err = ollieLs(ctx, sh.conn, sh.abs(a), a, long, out)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, client.ErrConnLost) {
				return err
			}
			if !errors.Is(err, errReported) {
				ollieError(sh.stderr, err)
			}
			failed = err
		}
	}
	if failed != nil {
		sh.failed = true
	}
	return nil
}

func (sh *ollieShell) cat(ctx context.Context, call shellCall) error {
	if len(call.args) == 0 {
		return errors.New("usage: cat FILE...")
	}
	content, flush := sh.content()
	defer flush()
	for _, a := range call.args {
		if client.HasGlob(a) {
			if err := sh.glob(ctx, "read", a, false, content); err != nil {
				return err
			}
			continue
		}
		if err := sh.conn.Follow(ctx, sh.abs(a), content); err != nil {
			return err
		}
	}
	return nil
}

func (sh *ollieShell) echo(ctx context.Context, call shellCall) error {
	args := call.args
	nl := "\n"
	if len(args) > 0 && args[0] == "-n" {
		nl, args = "", args[1:]
	}
	text := strings.Join(args, " ") + nl
	if call.redirect == "" {
		io.WriteString(sh.stdout, text)
		return nil
	}
	if client.HasGlob(call.target) {
		return errors.New("echo: " + globRefused("echo"))
	}
	// Every write to a namespace file is one request: > and >>
	// both send it, the server keeps no file contents to truncate.
	return sh.conn.Write(ctx, sh.abs(call.target), []byte(text))
}

// rdwr is rdwr and rdwrs: one request and its reply, or a subscription.
func (sh *ollieShell) rdwr(ctx context.Context, call shellCall) error {
	name, args := call.name, call.args
	if len(args) == 0 {
		return fmt.Errorf("usage: %s FILE [TEXT...]", name)
	}
	if client.HasGlob(args[0]) {
		return errors.New(name + ": " + globRefused(name))
	}
	var req []byte
	if len(args) > 1 {
		req = []byte(strings.Join(args[1:], " ") + "\n")
	}
	content, flush := sh.content()
	defer flush()
	if name == "rdwrs" {
		return sh.conn.Subscribe(ctx, sh.abs(args[0]), req, content)
	}
	reply, err := sh.conn.RdWr(ctx, sh.abs(args[0]), req)
	content.Write(reply)
	return err
}

func (sh *ollieShell) stat(ctx context.Context, call shellCall) error {
	if len(call.args) == 0 {
		return errors.New("usage: stat PATH...")
	}
	for i, a := range call.args {
		if i > 0 {
			fmt.Fprintln(sh.stdout)
		}
		var err error
		if client.HasGlob(a) {
			err = sh.glob(ctx, "stat", a, false, sh.stdout)
		} else {
			err = ollieStat(ctx, sh.conn, sh.abs(a), sh.stdout)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// chat refuses: at a terminal repl runs the chat before the line reaches
// command.
func (sh *ollieShell) chat(ctx context.Context, call shellCall) error {
	// A script's lines are its own commands, not prompts.
	return errors.New("chat: talks to a person at a terminal; from a script, run ollie chat with the prompts on its standard input")
}

// glob runs ls, read or stat on the files pattern matches (globCmd),
// content going to w.
func (sh *ollieShell) glob(ctx context.Context, cmd, pattern string, long bool, w io.Writer) error {
	step := func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }
	return globCmd(ctx, step, sh.conn, cmd, pattern, sh.abs(pattern), sh.cwd, long, w, w, sh.stderr)
}

// content is where a file's content goes: as is when standard output is
// piped, made safe on a terminal (see contentWriter).
func (sh *ollieShell) content() (io.Writer, func()) {
	if !sh.ttyOut {
		return sh.stdout, func() {}
	}
	sw := termsafe.NewWriter(sh.stdout)
	return sw, func() { sw.Flush() }
}

// A shellWord is a word of a command line, or a redirection operator.
type shellWord struct {
	text string
	op   string // ">" or ">>"; then text is empty
}

// shellSplit splits a command line into words: blanks separate words,
// '...' quotes literally, "..." quotes with \" and \\ as escapes, a
// backslash escapes the next character, > and >> are operators and #
// at the start of a word starts a comment.
func shellSplit(line string) ([]shellWord, error) {
	var words []shellWord
	var cur strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, shellWord{text: cur.String()})
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n':
			end()
		case ch == '#' && !inWord:
			return words, nil
		case ch == '>':
			end()
			op := ">"
			if i+1 < len(line) && line[i+1] == '>' {
				op, i = ">>", i+1
			}
			words = append(words, shellWord{op: op})
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("syntax error: unterminated '")
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(line) {
					return nil, errors.New(`syntax error: unterminated "`)
				}
				if line[i] == '"' {
					break
				}
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				cur.WriteByte(line[i])
			}
		case ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	end()
	return words, nil
}

// shellOutput remembers whether anything was written and its last
// byte, so the shell can end a partial line before the prompt.
type shellOutput struct {
	w     io.Writer
	wrote bool
	last  byte
}

func (l *shellOutput) Write(p []byte) (int, error) {
	if len(p) > 0 {
		l.wrote, l.last = true, p[len(p)-1]
	}
	return l.w.Write(p)
}

// shellHistoryPath returns the history file, $XDG_STATE_HOME/ollie/history
// or ~/.local/state/ollie/history, creating its directory; "" (no
// history) if that fails.
func shellHistoryPath() string {
	dir, err := paths.StateDir()
	if err != nil {
		return ""
	}
	if err := os.MkdirAll(dir, 0700); err != nil {
		return ""
	}
	// Create it private: commands can hold secrets.
	file := path.Join(dir, "history")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0600)
	if err != nil {
		return ""
	}
	f.Close()
	return file
}
