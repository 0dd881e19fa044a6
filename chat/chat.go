package chat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"ollie/agent/wire"
	"ollie/internal/termsafe"
	"ollie/ns/client"
)

// Options say which agent to talk to and how to reach the namespace.
type Options struct {
	Path    string // the agent's path; "" for the session of Cwd
	Profile string // the agent's profile, when given
	Model   string // the agent's model, when given
	Cwd     string // the directory the chat was started in
	// Where is the host whose namespace this is, reached from a desktop
	// (ollie -H); "" for this host. A session made for a desktop's
	// directory works in the host's home.
	Where string
	// Keys, when set, is where a terminal's keys come from instead of
	// stdin itself: a shell that goes on reading the terminal after the
	// chat hands it a reader it can take back (shell's stdinHub).
	Keys io.Reader
	// Dial gives a connection of its own to each activity (following the
	// stream, waiting on the state, answering): ending one call's
	// context interrupts every call on a connection.
	Dial func() (*client.Conn, error)
}

// Exit statuses, as the ollie command's.
const (
	exitOK       = 0
	exitFailed   = 1
	exitNoServer = 3
)

// Run talks to the agent until the person leaves; stdin and stdout are a
// terminal, or a script of prompts and where the replies go.
func Run(ctx context.Context, opt Options, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := opt.Dial()
	if err != nil {
		fmt.Fprintf(stderr, "ollie chat: %s\n", termsafe.Line(err.Error()))
		return exitNoServer
	}
	t, err := resolve(ctx, c, opt)
	if err != nil {
		c.Close()
		return fail(stderr, err)
	}
	ch := &chat{opt: opt, t: t, ctl: c, stderr: stderr, moved: make(chan struct{}, 1)}
	defer func() { ch.ctl.Close() }() // the last one, after any redial
	return ch.run(ctx, stdin, stdout)
}

func fail(stderr io.Writer, err error) int {
	var p *problem
	if errors.As(err, &p) {
		fmt.Fprintf(stderr, "ollie chat: %s\n", p.msg)
		return exitFailed
	}
	fmt.Fprintf(stderr, "ollie chat: %s\n", termsafe.Line(err.Error()))
	if errors.Is(err, client.ErrConnLost) {
		return exitNoServer
	}
	return exitFailed
}

type chat struct {
	opt    Options
	t      *target
	ctl    *client.Conn // prompts, ctl, reads
	stderr io.Writer

	v    *view
	in   *keys          // a terminal's keys; nil for a script
	term *term.Terminal // the line editor on a terminal
	say  func(string)   // a line to the person
	intr chan struct{}  // ^C during a turn
	pend chan Pending   // approvals this agent's calls wait for

	// waiter is the connection turns are waited on, dialled once and
	// again after it is lost.
	wmu    sync.Mutex
	waiter *client.Conn

	// shown is how far into the chat stream the follower has shown;
	// moved is signalled when it grows. A turn's end line waits for the
	// stream to reach where the turn ended, so the reply is never drawn
	// after the line that says it is over.
	shown atomic.Int64
	moved chan struct{}
}

