package appliance

// Session channels: the ollie shell on a pty, ollie subcommands by exec,
// and the subsystems the Server names. The server handles the channel
// itself rather than through gliderlabs' Session, because it must see the
// channel close (the end of its request stream) to end what the command
// left running, and gliderlabs keeps that stream to itself.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anmitsu/go-shlex"
	"github.com/creack/pty"
	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshsrv"
)

// Subcommands are the ollie commands an exec may run.
var Subcommands = []string{"ls", "read", "write", "rdwr", "rdwrs", "stat", "chat", "help"}

// ExitRefused is the exit status of an exec this listener does not run,
// the shell's "command not found".
const ExitRefused = 127

// session is one session channel: at most one shell, exec or subsystem.
type session struct {
	s     *Server
	ctx   gliderssh.Context
	login *login
	ch    ssh.Channel

	mu      sync.Mutex
	started bool
	term    string
	size    *pty.Winsize // nil: no pty requested
	ptmx    *os.File     // the pty's master while a command runs on it
	cmd     *sshsrv.Command
}

func (s *Server) session(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, ctx gliderssh.Context) {
	l := loginOf(ctx)
	if l == nil {
		nc.Reject(ssh.Prohibited, "ollie: not logged in")
		return
	}
	if !s.track() {
		nc.Reject(ssh.ResourceShortage, "ollie: the listener is shutting down")
		return
	}
	defer s.work.Done()
	if l.grant.readOnly {
		if !s.takeReadOnly() {
			from := ""
			if a := ctx.RemoteAddr(); a != nil {
				_, from = source(a)
			}
			s.limited("MaxReadOnlySessions", from, "key", l.fingerprint, "sessions", s.MaxReadOnlySessions)
			nc.Reject(ssh.ResourceShortage, fmt.Sprintf("ollie: read-only keys have all the sessions they may (%d) open; try again when one ends", s.MaxReadOnlySessions))
			return
		}
		defer s.giveReadOnly()
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	ss := &session{s: s, ctx: ctx, login: l, ch: ch, cmd: &sshsrv.Command{Ch: ch}}
	for req := range reqs {
		ss.request(req)
	}
	// The channel is closed, by the client or after the command ended.
	ss.closed()
}

func (ss *session) request(req *ssh.Request) {
	reply := func(ok bool) {
		if req.WantReply {
			req.Reply(ok, nil)
		}
	}
	switch req.Type {
	case "pty-req":
		var p struct {
			Term                   string
			Columns, Rows, Wpx, Hp uint32
			Modes                  string
		}
		if ssh.Unmarshal(req.Payload, &p) != nil {
			reply(false)
			return
		}
		if ss.login.grant.noPTY {
			ss.s.refuse(ss.ctx, "pty for a no-pty key", "")
			reply(false)
			return
		}
		ss.mu.Lock()
		ss.term = p.Term
		ss.size = &pty.Winsize{Cols: clamp16(p.Columns), Rows: clamp16(p.Rows)}
		ss.mu.Unlock()
		reply(true)
	case "window-change":
		var w struct{ Columns, Rows, Wpx, Hpx uint32 }
		if ssh.Unmarshal(req.Payload, &w) == nil {
			ss.resize(w.Columns, w.Rows)
		}
		reply(false) // RFC 4254 6.7: no reply is wanted
	case "shell", "exec", "subsystem":
		ss.start(req, reply)
	case "signal":
		var sig struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sig) == nil {
			if n, ok := sshsrv.Signals[ssh.Signal(sig.Name)]; ok {
				ss.cmd.Signal(n)
			}
		}
		reply(true)
	case "env":
		reply(false) // the environment is the server's
	default:
		// x11-req, auth-agent-req@openssh.com and the like.
		ss.s.refuse(ss.ctx, "session request "+req.Type, "")
		reply(false)
	}
}

func clamp16(v uint32) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

func (ss *session) resize(cols, rows uint32) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.size == nil {
		return
	}
	ss.size.Cols, ss.size.Rows = clamp16(cols), clamp16(rows)
	if ss.ptmx != nil {
		pty.Setsize(ss.ptmx, ss.size)
	}
}

// start runs the session's one command: the forced command if the key
// has one, else what the client asked for.
func (ss *session) start(req *ssh.Request, reply func(bool)) {
	ss.mu.Lock()
	if ss.started {
		ss.mu.Unlock()
		reply(false)
		return
	}
	ss.started = true
	ss.mu.Unlock()

	g := ss.login.grant
	var cmd *exec.Cmd
	var refusal string
	switch {
	case g.command != "":
		cmd, refusal = ss.ollieCommand(g.command)
	case req.Type == "shell":
		cmd, refusal = ss.ollieCommand("")
	case req.Type == "exec":
		var e struct{ Command string }
		if ssh.Unmarshal(req.Payload, &e) != nil {
			reply(false)
			return
		}
		cmd, refusal = ss.ollieCommand(e.Command)
	case req.Type == "subsystem":
		var sub struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sub) != nil {
			reply(false)
			return
		}
		mk := ss.s.Subsystems[sub.Name]
		if mk == nil {
			ss.s.refuse(ss.ctx, "subsystem "+sub.Name, "")
			reply(false)
			return
		}
		cmd = mk(g.readOnly)
	}
	if refusal != "" {
		// Accepted, then ended with a message and a status, as a shell
		// answers a command it cannot run: the client shows both.
		reply(true)
		fmt.Fprintf(ss.ch.Stderr(), "ollie: %s\n", refusal)
		sshsrv.Exit(ss.ch, ExitRefused, "")
		return
	}
	if cmd == nil {
		reply(false)
		return
	}
	if err := ss.run(cmd); err != nil {
		ss.s.Log.Warn("sshd: starting a command", "cmd", cmd.Args, "err", err)
		reply(true)
		fmt.Fprintf(ss.ch.Stderr(), "ollie: the listener could not start %s\n", cmd.Args[0])
		sshsrv.Exit(ss.ch, ExitRefused, "")
		return
	}
	reply(true)
	go ss.wait()
}

