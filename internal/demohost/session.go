package demohost

// Session channels: exec and the sftp subsystem. The host handles the
// channel itself rather than through gliderlabs' session, because it must
// see the channel close (the end of its request stream) to kill what the
// command left running, and gliderlabs keeps that stream to itself.

import (
	"os/exec"
	"strings"
	"sync"
	"syscall"

	gliderssh "github.com/gliderlabs/ssh"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshsrv"
)

// session is one session channel: at most one exec or subsystem.
type session struct {
	h   *Host
	ch  ssh.Channel
	env []string

	cmd *sshsrv.Command

	mu      sync.Mutex
	started bool
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
	s := &session{h: h, ch: ch, cmd: &sshsrv.Command{Ch: ch}}
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
			sshsrv.Exit(s.ch, 127, "")
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
			sshsrv.Exit(s.ch, 0, "")
		}()
	case "signal":
		var sig struct{ Name string }
		if ssh.Unmarshal(req.Payload, &sig) == nil {
			if n, ok := sshsrv.Signals[ssh.Signal(sig.Name)]; ok {
				s.cmd.Signal(n)
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

// exec starts command under /bin/sh in the host's home.
func (s *session) exec(command string) error {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = s.h.Home
	cmd.Env = append(s.h.Env(), s.env...)
	return s.cmd.Start(cmd)
}

func (s *session) wait() {
	s.cmd.Wait(nil, func(err error) {
		s.ch.Stderr().Write([]byte("demohost: " + err.Error() + "\n"))
	})
}

// closed ends what the channel carried: the sftp server, or a command
// still running (SIGTERM, and SIGKILL a second later).
func (s *session) closed() {
	s.ch.Close()
	s.mu.Lock()
	srv := s.sftp
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	s.cmd.Hangup(syscall.SIGTERM)
}