func (ch *chat) run(ctx context.Context, stdin io.Reader, stdout io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch.intr = make(chan struct{}, 1)
	ch.pend = make(chan Pending, 16)
	inF, inTTY := stdin.(*os.File)
	outF, outTTY := stdout.(*os.File)
	tty := inTTY && outTTY && term.IsTerminal(int(inF.Fd())) && term.IsTerminal(int(outF.Fd()))
	size := func() (int, int) { return 0, 0 }
	var write func([]byte)
	if tty {
		old, err := term.MakeRaw(int(inF.Fd()))
		if err != nil {
			fmt.Fprintf(ch.stderr, "ollie chat: %v\n", err)
			return exitFailed
		}
		defer term.Restore(int(inF.Fd()), old)
		var keysIn io.Reader = inF
		if ch.opt.Keys != nil {
			keysIn = ch.opt.Keys
		}
		ch.in = newKeys(keysIn, ch.intr)
		ch.term = term.NewTerminal(struct {
			io.Reader
			io.Writer
		}{ch.in, stdout}, "")
		ch.term.SetBracketedPasteMode(true)
		defer ch.term.SetBracketedPasteMode(false)
		size = func() (int, int) {
			w, h, err := term.GetSize(int(outF.Fd()))
			if err != nil {
				return 80, 24
			}
			return w, h
		}
		if w, h := size(); w > 0 {
			ch.term.SetSize(w, h)
		}
		path, err := HistoryPath(ch.t.id)
		hist := &History{} // in memory only, if the file cannot be had
		if err == nil {
			if h, herr := OpenHistory(path, 0); herr == nil {
				hist = h
			} else {
				err = herr
			}
		}
		if err != nil {
			fmt.Fprintf(stdout, "ollie chat: history kept for this chat only: %s\r\n", termsafe.Line(err.Error()))
		}
		ch.term.History = hist
		write = func(b []byte) { ch.term.Write(b) }
	} else {
		var mu sync.Mutex
		write = func(b []byte) { mu.Lock(); stdout.Write(b); mu.Unlock() }
		// Without a terminal ^C is a signal: once stops the turn, twice
		// leaves, as on a terminal.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt)
		defer signal.Stop(sigs)
		go func() {
			for {
				select {
				case <-sigs:
					select {
					case ch.intr <- struct{}{}:
					default:
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	styled := tty && Styled(stdout)
	cols, _ := size()
	ch.v = newView(write, NewMarkdown(styled, cols), styled, size)
	ch.say = ch.v.note

	where := "this host"
	if ch.opt.Where != "" {
		where = termsafe.Line(ch.opt.Where)
	}
	ch.say(fmt.Sprintf("ollie chat: agent %s in session %s on %s; /help for commands", termsafe.Line(ch.t.agent), termsafe.Line(ch.t.session), where))
	ch.showLog(ctx)
	// Where the stream is now, before the prompt shows: what is written
	// from here on (someone else's prompt a moment later) is shown.
	from, err := ch.ctl.Size(ctx, ch.t.dir+"/chat")
	if err != nil {
		from = -1
	}
	go ch.follow(ctx, from)
	go ch.approvals(ctx)
	defer func() {
		ch.wmu.Lock()
		if ch.waiter != nil {
			ch.waiter.Close()
		}
		ch.wmu.Unlock()
	}()
	if s := ch.stats(ctx); s.State != "idle" {
		ch.say("[the agent is busy with a turn; your prompt waits for it (^C stops it)]")
		if !ch.waitIdle(ctx, time.Now(), s, s.Turns+s.Queued+1) {
			return exitOK
		}
	}
	if ch.term != nil {
		return ch.interactive(ctx)
	}
	return ch.script(ctx, stdin)
}

// script sends each prompt of a script in turn, waiting for each reply.
func (ch *chat) script(ctx context.Context, stdin io.Reader) int {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, `\`) {
			pending.WriteString(strings.TrimSuffix(line, `\`) + "\n")
			continue
		}
		pending.WriteString(line)
		text := pending.String()
		pending.Reset()
		if quit, status := ch.input(ctx, text); quit {
			return status
		}
	}
	return exitOK
}

// interactive reads prompts with the line editor until the person leaves.
func (ch *chat) interactive(ctx context.Context) int {
	lastCtrlC := false
	for {
		text, err := ch.readPrompt()
		if errors.Is(err, io.EOF) {
			if ch.in.ctrlC() && !lastCtrlC {
				lastCtrlC = true
				ch.say("(^C again, or ^D, to leave)")
				continue
			}
			return exitOK
		}
		if err != nil {
			return exitOK
		}
		lastCtrlC = false
		if quit, status := ch.input(ctx, text); quit {
			return status
		}
	}
}

// readPrompt reads one prompt: a line, lines joined by a trailing
// backslash, or a paste.
func (ch *chat) readPrompt() (string, error) {
	ch.v.setQuiet(true)
	defer ch.v.setQuiet(false)
	ch.in.lineMode(true)
	defer ch.in.lineMode(false)
	var b strings.Builder
	ch.term.SetPrompt("› ")
	for {
		line, err := ch.term.ReadLine()
		pasted := errors.Is(err, term.ErrPasteIndicator)
		if err != nil && !pasted {
			return "", err
		}
		switch {
		case strings.HasSuffix(line, `\`):
			b.WriteString(strings.TrimSuffix(line, `\`) + "\n")
		case pasted:
			// A paste is one prompt, sent with the Enter that follows it.
			b.WriteString(line + "\n")
		default:
			b.WriteString(line)
			return strings.TrimSuffix(b.String(), "\n"), nil
		}
		ch.term.SetPrompt("  ")
	}
}

// input acts on what the person typed: a command, or a prompt.
func (ch *chat) input(ctx context.Context, text string) (quit bool, status int) {
	if strings.TrimSpace(text) == "" {
		return false, exitOK
	}
	if strings.HasPrefix(text, "/") {
		return ch.command(ctx, strings.Fields(text))
	}
	return ch.prompt(ctx, text)
}

// prompt sends one prompt and shows the turn to its end.
func (ch *chat) prompt(ctx context.Context, text string) (bool, int) {
	start := time.Now()
	// The turns that end before ours: the one running and those queued.
	before := ch.stats(ctx)
	target := before.Turns + before.Queued + 1
	if before.State != "idle" {
		target++
		ch.say("[the agent is busy with another turn; yours is queued after it (^C stops the running one)]")
	}
	ch.v.expectEcho(text)
	err := ch.ctl.Write(ctx, ch.t.dir+"/prompt", []byte(text))
	if ch.redial(err) {
		err = ch.ctl.Write(ctx, ch.t.dir+"/prompt", []byte(text))
	}
	if err != nil {
		ch.say("[not sent: " + serverWords(err) + "]")
		return errors.Is(err, client.ErrConnLost), exitNoServer
	}
	if !ch.waitIdle(ctx, start, before, target) {
		return true, exitOK
	}
	return false, exitOK
}

// stats is the agent's stats file, or zeros.
func (ch *chat) stats(ctx context.Context) stats {
	var s stats
	b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/stats")
	if ch.redial(err) {
		b, err = ch.ctl.ReadAll(ctx, ch.t.dir+"/stats")
	}
	if err == nil {
		json.Unmarshal(b, &s)
	}
	return s
}

// redial replaces the main connection once it is lost (olliesrv restarted,
// or the tunnel broke beyond what resumes), and reports whether the
// caller should try again.
func (ch *chat) redial(err error) bool {
	if !errors.Is(err, client.ErrConnLost) {
		return false
	}
	c, derr := ch.opt.Dial()
	if derr != nil {
		return false
	}
	ch.ctl.Close()
	ch.ctl = c
	return true
}

// stats is the agent's stats file, in the format's one home.
type stats = wire.Stats
