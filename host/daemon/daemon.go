// Package daemon finds, starts and stops the olliesrv that serves this user's
// namespace, from a command: "olliesrv start" and "stop", "ollie -start" (what
// "ssh host ollie" runs), and the restart an upgrade needs. A detached daemon
// outlives the ssh connection that started it; the lock it holds is what
// makes its pid current.
package daemon

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

	"ollie/internal/paths"
	"ollie/ns/client"
	"ollie/ns/nsdir"
)

// PID is the pid of the olliesrv serving this user's namespace, or 0.
// The lock records it; the lock being held is what makes it current. A
// lock in a namespace directory that is not the user's own and private
// (nsdir.Check), or a lock file of another user, names no daemon of this
// user: whoever made it could name any pid.
func PID() int {
	if nsdir.Check(nsdir.NamespaceDir()) != nil {
		return 0
	}
	lock := nsdir.SocketPath() + ".lock"
	f, err := os.OpenFile(lock, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || int(st.Uid) != os.Geteuid() {
		return 0
	}
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

// Stop asks the running daemon to shut down and waits for it to let
// go of its lock.
func Stop(timeout time.Duration) error {
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
	for PID() != 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("olliesrv did not exit within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// LogPath is where a detached daemon writes: $XDG_STATE_HOME/ollie/olliesrv.log.
func LogPath() (string, error) {
	state, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(state, "olliesrv.log"), nil
}

// StartDetached starts exe serve in its own session, so that it outlives
// the ssh connection or shell that started it, and waits until it answers.
// When another start wins the race for the lock, the daemon it started is
// the answer: its pid, and no error.
func StartDetached(exe string, timeout time.Duration) (int, error) {
	// Nothing is started, nor dialled, in a directory another user made:
	// the daemon would refuse it, and its socket is not ours.
	if err := nsdir.Check(nsdir.NamespaceDir()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	logPath, err := LogPath()
	if err != nil {
		return 0, err
	}
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
	sock := nsdir.SocketPath()
	deadline := time.After(timeout)
	for {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			if PID() == cmd.Process.Pid {
				return cmd.Process.Pid, nil
			}
		}
		select {
		case err := <-exited:
			// Another start won the race for the lock (the keeper's, a
			// person's): a daemon serves, which is what was asked.
			if pid := PID(); pid != 0 {
				if c, derr := net.DialTimeout("unix", sock, time.Second); derr == nil {
					c.Close()
					return pid, nil
				}
			}
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
