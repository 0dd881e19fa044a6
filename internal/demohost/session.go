package demohost

// Session channels: exec and the sftp subsystem. The host handles the
// channel itself rather than through gliderlabs' session, because it must
// see the channel close (the end of its request stream) to kill what the
// command left running, and gliderlabs keeps that stream to itself.

import (
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshfwd"
)

// session is one session channel: at most one exec or subsystem.
type session struct {
	h   *Host
	ch  ssh.Channel
	env []string

	mu      sync.Mutex
	started bool
	cmd     *exec.Cmd    // nil until exec
	exited  bool         // cmd was reaped: its pid may belong to another process now
	sftp    *sftp.Server // nil unless the sftp subsystem runs
}

func (h *Host) session(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, _ gliderssh.Context) {
	if !h.track() {
		nc.Reject(ssh.ResourceShortage, "the host is shutting down")
		return
	}
	defer h.sessions.Done()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	s := &session{h: h, ch: ch}
	for req := range reqs {
		s.request(req)
	}
	// The channel is closed, by the client or after the command ended.
	s.closed()
}

func (s *session) request(req *ssh.Request) {
	reply := func(ok bool) {
		if req.WantReply {
			req.Reply(ok, nil)
		}
	}
	switch req.Type {
	case "env":
		// As sshd's AcceptEnv in most distributions: the locale only.
		var kv struct{ Name, Value string }
		if ssh.Unmarshal(req.Payload, &kv) != nil || !(kv.Name == "LANG" || strings.HasPrefix(kv.Name, "LC_")) {
			reply(false)
			return
		}
		s.env = append(s.env, kv.Name+"="+kv.Value)
		reply(true)
	case "exec":
		var cmd struct{ Command string }
		if ssh.Unmarshal(req.Payload, &cmd) != nil || !s.start() {
			reply(false)
			return
		}
		if err := s.exec(cmd.Command); err != nil {
			s.ch.Stderr().Write([]byte("demohost: " + err.Error() + "\n"))
			reply(true)
			s.exit(127, "")
			return
		}
		reply(true)
		go s.wait()
	case "subsystem":
		var sub struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sub) != nil || sub.Name != "sftp" || !s.start() {
			reply(false)
			return
		}
		srv, err := sftp.NewServer(s.ch, sftp.WithServerWorkingDirectory(s.h.Home))
		if err != nil {
			reply(false)
			return
		}
		s.mu.Lock()
		s.sftp = srv
		s.mu.Unlock()
		reply(true)
		go func() {
			srv.Serve()
			s.exit(0, "")
		}()
	case "signal":
		var sig struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sig) == nil {
			if n, ok := sshfwd.Signals[ssh.Signal(sig.Name)]; ok {
				s.signal(n)
			}
		}
		reply(true)
	default:
		// pty-req, shell, x11-req, auth-agent-req@openssh.com: not here.
		reply(false)
	}
}

// start claims the channel for one exec or subsystem.
func (s *session) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return false
	}
	s.started = true
	return true
}

// exec starts command under /bin/sh in the host's home, in a process group
// of its own so that closing the channel can end all of it.
func (s *session) exec(command string) error {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = s.h.Home
	cmd.Env = append(s.h.Env(), s.env...)
	cmd.Stdout, cmd.Stderr = s.ch, s.ch.Stderr()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A background child holding stdout open does not hold the channel
	// open for long once the command itself has exited.
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	go func() {
		io.Copy(stdin, s.ch)
		stdin.Close()
	}()
	return nil
}

// wait reports the command's end to the client: exit-status, or
// exit-signal for a command killed by a signal.
func (s *session) wait() {
	err := s.cmd.Wait()
	s.mu.Lock()
	s.exited = true
	s.mu.Unlock()
	st, _ := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case st.Signaled():
		s.exit(0, sshfwd.SignalName(st.Signal()))
	case s.cmd.ProcessState != nil:
		s.exit(s.cmd.ProcessState.ExitCode(), "")
	default:
		s.ch.Stderr().Write([]byte("demohost: " + err.Error() + "\n"))
		s.exit(255, "")
	}
}

// exit ends the channel as sshd does: EOF, the status, close.
func (s *session) exit(code int, signal string) {
	s.ch.CloseWrite()
	if signal != "" {
		s.ch.SendRequest("exit-signal", false, ssh.Marshal(&struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: signal}))
	} else {
		s.ch.SendRequest("exit-status", false, ssh.Marshal(&struct{ Status uint32 }{uint32(code)}))
	}
	s.ch.Close()
}

// signal sends n to the command's process group while the command runs.
func (s *session) signal(n syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.exited {
		syscall.Kill(-s.cmd.Process.Pid, n)
	}
}

// closed ends what the channel carried: a command still running gets
// SIGTERM, and SIGKILL if it is still there a second later.
func (s *session) closed() {
	s.ch.Close()
	s.mu.Lock()
	srv, running := s.sftp, s.cmd != nil && !s.exited
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	if !running {
		return
	}
	s.signal(syscall.SIGTERM)
	for range 20 {
		time.Sleep(50 * time.Millisecond)
		s.mu.Lock()
		done := s.exited
		s.mu.Unlock()
		if done {
			return
		}
	}
	s.signal(syscall.SIGKILL)
}
