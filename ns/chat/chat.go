// Package chat is "ollie chat": talking to an agent the way people talk to
// Claude Code or Codex, over nothing but the namespace. It writes prompts
// to the agent's prompt file, follows its chat stream, waits on its state
// and stats, and answers the approvals its calls wait for in bypass/pending;
// it adds no file of its own.
//
// It trusts the server it dials no further than the shell does: every byte
// of the host's text is made safe (internal/termsafe) before the terminal
// sees it.
package chat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"9fans.net/go/plan9"
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
	// chat hands it a reader it can take back (ns/shell's stdinHub).
	Keys io.Reader
	// Dial gives a connection of its own to each activity (following the
	// stream, waiting on the state, answering): ending one call's
	// context interrupts every call on a connection.
	Dial func() (*client.Conn, error)
}

const usage = `commands:
  /help            this list
  /model [NAME]    the agent's model, or switch it
  /profile [NAME]  the agent's profile, or switch it
  /plan            the agent's plan
  /stats           turns and tokens
  /expand [N]      the whole output of the last turn's tool calls (or the Nth)
  /clear           forget the conversation (the agent's history)
  /exit            leave (so do ^D, and ^C twice)
A line ending in \ goes on on the next; a paste is one prompt, sent with the
Enter after it. ^C stops the running turn; ^C again, or ^C at an empty prompt twice, leaves.
`

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

// shownWriter counts what the follower shows of the chat stream.
type shownWriter struct{ ch *chat }

func (w shownWriter) Write(p []byte) (int, error) {
	n, err := w.ch.v.Write(p)
	w.ch.shown.Add(int64(n))
	select {
	case w.ch.moved <- struct{}{}:
	default:
	}
	return n, err
}

