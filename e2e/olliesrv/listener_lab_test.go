package olliesrv

// The appliance listener with real clients against the real daemon:
// sshfs mounting the namespace through the sftp subsystem, and the chat
// on a pty over OpenSSH's ssh -tt, the agent answered by the scripted
// model server. appliance/sftpns and appliance test the same clients against
// fixtures; here everything is the built olliesrv.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/lab"
)

// A listenerHost is the built olliesrv serving its namespace and the
// appliance listener (olliesrv serve -ssh) on a loopback port.
type listenerHost struct {
	Dir        string // the namespace directory: $NAMESPACE/ollie is the 9P socket
	Port       string
	SSHConfig  string // an ssh config whose Host "ollie" is the listener, with Key
	Key        string // the client's private key, in the listener's authorized_keys
	KnownHosts string

	tb  testing.TB
	cmd *exec.Cmd
	log *lockedBuilder
}

// listenerConfig says how to start a listenerHost.
type listenerConfig struct {
	Env []string // more of the daemon's environment
	// Key is the client's private key file (its .pub beside it) to
	// authorize; "" makes an ed25519 key.
	Key string
	// Cred runs the daemon as this user, its home and namespace theirs;
	// nil runs it as the test's user.
	Cred *syscall.Credential
}

// startListener starts olliesrv serve -ssh 127.0.0.1:0 and waits until
// the listener and the 9P socket answer; the daemon is killed when tb
// ends, unless stopped before.
func startListener(tb testing.TB, cfg listenerConfig) *listenerHost {
	tb.Helper()
	_, err := exec.LookPath("ssh")
	lab.Need(tb, err == nil, "the OpenSSH client (ssh)")
	srv, _ := binaries(tb)
	// A 0755 root, not t.TempDir: another user (Cred) must reach the
	// binary, its home and the socket, and sshd's children the socket.
	root, err := os.MkdirTemp("", "ollie-lst")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0755)
	os.Chmod(filepath.Dir(srv), 0755)
	h := &listenerHost{tb: tb, Dir: filepath.Join(root, "ns"), log: &lockedBuilder{},
		KnownHosts: filepath.Join(root, "known_hosts"), SSHConfig: filepath.Join(root, "ssh_config"), Key: cfg.Key}
	home := filepath.Join(root, "home")
	for _, d := range []string{h.Dir, home, filepath.Join(home, ".config", "ollie")} {
		if err := os.MkdirAll(d, 0700); err != nil {
			tb.Fatal(err)
		}
	}
	if h.Key == "" {
		h.Key = filepath.Join(root, "id_ed25519")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", h.Key).CombinedOutput(); err != nil {
			lab.Need(tb, false, fmt.Sprintf("ssh-keygen (openssh-client): %v %s", err, out))
		}
	}
	pub, err := os.ReadFile(h.Key + ".pub")
	if err != nil {
		tb.Fatal(err)
	}
	os.WriteFile(filepath.Join(home, ".config", "ollie", "authorized_keys"), pub, 0600)
	if cfg.Cred != nil {
		for _, d := range []string{h.Dir, home, filepath.Join(home, ".config"), filepath.Join(home, ".config", "ollie"), filepath.Join(home, ".config", "ollie", "authorized_keys")} {
			if err := os.Chown(d, int(cfg.Cred.Uid), int(cfg.Cred.Gid)); err != nil {
				tb.Fatal(err)
			}
		}
	}

	data, _ := filepath.Abs("../../data") // agent profiles, the sandbox's
	h.cmd = exec.Command(srv, "serve", "-ssh", "127.0.0.1:0")
	h.cmd.Dir = home
	h.cmd.Env = append(append(os.Environ(), "NAMESPACE="+h.Dir, "HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"), "OLLIE_DATA="+data), cfg.Env...)
	if cfg.Cred != nil {
		h.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cfg.Cred}
	}
	h.start()
	return h
}

// start starts h.cmd, a daemon with the listener on an address of port
// 0 or another, waits until the listener and the 9P socket answer, and
// writes the ssh config that reaches the listener; the daemon is killed
// when the test ends, unless stopped before.
func (h *listenerHost) start() {
	tb := h.tb
	tb.Helper()
	pr, pw := io.Pipe()
	h.cmd.Stderr = pw
	if err := h.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if h.cmd.ProcessState == nil {
			h.cmd.Process.Kill()
			h.cmd.Wait()
		}
		pw.Close()
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			h.log.WriteString(sc.Text() + "\n")
			if m := regexp.MustCompile(`ssh listener" addr=\S*:(\d+) `).FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case h.Port = <-port:
	case <-time.After(15 * time.Second):
		tb.Fatalf("olliesrv serve -ssh never said where it listens:\n%s", h.log.String())
	}
	await.Until(tb, 10*time.Second, "olliesrv serving its namespace socket", func() bool {
		c, err := net.Dial("unix", filepath.Join(h.Dir, "ollie"))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, h.log.String)
	conf := fmt.Sprintf(`Host ollie
	HostName 127.0.0.1
	Port %s
	IdentityFile %s
	IdentitiesOnly yes
	BatchMode yes
	UserKnownHostsFile %s
	StrictHostKeyChecking accept-new
	LogLevel ERROR
`, h.Port, h.Key, h.KnownHosts)
	if err := os.WriteFile(h.SSHConfig, []byte(conf), 0644); err != nil {
		tb.Fatal(err)
	}
}

