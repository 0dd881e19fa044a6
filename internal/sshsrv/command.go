package sshsrv

import (
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Command is the one command a session channel runs, kept as sshd keeps
// it: in a process group (or session) of its own, signalled as a whole,
// its end sent to the client, and what it left running ended when the
// channel closes. The zero value with Ch set is ready.
type Command struct {
	Ch ssh.Channel

	mu     sync.Mutex
	cmd    *exec.Cmd
	reaped chan struct{} // closed once cmd was waited for: its pid may be another process's then
}

// Start runs cmd on the channel's pipes, in a process group of its own so
// that closing the channel can end all of it.
func (c *Command) Start(cmd *exec.Cmd) error {
	cmd.Stdout, cmd.Stderr = c.Ch, c.Ch.Stderr()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A background child holding stdout open does not hold the channel
	// open for long once the command itself has exited.
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	c.started(cmd)
	go func() {
		io.Copy(stdin, c.Ch)
		stdin.Close()
	}()
	return nil
}

// Started takes cmd, already started by the caller (on a pty, say), as
// the channel's command.
func (c *Command) Started(cmd *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started(cmd)
}

func (c *Command) started(cmd *exec.Cmd) {
	c.cmd = cmd
	c.reaped = make(chan struct{})
}

// Wait waits for the command and reports its end to the client:
// exit-status, or exit-signal for a command killed by a signal. drained,
// if not nil, runs between the reaping and the report, so that what the
// command wrote reaches the client before its status; failed says why a command that
// could not be waited for ended with 255.
func (c *Command) Wait(drained func(), failed func(error)) {
	err := c.cmd.Wait()
	close(c.reaped)
	if drained != nil {
		drained()
	}
	st, _ := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case st.Signaled():
		Exit(c.Ch, 0, SignalName(st.Signal()))
	case c.cmd.ProcessState != nil:
		Exit(c.Ch, c.cmd.ProcessState.ExitCode(), "")
	default:
		failed(err)
		Exit(c.Ch, 255, "")
	}
}

// Signal sends n to the command's process group while the command runs.
func (c *Command) Signal(n syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running() {
		syscall.Kill(-c.cmd.Process.Pid, n)
	}
}

func (c *Command) running() bool {
	if c.cmd == nil || c.cmd.Process == nil {
		return false
	}
	select {
	case <-c.reaped:
		return false
	default:
		return true
	}
}

// Hangup ends what the channel's command left running once the channel
// closed: it sends each of signals, and SIGKILL if the command is still
// there a second later.
func (c *Command) Hangup(signals ...syscall.Signal) {
	c.mu.Lock()
	running, reaped := c.running(), c.reaped
	c.mu.Unlock()
	if !running {
		return
	}
	for _, n := range signals {
		c.Signal(n)
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-reaped:
	case <-t.C:
		c.Signal(syscall.SIGKILL)
	}
}

// Exit ends a session channel as sshd does: EOF, the status (or the
// signal's name, when signal is not ""), close.
func Exit(ch ssh.Channel, code int, signal string) {
	ch.CloseWrite()
	if signal != "" {
		ch.SendRequest("exit-signal", false, ssh.Marshal(&struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: signal}))
	} else {
		ch.SendRequest("exit-status", false, ssh.Marshal(&struct{ Status uint32 }{uint32(code)}))
	}
	ch.Close()
}