// ollieCommand makes the command for an exec line ("" for the shell),
// or says why it is refused.
func (ss *session) ollieCommand(line string) (*exec.Cmd, string) {
	if ss.s.Ollie == nil {
		ss.s.refuse(ss.ctx, "command (no ollie configured)", "")
		return nil, "this listener runs no commands"
	}
	args, err := shlex.Split(line, true)
	if err != nil {
		ss.s.refuse(ss.ctx, "exec of an unparsable line", "")
		return nil, "cannot split the command line: " + err.Error()
	}
	if len(args) > 0 && args[0] == "olliesrv" {
		return ss.adminCommand(args[1:])
	}
	if len(args) > 0 && args[0] == "ollie" {
		args = args[1:]
	}
	if len(args) > 0 && !slices.Contains(Subcommands, args[0]) {
		ss.s.refuse(ss.ctx, "exec of "+firstWord(args[0]), "")
		return nil, fmt.Sprintf("%q is not run here: this listener runs ollie commands only (%s)", firstWord(args[0]), strings.Join(Subcommands, ", "))
	}
	if len(args) == 0 {
		args = nil
	}
	return ss.s.Ollie(args, ss.login.grant.readOnly), ""
}

// adminCommand makes the command for "olliesrv ARGS", which only an
// admin key may run, and only as Admin allows.
func (ss *session) adminCommand(args []string) (*exec.Cmd, string) {
	if ss.login.grant.readOnly || ss.s.Admin == nil {
		ss.s.refuse(ss.ctx, "exec of olliesrv by a key that may not", "")
		return nil, fmt.Sprintf("olliesrv commands are not run for this key: this listener runs ollie commands only (%s)", strings.Join(Subcommands, ", "))
	}
	cmd, err := ss.s.Admin(args)
	if err != nil {
		what := "olliesrv"
		if len(args) > 0 {
			what += " " + firstWord(args[0])
		}
		ss.s.refuse(ss.ctx, "exec of "+what, "")
		return nil, err.Error()
	}
	return cmd, ""
}

// keyID names a key in a file name: its SHA-256, in hex, shortened.
func keyID(k ssh.PublicKey) string {
	sum := sha256.Sum256(k.Marshal())
	return hex.EncodeToString(sum[:12])
}

// firstWord bounds what a refusal quotes and logs of the client's text.
func firstWord(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// run starts cmd on the session's pty if it asked for one, else on pipes,
// in a session or process group of its own so that closing the channel
// ends all of it.
func (ss *session) run(cmd *exec.Cmd) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	cmd.Env = append(append(slices.Clone(ss.s.Env), cmd.Env...), "NAMESPACE="+ss.s.Namespace)
	if ss.s.KeyState != "" {
		dir := filepath.Join(ss.s.KeyState, keyID(ss.login.key))
		if err := os.MkdirAll(dir, 0700); err != nil {
			return err
		}
		cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+dir) // the last one counts
	}
	if ss.size != nil {
		term := ss.term
		if term == "" {
			term = "vt100"
		}
		cmd.Env = append(cmd.Env, "TERM="+term)
		ptmx, err := pty.StartWithSize(cmd, ss.size) // setsid, the pty its terminal
		if err != nil {
			return err
		}
		ss.ptmx = ptmx
		ss.cmd.Started(cmd)
		go func() {
			io.Copy(ptmx, ss.ch)
		}()
		return nil
	}
	return ss.cmd.Start(cmd)
}

// wait reports the command's end to the client once what it wrote on
// its pty has passed.
func (ss *session) wait() {
	var out chan struct{}
	if ss.ptmx != nil {
		// The pty's output ends (EIO) when the last process holding the
		// terminal closes it; everything written before is passed on.
		out = make(chan struct{})
		go func() {
			io.Copy(ss.ch, ss.ptmx)
			close(out)
		}()
	}
	ss.cmd.Wait(func() {
		if out != nil {
			select {
			case <-out:
			case <-time.After(2 * time.Second):
			}
		}
		ss.mu.Lock()
		if ss.ptmx != nil {
			ss.ptmx.Close()
			ss.ptmx = nil
		}
		ss.mu.Unlock()
	}, func(err error) {
		ss.s.Log.Warn("sshd: command", "err", err)
	})
}

// closed ends what the command left running once the channel closed:
// SIGHUP and SIGTERM, and SIGKILL if it is still there a second later.
func (ss *session) closed() {
	ss.ch.Close()
	ss.cmd.Hangup(syscall.SIGHUP, syscall.SIGTERM)
}