// ssh runs OpenSSH's ssh to the listener with args after the host,
// stdin its standard input, and returns what it printed and its status.
func (h *listenerHost) ssh(stdin string, args ...string) (string, int) {
	h.tb.Helper()
	c := exec.Command("ssh", append([]string{"-F", h.SSHConfig, "ollie"}, args...)...)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		h.tb.Fatal(err)
	}
	return string(out), 0
}

// must runs an ollie subcommand through the listener and fails tb unless
// it succeeds.
func (h *listenerHost) must(stdin string, args ...string) string {
	h.tb.Helper()
	out, code := h.ssh(stdin, args...)
	if code != 0 {
		h.tb.Fatalf("ssh ollie %v: exit %d: %s\nolliesrv:\n%s", args, code, out, h.log.String())
	}
	return out
}

// agentEnv is the daemon's environment for an openai agent answered by llm.
func agentEnv(llm *fakellm.Server) []string {
	return []string{"OPENAI_BASE_URL=" + llm.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake-model"}
}

// waitState waits until the agent at path (in the namespace) is in state.
func (h *listenerHost) waitState(path, state string) {
	h.tb.Helper()
	var out string
	await.Until(h.tb, 20*time.Second, fmt.Sprintf("%s: state %q", path, state), func() bool {
		out, _ = h.ssh("", "read", path+"/state")
		return strings.TrimSpace(out) == state
	}, func() string {
		log, _ := h.ssh("", "read", path+"/log")
		return fmt.Sprintf("state %q; log:\n%s\nolliesrv:\n%s", out, log, h.log.String())
	})
}

// TestListenerSSHFS mounts the real daemon's namespace with Debian's sshfs
// through the listener's sftp subsystem: a shell glob reads an agent's
// state, echo into its prompt makes the scripted model answer, and tail -f
// of its chat shows the answer's lines while they come.
func TestListenerSSHFS(t *testing.T) {
	bin, err := exec.LookPath("sshfs")
	lab.Need(t, err == nil, "sshfs (apt-get install sshfs)")
	lab.Root(t, "mounting with sshfs (FUSE)")
	_, err = os.Stat("/dev/fuse")
	lab.Need(t, err == nil, "/dev/fuse")
	llm := fakellm.Start(t)
	h := startListener(t, listenerConfig{Env: agentEnv(llm)})
	h.must("name=lab cwd=/tmp\n", "rdwr", "session/new")
	h.must("name=a backend=openai\n", "rdwr", "session/lab/agent/new")

	mnt := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mnt, 0700)
	// No kernel caches: every read is the namespace's answer of now.
	if out, err := exec.Command(bin, "-F", h.SSHConfig, "-o", "direct_io,dir_cache=no,attr_timeout=0,entry_timeout=0", "ollie:/", mnt).CombinedOutput(); err != nil {
		t.Fatalf("sshfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// A reader just killed (tail -f) may hold the mount a moment
		// longer: try again before calling it a failure.
		var out []byte
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if await.Poll(ctx, func() bool {
			out, err = exec.Command("fusermount", "-u", mnt).CombinedOutput()
			return err == nil
		}) {
			return
		}
		exec.Command("fusermount", "-u", "-z", mnt).Run()
		t.Errorf("fusermount -u: %v\n%s", err, out)
	})
	sh := func(script string) (string, error) {
		out, err := exec.Command("sh", "-c", script).CombinedOutput()
		return string(out), err
	}

	if out, err := sh("cat " + mnt + "/session/*/agent/*/state"); err != nil || out != "idle\n" {
		t.Errorf("cat mnt/session/*/agent/*/state: %q %v", out, err)
	}

	// tail -f starts before the prompt, so it follows a growing chat.
	var tailOut, tailErr lockedBuilder
	tail := exec.Command("tail", "-s", "0.1", "-f", filepath.Join(mnt, "session/lab/agent/a/chat"))
	tail.Stdout, tail.Stderr = writerFunc(tailOut.WriteString), writerFunc(tailErr.WriteString)
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { tail.Process.Kill(); tail.Wait() }()
	awaitOpen(t, tail.Process.Pid, filepath.Join(mnt, "session/lab/agent/a/chat"))
	// The answer stops after its first line until the test has looked.
	hold := make(chan struct{})
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	llm.Push(fakellm.Response{Text: []string{"first line of the answer\n", "second line\n", "last line of the answer\n"}, Delay: 100 * time.Millisecond, Hold: hold})
	if out, err := sh("echo 'hello through sshfs' > " + mnt + "/session/lab/agent/a/prompt"); err != nil {
		t.Fatalf("echo prompt > mnt/session/lab/agent/a/prompt: %v %s", err, out)
	}
	// While the answer comes, tail shows its first line without its last,
	// and the glob reads the agent's state of now.
	midway := false
	await.Until(t, 20*time.Second, "tail -f of the chat showing the whole answer", func() bool {
		s := tailOut.String()
		if !midway && strings.Contains(s, "first line of the answer") && !strings.Contains(s, "last line of the answer") {
			midway = true
			if out, err := sh("cat " + mnt + "/session/*/agent/*/state"); err != nil || out != "thinking\n" {
				t.Errorf("cat mnt/session/*/agent/*/state while the agent answers: %q %v", out, err)
			}
			close(hold)
		}
		return strings.Contains(s, "last line of the answer")
	}, func() string {
		return fmt.Sprintf("saw %q (stderr %q)\nolliesrv:\n%s", tailOut.String(), tailErr.String(), h.log.String())
	})
	if !midway {
		t.Errorf("tail -f showed the answer only once it was whole, not as it grew: %q", tailOut.String())
	}
	if s := tailOut.String(); !strings.Contains(s, "hello through sshfs") || strings.Index(s, "first line") > strings.Index(s, "second line") {
		t.Errorf("tail -f of the chat: %q", s)
	}
	reqs := llm.ChatRequests()
	if len(reqs) != 1 || strings.TrimSpace(reqs[0].Messages[len(reqs[0].Messages)-1].Text()) != "hello through sshfs" {
		t.Errorf("the scripted model got %d requests, want one whose last message is the prompt: %+v", len(reqs), reqs)
	}
	h.waitState("session/lab/agent/a", "idle")
	if out, err := sh("cat " + mnt + "/session/*/agent/*/state"); err != nil || out != "idle\n" {
		t.Errorf("cat mnt/session/*/agent/*/state after the turn: %q %v", out, err)
	}
}

