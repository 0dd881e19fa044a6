package toolsrv

// The credential gate's host side: running a "sudo": true tool as root.
//
// sudo -n is tried first, so a NOPASSWD host needs no password. Otherwise
// the approval's Grant supplies the password: it is checked alone with
// sudo -v (a wrong one is reported and asked again, at most
// broker.MaxPasswordAttempts times), then written with the tool's
// arguments to the stdin of sudo -S: sudo reads the password line and the
// tool reads exactly its JSON after it. The password is in this process's
// memory only, written to pipes and zeroed; never in a file, argv, the
// environment or a log.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"ollie/broker"
)

// sudoPath is where sudo is looked up; tests may point it elsewhere.
var sudoPath = "sudo"

// sudoEnv is sudo's own environment: C messages, which sudoProblem reads.
func sudoEnv() []string {
	return []string{"LC_ALL=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
}

// sudoCommand returns the command running t as root, its stdin prepared.
func (r *Runner) sudoCommand(ctx context.Context, t *Tool, own json.RawMessage, grant broker.Grant) (*exec.Cmd, error) {
	sudo, err := exec.LookPath(sudoPath)
	if err != nil {
		return nil, fmt.Errorf("%s needs sudo, and sudo is not installed on this host", t.Name)
	}
	// NOPASSWD for this command: no password at all.
	check := exec.CommandContext(ctx, sudo, "-n", "-l", "--", t.Path)
	check.Env = sudoEnv()
	var stderr bytes.Buffer
	check.Stderr = &stderr
	if err := check.Run(); err == nil {
		cmd := exec.CommandContext(ctx, sudo, "-n", "--", t.Path)
		cmd.Stdin = bytes.NewReader(own)
		prepareSudo(cmd)
		return cmd, nil
	}
	if p := sudoProblem(stderr.String(), t.Name); p != nil && !strings.Contains(stderr.String(), "password is required") {
		return nil, p
	}
	if grant == nil {
		return nil, fmt.Errorf("%s needs the sudo password and nobody approved giving it", t.Name)
	}
	pw, err := sudoPassword(ctx, sudo, t.Name, grant)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, sudo, "-S", "-k", "-p", "", "--", t.Path)
	pr, pwr, err := os.Pipe()
	if err != nil {
		broker.Zero(pw)
		return nil, err
	}
	// start closes the parent's copy of the read end once sudo has it.
	cmd.Stdin = pr
	prepareSudo(cmd)
	// A pipe's buffer takes the password line at once; the arguments
	// follow as the tool reads them.
	go func() {
		pwr.Write(pw)
		broker.Zero(pw)
		pwr.Write([]byte{'\n'})
		pwr.Write(own)
		pwr.Close()
	}()
	return cmd, nil
}

// prepareSudo puts sudo in its own process group; a cancel sends SIGTERM,
// which sudo relays to the root command (we may not signal it ourselves),
// then SIGKILL to sudo after a grace period.
func prepareSudo(cmd *exec.Cmd) {
	cmd.Env = sudoEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
}

// sudoPassword asks the grant for the password until sudo -v accepts it.
func sudoPassword(ctx context.Context, sudo, tool string, grant broker.Grant) ([]byte, error) {
	problem := ""
	for attempt := 1; attempt <= broker.MaxPasswordAttempts; attempt++ {
		pw, err := grant.Password(ctx, attempt, problem)
		if err != nil {
			return nil, fmt.Errorf("%s was not run: %w", tool, err)
		}
		ok, err := sudoValidate(ctx, sudo, pw, tool)
		if err != nil {
			broker.Zero(pw)
			return nil, err
		}
		if ok {
			return pw, nil
		}
		broker.Zero(pw)
		problem = "wrong password"
	}
	return nil, fmt.Errorf("%s was not run: the sudo password was wrong %d times", tool, broker.MaxPasswordAttempts)
}

// testHookSudoLine, when set, is given the password line sudoValidate
// wrote to sudo -v. The line is sudoValidate's own copy, which nothing
// else can reach: the tests keep it to see that it is zeroed.
var testHookSudoLine func(line []byte)

// sudoValidate checks a password with sudo -v, feeding it on a pipe.
func sudoValidate(ctx context.Context, sudo string, pw []byte, tool string) (bool, error) {
	cmd := exec.CommandContext(ctx, sudo, "-S", "-k", "-v", "-p", "")
	cmd.Env = sudoEnv()
	pr, pwr, err := os.Pipe()
	if err != nil {
		return false, err
	}
	cmd.Stdin = pr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		pr.Close()
		pwr.Close()
		return false, err
	}
	pr.Close()
	line := append(append([]byte(nil), pw...), '\n')
	pwr.Write(line)
	if testHookSudoLine != nil {
		testHookSudoLine(line)
	}
	broker.Zero(line)
	pwr.Close()
	err = cmd.Wait()
	if err == nil {
		return true, nil
	}
	msg := stderr.String()
	if strings.Contains(msg, "incorrect password") || strings.Contains(msg, "Sorry, try again") {
		return false, nil
	}
	if p := sudoProblem(msg, tool); p != nil {
		return false, p
	}
	return false, fmt.Errorf("%s was not run: sudo -v failed: %s", tool, strings.TrimSpace(msg))
}

// sudoProblem turns sudo's refusals into messages that say what to do.
func sudoProblem(stderr, tool string) error {
	switch {
	case strings.Contains(stderr, "must have a tty"):
		return fmt.Errorf("%s was not run: this host's sudoers has requiretty, so sudo refuses to run without a terminal; remove requiretty for this user (visudo: Defaults:USER !requiretty)", tool)
	case strings.Contains(stderr, "may not run sudo"), strings.Contains(stderr, "not in the sudoers file"):
		return fmt.Errorf("%s was not run: this user is not in the host's sudoers, so it cannot run anything as root", tool)
	case strings.Contains(stderr, "is not allowed to execute"):
		return fmt.Errorf("%s was not run: the host's sudoers does not let this user run it as root: %s", tool, strings.TrimSpace(stderr))
	case strings.Contains(stderr, "password is required"):
		return errors.New("password is required")
	}
	return nil
}
