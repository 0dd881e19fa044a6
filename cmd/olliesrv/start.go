package main

// Starting and stopping the daemon from a command: "olliesrv start" (what
// ollie-remote up and the ollie command run on a host), "olliesrv stop",
// and the restart an upgrade needs.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"ollie/internal/termsafe"
	"ollie/ns"
	"ollie/ns/client"
)

const startUsage = `usage: olliesrv start   start the daemon detached (or report the running one)
       olliesrv stop    stop the running daemon and wait for it to exit
`

func startMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprint(stderr, startUsage)
		return 2
	}
	sock := ns.SocketPath()
	if pid := daemonPID(); pid != 0 {
		fmt.Fprintf(stdout, "running %s pid %d\n", sock, pid)
		return 0
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "olliesrv start: %v\n", err)
		return 1
	}
	pid, err := startDetached(exe, 15*time.Second)
	if err != nil {
		// The error carries the daemon log's tail: one line, made safe.
		fmt.Fprintf(stderr, "olliesrv start: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "started %s pid %d\n", sock, pid)
	return 0
}

func stopMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprint(stderr, startUsage)
		return 2
	}
	pid := daemonPID()
	if pid == 0 {
		fmt.Fprintln(stdout, "not running")
		return 0
	}
	if err := stopDaemon(30 * time.Second); err != nil {
		fmt.Fprintf(stderr, "olliesrv stop: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "stopped pid %d\n", pid)
	return 0
}

// daemonPID is the pid of the olliesrv serving this user's namespace, or 0.
// The lock records it; the lock being held is what makes it current.
func daemonPID() int {
	lock := ns.SocketPath() + ".lock"
	f, err := os.Open(lock)
	if err != nil {
		return 0
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return 0 // nobody holds it
	}
	b, _ := io.ReadAll(io.LimitReader(f, 32))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// stopDaemon asks the running daemon to shut down and waits for it to let
// go of its lock.
func stopDaemon(timeout time.Duration) error {
	c, err := client.Dial("")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = c.Write(ctx, "ctl", []byte("kill"))
	c.Close()
	if err != nil && !errors.Is(err, client.ErrConnLost) {
		return err
	}
	for daemonPID() != 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("olliesrv did not exit within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// daemonLog is where a detached daemon writes: $XDG_STATE_HOME/ollie/olliesrv.log.
func daemonLog() string {
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		home, _ := os.UserHomeDir()
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "ollie", "olliesrv.log")
}

// startDetached starts exe serve in its own session, so that it outlives
// the ssh connection or shell that started it, and waits until it answers.
func startDetached(exe string, timeout time.Duration) (int, error) {
	logPath := daemonLog()
	if err := os.MkdirAll(filepath.Dir(logPath), 0700); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	start, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(exe, "serve")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sock := ns.SocketPath()
	deadline := time.After(timeout)
	for {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			if daemonPID() == cmd.Process.Pid {
				return cmd.Process.Pid, nil
			}
		}
		select {
		case err := <-exited:
			return 0, fmt.Errorf("olliesrv exited at once (%v): %s", err, logTail(logPath, start))
		case <-deadline:
			return 0, fmt.Errorf("olliesrv did not answer on %s within %v; see %s", sock, timeout, logPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logTail is what the log gained since offset, for an error message.
func logTail(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < off {
		return "see " + path
	}
	b = bytes.TrimSpace(b[off:])
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// dialOrStart connects to the namespace at addr; with start set and the
// default namespace not answering, it starts the daemon first, as the
// installed ollie command does for "ssh host ollie".
func dialOrStart(addr, uname string, start bool) (*client.Conn, error) {
	c, err := client.DialTimeout(addr, uname, envDuration("OLLIE_HANDSHAKE_TIMEOUT", client.DefaultHandshakeTimeout))
	var de *client.DialError
	if err == nil || !start || addr != "" || !errors.As(err, &de) {
		return c, err
	}
	exe, xerr := os.Executable()
	if xerr != nil {
		return nil, err
	}
	if daemonPID() == 0 {
		if _, serr := startDetached(exe, 15*time.Second); serr != nil {
			return nil, fmt.Errorf("%w; starting olliesrv: %v", err, serr)
		}
	}
	return client.DialTimeout(addr, uname, envDuration("OLLIE_HANDSHAKE_TIMEOUT", client.DefaultHandshakeTimeout))
}

// requestTimeout bounds an ollie command a person waits on (ls, stat,
// write, rdwr, and the stat a read starts with): $OLLIE_TIMEOUT, default 30 s, 0
// for none. The read itself is not bounded: a stream (chat), a wait
// file (statewait) and a subscription block by design, and nothing on the
// wire says which a file is.
func requestTimeout() time.Duration { return envDuration("OLLIE_TIMEOUT", 30*time.Second) }

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

// noAnswerError is a command cut short because the server answered
// nothing in time. It wraps client.ErrConnLost: ollie exits 3.
type noAnswerError struct {
	Addr  string
	After time.Duration
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("ollie: no answer from %s within %v (set OLLIE_TIMEOUT to wait longer)", e.Addr, e.After)
}

func (e *noAnswerError) Unwrap() error { return client.ErrConnLost }

// bounded returns ctx ended after d (unless d is 0) with a *noAnswerError
// as its cause. Ending it interrupts c's calls; a server that answers
// neither them nor the flush has c closed a second later, so the calls
// return whatever the server does.
func bounded(ctx context.Context, c *client.Conn, addr string, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(ctx)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, d, &noAnswerError{Addr: addr, After: d})
	stop := context.AfterFunc(tctx, func() {
		if _, ok := context.Cause(tctx).(*noAnswerError); ok {
			time.AfterFunc(time.Second, func() { c.Close() })
		}
	})
	return tctx, func() { stop(); cancel() }
}

// timedOut returns the *noAnswerError that ended ctx, if that is what did.
func timedOut(ctx context.Context) error {
	if e, ok := context.Cause(ctx).(*noAnswerError); ok {
		return e
	}
	return nil
}
