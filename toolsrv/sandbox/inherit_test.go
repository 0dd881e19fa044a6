package sandbox

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
)

// A descriptor the olliesrv process holds without close-on-exec (one its
// starter left open) does not reach a tool started by a helper of its
// own: the tool holds stdin, stdout and stderr only.
func TestCommandInheritsNoStrayDescriptor(t *testing.T) {
	requireLandlock(t, 3)
	e := newEnv(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// Clear close-on-exec: what a careless parent process leaves.
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), syscall.F_SETFD, 0); errno != 0 {
		t.Fatal(errno)
	}
	c, err := Command(context.Background(), e.policy(t), "/bin/sh", []string{"-c", `cd /proc/self/fd && echo "fds=" *`})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr, c.Dir = &stdout, &stderr, e.cwd
	if err := c.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	// The glob's own descriptor is 3.
	if !strings.Contains(stdout.String(), "fds= 0 1 2 3\n") {
		t.Errorf("the tool holds %q, want only 0 1 2 (and the glob's 3); the stray pipe is fd %d", stdout.String(), w.Fd())
	}
}