// catchUp waits, for a few seconds at most, until the follower has shown
// the chat stream up to end.
func (ch *chat) catchUp(ctx context.Context, end int64) {
	deadline := time.After(3 * time.Second)
	for ch.shown.Load() < end {
		select {
		case <-ch.moved:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
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

// waitIdle waits until target turns have ended, handling ^C: once stops
// the turn, twice leaves. It reports false when the person left.
func (ch *chat) waitIdle(ctx context.Context, start time.Time, before stats, target int) bool {
	type idle struct {
		s   stats
		end int64 // the chat stream's length once idle
	}
	done := make(chan idle, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// A restarted olliesrv counts turns from 0 again: past a
		// restart, the turn has ended once the agent is idle with
		// nothing queued (the cut turn goes on by itself first).
		daemon, restarted := "", false
		for wctx.Err() == nil {
			c, err := ch.waiterConn()
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			if d := ch.daemonID(wctx, c); daemon == "" {
				daemon = d
			} else if d != "" && d != daemon {
				restarted = true
			}
			var s stats
			b, err := c.ReadAll(wctx, ch.t.dir+"/stats")
			if errors.Is(err, client.ErrConnLost) && wctx.Err() == nil {
				ch.dropWaiter(c)
				continue
			}
			json.Unmarshal(b, &s)
			if s.State == "idle" && (s.Turns >= target && !restarted || restarted && s.Queued == 0) {
				end, err := c.Size(wctx, ch.t.dir+"/chat")
				if err != nil {
					end = 0
				}
				done <- idle{s, end}
				return
			}
			// A turn that ends between this read and statewait's start
			// leaves it waiting for the next change: bound each wait.
			sctx, scancel := context.WithTimeout(wctx, time.Second)
			c.ReadAll(sctx, ch.t.dir+"/statewait")
			scancel()
		}
	}()
	stopped := false
	for {
		select {
		case d := <-done:
			ch.catchUp(ctx, d.end)
			ch.v.endTurn()
			ch.turnLine(start, before, d.s)
			return true
		case p := <-ch.pend:
			ch.approve(ctx, p)
		case <-ch.intr:
			if stopped {
				ch.v.endTurn()
				ch.say("[left; the agent goes on with what it was told to stop]")
				return false
			}
			stopped = true
			ch.ctl.RdWr(ctx, ch.t.dir+"/ctl", []byte("stop"))
			ch.say("[stopping the turn; ^C again leaves]")
		case <-ctx.Done():
			return false
		}
	}
}

// waiterConn is the connection turns are waited on.
func (ch *chat) waiterConn() (*client.Conn, error) {
	ch.wmu.Lock()
	defer ch.wmu.Unlock()
	if ch.waiter == nil {
		c, err := ch.opt.Dial()
		if err != nil {
			return nil, err
		}
		ch.waiter = c
	}
	return ch.waiter, nil
}

// dropWaiter forgets a lost connection, for the next to be dialled.
func (ch *chat) dropWaiter(c *client.Conn) {
	ch.wmu.Lock()
	defer ch.wmu.Unlock()
	if ch.waiter == c {
		c.Close()
		ch.waiter = nil
	}
}

// turnLine says the turn ended: idle, with its time and tokens.
func (ch *chat) turnLine(start time.Time, before, after stats) {
	in, out := after.PromptTokens-before.PromptTokens, after.CompletionTokens-before.CompletionTokens
	line := fmt.Sprintf("── idle · %.1fs · %d tokens in, %d out", time.Since(start).Seconds(), in, out)
	if after.LastError != "" && after.LastError != before.LastError {
		line += " · " + termsafe.Field(after.LastError, 200)
	}
	if ch.term != nil && Styled(os.Stdout) {
		line = "\x1b[2m" + line + "\x1b[0m"
	}
	ch.say(line)
}

// follow shows the chat stream from what comes next, until the person
// leaves; a lost connection is dialled again, and a restarted daemon
// said so.
func (ch *chat) follow(ctx context.Context, off int64) {
	daemon := ch.daemonID(ctx, ch.ctl)
	tail := &tailWriter{w: shownWriter{ch}}
	for ctx.Err() == nil {
		c, err := ch.opt.Dial()
		if err == nil {
			if d := ch.daemonID(ctx, c); d != daemon && daemon != "" && d != "" {
				// The new daemon's stream is the old one up to its last
				// record, then what came since: go on from where we were,
				// or from the end of what was put back when we had shown
				// more (text streamed and never recorded). Nothing is
				// shown twice, and nothing the new daemon wrote is missed.
				ch.say("[olliesrv restarted; following the agent again]")
				daemon = d
				var s stats
				if b, err := c.ReadAll(ctx, ch.t.dir+"/stats"); err == nil && json.Unmarshal(b, &s) == nil && off >= 0 {
					// After two restarts or more the offset is the
					// wrong stream's: find what was shown last in what
					// was put back, and go on after it.
					if at, ok := resync(ctx, c, ch.t.dir+"/chat", int64(s.ChatRestored), tail.last()); ok {
						off = at
					} else {
						off = min(off, int64(s.ChatRestored))
					}
				} else {
					off = -1
				}
			}
			if off < 0 {
				if off, err = c.Size(ctx, ch.t.dir+"/chat"); err != nil {
					off = -1
				}
			}
			if off >= 0 {
				ch.shown.Store(off)
			}
			off, err = c.FollowFrom(ctx, ch.t.dir+"/chat", off, tail)
			c.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			ch.say("[the agent was stopped for good]")
			return
		}
		ch.say("[lost the connection to olliesrv (" + serverWords(err) + "); trying again]")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// tailWriter keeps the last bytes written through it.
type tailWriter struct {
	w    io.Writer
	tail []byte
}

// tailKept is how much of what was shown last a follower looks for in a
// new daemon's stream: enough to be the chat's own, not a common line.
const tailKept = 512

func (t *tailWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.tail = append(t.tail, p[:n]...)
	if len(t.tail) > tailKept {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-tailKept:]...)
	}
	return n, err
}

func (t *tailWriter) last() []byte { return t.tail }

// resync finds in the first restored bytes of the stream name where what
// was shown (tail) ends, and returns the offset after it. A tail that ends
// in text the old daemon streamed and never recorded is not in the
// restored stream: its lines are dropped from the end until what is left
// is found, or too little is left to be the chat's own.
func resync(ctx context.Context, c *client.Conn, name string, restored int64, tail []byte) (int64, bool) {
	const window = 256 << 10
	if restored <= 0 || len(tail) == 0 {
		return 0, false
	}
	f, err := c.Open(ctx, name, plan9.OREAD)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	start := max(0, restored-window)
	buf := make([]byte, restored-start)
	for n := 0; n < len(buf); {
		m, err := f.ReadAt(ctx, buf[n:], start+int64(n))
		if m <= 0 || err != nil {
			buf = buf[:n]
			break
		}
		n += m
	}
	return resumeAt(buf, start, tail)
}

// resumeAt is resync's search: buf is the restored stream from start.
func resumeAt(buf []byte, start int64, tail []byte) (int64, bool) {
	for t := tail; len(t) >= 32; {
		if i := bytes.LastIndex(buf, t); i >= 0 {
			return start + int64(i+len(t)), true
		}
		j := bytes.LastIndexByte(t[:len(t)-1], '\n')
		if j < 0 {
			break
		}
		t = t[:j+1]
	}
	return 0, false
}

// daemonID tells one running olliesrv from the next: its pid and start.
func (ch *chat) daemonID(ctx context.Context, c *client.Conn) string {
	b, err := c.ReadAll(ctx, "status")
	if err != nil {
		return ""
	}
	var pid, started string
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "pid":
			pid = v
		case "started":
			started = v
		}
	}
	return pid + "@" + started
}

// showLog shows the last turns of the conversation, for a person who
// comes back to it.
func (ch *chat) showLog(ctx context.Context) {
	b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/log")
	if err != nil || len(b) == 0 {
		return
	}
	type msg struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"tool_calls"`
		Name string `json:"name"`
	}
	var msgs []msg
	for _, l := range strings.Split(string(b), "\n") {
		var m msg
		if json.Unmarshal([]byte(l), &m) == nil && m.Role != "" {
			msgs = append(msgs, m)
		}
	}
	// From the third last prompt on.
	from, users := 0, 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			if users++; users == 3 {
				from = i
				break
			}
		}
	}
	if len(msgs) == 0 {
		return
	}
	if from > 0 {
		ch.say(fmt.Sprintf("[%d earlier messages; the last turns:]", from))
	}
	for _, m := range msgs[from:] {
		switch m.Role {
		case "user":
			ch.say("› " + termsafe.Text(m.Content))
		case "assistant":
			if m.Content != "" {
				ch.v.Write([]byte(m.Content + "\n"))
				ch.v.endTurn()
			}
			for _, c := range m.ToolCalls {
				ch.v.Write([]byte("→ " + c.Name + " " + string(c.Args) + "\n"))
			}
		case "tool":
			ch.v.Write([]byte("← " + m.Name + ": " + firstLine(m.Content) + "\n"))
		}
	}
	ch.say("──")
}

func firstLine(s string) string {
	l, rest, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if rest != "" {
		l += " …"
	}
	return l
}

// command runs a /command.
func (ch *chat) command(ctx context.Context, words []string) (bool, int) {
	arg := strings.Join(words[1:], " ")
	ctl := func(req string) {
		reply, err := ch.ctl.RdWr(ctx, ch.t.dir+"/ctl", []byte(req))
		if ch.redial(err) {
			reply, err = ch.ctl.RdWr(ctx, ch.t.dir+"/ctl", []byte(req))
		}
		if err != nil {
			ch.say("[" + serverWords(err) + "]")
			return
		}
		ch.say(termsafe.Text(strings.TrimRight(string(reply), "\n")))
	}
	switch words[0] {
	case "/help":
		ch.say(strings.TrimRight(usage, "\n"))
	case "/exit", "/quit":
		return true, exitOK
	case "/model":
		ctl(strings.TrimSpace("model " + arg))
	case "/profile":
		if arg == "" {
			var cfg struct{ Profile string }
			if b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/cfg"); err == nil && json.Unmarshal(b, &cfg) == nil {
				ch.say(termsafe.Line(cfg.Profile))
			}
			return false, exitOK
		}
		ctl("agent " + arg)
	case "/plan":
		b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/plan")
		if err != nil {
			ch.say("[" + serverWords(err) + "]")
		} else if strings.TrimSpace(string(b)) == "" {
			ch.say("(no plan)")
		} else {
			ch.say(termsafe.Text(strings.TrimRight(string(b), "\n")))
		}
	case "/stats":
		s := ch.stats(ctx)
		turns := "turns"
		if s.Turns == 1 {
			turns = "turn"
		}
		line := fmt.Sprintf("%d %s · %d tokens in, %d out", s.Turns, turns, s.PromptTokens, s.CompletionTokens)
		if s.LastError != "" {
			line += " · last error: " + termsafe.Field(s.LastError, 200)
		}
		ch.say(line)
	case "/clear":
		ctl("clear")
	case "/expand":
		ch.expand(ctx, arg)
	default:
		ch.say("[unknown command " + termsafe.Line(words[0]) + "; /help lists them]")
	}
	return false, exitOK
}

// expand shows the whole output of the last turn's tool calls, or of the
// nth of them.
func (ch *chat) expand(ctx context.Context, arg string) {
	b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/log")
	if err != nil {
		ch.say("[" + serverWords(err) + "]")
		return
	}
	type msg struct {
		Role, Content, Name string
	}
	var results []msg
	for _, l := range strings.Split(string(b), "\n") {
		var m msg
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		switch m.Role {
		case "user":
			results = nil // a new turn
		case "tool":
			results = append(results, m)
		}
	}
	if len(results) == 0 {
		ch.say("(the last turn called no tool)")
		return
	}
	for i, r := range results {
		if arg != "" && arg != strconv.Itoa(i+1) {
			continue
		}
		ch.say(fmt.Sprintf("── %d. %s", i+1, termsafe.Line(r.Name)))
		ch.say(termsafe.Text(strings.TrimRight(r.Content, "\n")))
	}
}

// approvals hands the main loop each request of this agent's that waits
// in bypass/pending (none while a desktop broker answers them).
func (ch *chat) approvals(ctx context.Context) {
	for ctx.Err() == nil {
		err := WatchPending(ctx, ch.opt.Dial, ch.t.id, func(p Pending) {
			select {
			case ch.pend <- p:
			case <-ctx.Done():
			}
		})
		if ctx.Err() != nil {
			return
		}
		// A daemon restarting is not there for a moment: its socket is
		// gone or refuses (a DialError), then it is back.
		var down *client.DialError
		if errors.As(err, &down) && !client.IsUntrusted(err) {
			err = nil
		}
		if err != nil && !errors.Is(err, client.ErrConnLost) && !client.IsInterrupted(err) && !strings.Contains(err.Error(), "shutting down") {
			ch.say("[approvals will not show here: " + serverWords(err) + "]")
			return
		}
		// The connection went with the daemon or the tunnel: watch again
		// once it is back (the follower says so).
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// approve puts a request to the person: y, always or n; and when sudo
// asks for the password (the request comes back with an attempt), the
// password, read with no echo and never kept.
func (ch *chat) approve(ctx context.Context, p Pending) {
	ch.v.endTurn()
	if ch.term == nil {
		ch.say("── approval needed")
		ch.say(requestText(p.Text))
		ch.say("[answer with: echo approve | ollie write bypass/pending/" + termsafe.Line(p.ID) + " (or always, or deny)]")
		return
	}
	ch.in.lineMode(true)
	defer ch.in.lineMode(false)
	if p.Attempt > 0 {
		if p.Attempt > 1 {
			ch.say("[sudo: wrong password; try again]")
		}
		pw, err := ch.term.ReadPassword(fmt.Sprintf("sudo password (attempt %d of 3): ", p.Attempt))
		if err != nil {
			Decide(ctx, ch.ctl, p.ID, "deny no password given")
			return
		}
		b := []byte(pw)
		err = GivePassword(ctx, ch.ctl, p.ID, b)
		clear(b)
		if err != nil {
			ch.say("[" + serverWords(err) + "]")
		}
		return
	}
	ch.say("── approval needed")
	ch.say(requestText(p.Text))
	ch.term.SetPrompt("approve? [y]es, [a]lways, [n]o: ")
	answer := ""
	for answer == "" {
		line, err := ch.term.ReadLine()
		if err != nil {
			line = "n"
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			answer = "approve"
		case "a", "always":
			answer = "always"
		case "n", "no":
			answer = "deny denied in ollie chat"
		}
	}
	if err := Decide(ctx, ch.ctl, p.ID, answer); err != nil {
		ch.say("[" + serverWords(err) + "]")
	}
}

// requestText is a request's file as the chat shows it: the request, made
// safe, without the file's own lines on how to answer by writing to it,
// which the chat does for the person (y/a/n, or the line it prints).
func requestText(text string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.HasSuffix(l, " to this file to answer") || strings.HasPrefix(l, "password: write ") {
			continue
		}
		keep = append(keep, l)
	}
	return termsafe.Text(strings.Join(keep, "\n"))
}