// TestListenerChatOnPTY: OpenSSH's ssh -tt on a pty to the listener, the
// ollie shell's chat with an agent: a line typed, the scripted answer
// seen, /exit back to the shell, exit ends ssh with status 0.
func TestListenerChatOnPTY(t *testing.T) {
	llm := fakellm.Start(t)
	h := startListener(t, listenerConfig{Env: agentEnv(llm)})
	h.must("name=lab cwd=/tmp\n", "rdwr", "session/new")
	h.must("name=a backend=openai\n", "rdwr", "session/lab/agent/new")
	if out := h.must("", "help"); !strings.Contains(out, "chat") {
		t.Fatalf("ollie help through the listener does not offer chat:\n%s", out)
	}

	cmd := exec.Command("ssh", "-F", h.SSHConfig, "-tt", "ollie")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); cmd.Process.Kill() })
	var seen lockedBuilder
	go io.Copy(writerFunc(seen.WriteString), ptmx)
	// waitFor waits for the nth appearance of what after mark.
	mark := 0
	waitFor := func(what string) {
		t.Helper()
		at := -1
		await.Until(t, 20*time.Second, fmt.Sprintf("%q through the pty", what), func() bool {
			at = strings.Index(seen.String()[mark:], what)
			return at >= 0
		}, func() string { return fmt.Sprintf("saw %q\nolliesrv:\n%s", seen.String()[mark:], h.log.String()) })
		mark += at + len(what)
	}
	waitFor("ollie:/% ")
	io.WriteString(ptmx, "chat session/lab/agent/a\r")
	waitFor("› ")
	llm.Push(fakellm.Text("the scripted ", "answer over ssh"))
	io.WriteString(ptmx, "a question typed on a pty\r")
	waitFor("the scripted answer over ssh")
	waitFor("── idle")
	io.WriteString(ptmx, "/exit\r")
	waitFor("ollie:/% ")
	io.WriteString(ptmx, "exit\r")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ssh -tt after exit: %v; saw %q", err, seen.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("ssh -tt did not end after exit; saw %q", seen.String())
	}
	reqs := llm.ChatRequests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].Messages[len(reqs[0].Messages)-1].Text(), "a question typed on a pty") {
		t.Errorf("the scripted model got %d requests: %+v", len(reqs), reqs)
	}
}

// writerFunc makes a string sink an io.Writer.
type writerFunc func(string)

func (w writerFunc) Write(p []byte) (int, error) { w(string(p)); return len(p), nil }

// awaitOpen waits until the process pid has the file path open: a reader
// started in the background (tail -f) is then following it.
func awaitOpen(t *testing.T, pid int, path string) {
	t.Helper()
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	await.Until(t, 10*time.Second, fmt.Sprintf("pid %d opening %s", pid, path), func() bool {
		entries, _ := os.ReadDir(fds)
		for _, e := range entries {
			if target, _ := os.Readlink(filepath.Join(fds, e.Name())); target == path {
				return true
			}
		}
		return false
	})
}
