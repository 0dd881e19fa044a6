package olliesrv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"ollie/appliance"
	"ollie/internal/lab"
	"ollie/internal/nstest"
)

// TestBinarySSHListener runs the built olliesrv -ssh with the real ssh
// client: the wiring sshd's own tests stand in for (this binary as the
// ollie client, ssh-readonly for a read-only key, the daemon's
// authorized_keys and host key), and a clean SIGTERM.
func TestBinarySSHListener(t *testing.T) {
	_, err := exec.LookPath("ssh")
	lab.Need(t, err == nil, "the OpenSSH client (ssh)")
	l := startBinaryListener(t)
	if out, code := l.ssh("admin", "name=bin\n", "ollie", "write", "session/new"); code != 0 {
		t.Errorf("admin write session/new: %d %q", code, out)
	}
	if out, code := l.ssh("reader", "", "ls", "session"); code != 0 || !strings.Contains(out, "bin") {
		t.Errorf("reader ls session: %d %q", code, out)
	}
	if out, code := l.ssh("reader", "name=no\n", "write", "session/new"); code != 1 || !strings.Contains(out, "permission denied") {
		t.Errorf("reader write session/new: %d %q, want 1 and permission denied", code, out)
	}
	if out, code := l.ssh("admin", "", "olliesrv", "stop"); code != appliance.ExitRefused {
		t.Errorf("exec of olliesrv stop: %d %q, want it refused", code, out)
	}
	// ollie-remote's few olliesrv commands, for an admin key only, and
	// uploads only where deploy installs.
	if out, code := l.ssh("admin", "", "olliesrv", "version"); code != 0 || !strings.HasPrefix(out, "olliesrv ") {
		t.Errorf("admin exec of olliesrv version: %d %q", code, out)
	}
	if out, code := l.ssh("reader", "", "olliesrv", "version"); code != appliance.ExitRefused {
		t.Errorf("read-only exec of olliesrv version: %d %q, want it refused", code, out)
	}
	if out, code := l.ssh("admin", "", "olliesrv", "install", "receive", l.home); code != appliance.ExitRefused || !strings.Contains(out, "under ~/.local/share/ollie only") {
		t.Errorf("admin exec of olliesrv install receive elsewhere: %d %q, want it refused", code, out)
	}
	if _, err := exec.LookPath("sftp"); err == nil {
		l.checkSFTP()
	}
	// The key the client saw is the one ssh-fingerprint prints.
	srv, _ := binaries(t)
	fp := exec.Command(srv, "ssh-fingerprint")
	fp.Env = l.cmd.Env
	fout, err := fp.Output()
	kh, _ := os.ReadFile(filepath.Join(l.home, "known_hosts"))
	_, _, seen, _, _, perr := gossh.ParseKnownHosts(kh)
	if err != nil || perr != nil || strings.Fields(string(fout))[1] != gossh.FingerprintSHA256(seen) {
		t.Errorf("ssh-fingerprint %q (%v), known_hosts %q (%v)", fout, err, kh, perr)
	}
	l.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- l.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("olliesrv -ssh after SIGTERM: %v\n%s", err, l.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("olliesrv -ssh did not exit after SIGTERM\n%s", l.log.String())
	}
}

// binaryListener is the built olliesrv serving its listener on a port of
// its choice, with an admin key and a read-only one (keys by name).
type binaryListener struct {
	t    *testing.T
	home string
	keys map[string]string
	port string
	cmd  *exec.Cmd
	log  *lockedBuilder
}

// startBinaryListener writes the keys and the configuration file that
// asks for the listener (no flag), starts olliesrv and reads its port
// from its log.
func startBinaryListener(t *testing.T) *binaryListener {
	srv, _ := binaries(t)
	dir := nstest.ShortTempDir(t)
	l := &binaryListener{t: t, home: t.TempDir(), keys: map[string]string{}, log: &lockedBuilder{}}
	conf := filepath.Join(l.home, "config")
	state := filepath.Join(l.home, "state")
	os.MkdirAll(filepath.Join(conf, "ollie"), 0700)
	var auth strings.Builder
	for _, k := range []struct{ name, opts string }{{"admin", ""}, {"reader", appliance.ReadOnlyOption + " "}} {
		file := filepath.Join(l.home, k.name)
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", file).CombinedOutput(); err != nil {
			lab.Need(t, false, fmt.Sprintf("ssh-keygen: %v %s", err, out))
		}
		pub, _ := os.ReadFile(file + ".pub")
		auth.WriteString(k.opts + string(pub))
		l.keys[k.name] = file
	}
	os.WriteFile(filepath.Join(conf, "ollie", "authorized_keys"), []byte(auth.String()), 0600)

	os.WriteFile(filepath.Join(conf, "ollie", "olliesrv.yaml"), []byte("ssh: 127.0.0.1:0\n"), 0600)
	cmd := exec.Command(srv)
	cmd.Env = append(os.Environ(), "NAMESPACE="+dir, "HOME="+l.home, "XDG_CONFIG_HOME="+conf, "XDG_STATE_HOME="+state)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.cmd = cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l.log.WriteString(sc.Text() + "\n")
			if m := regexp.MustCompile(`ssh listener" addr=127\.0\.0\.1:(\d+)`).FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
	}()
	select {
	case l.port = <-port:
	case <-time.After(15 * time.Second):
		t.Fatal("olliesrv -ssh never said where it listens")
	}
	return l
}

// ssh runs OpenSSH's ssh with the named key to the listener.
func (l *binaryListener) ssh(key, stdin string, args ...string) (string, int) {
	c := exec.Command("ssh", append([]string{"-F", "/dev/null", "-i", l.keys[key], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + filepath.Join(l.home, "known_hosts"), "-o", "StrictHostKeyChecking=accept-new",
		"-o", "LogLevel=ERROR", "-p", l.port, "127.0.0.1"}, args...)...)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		l.t.Fatal(err)
	}
	return string(out), code
}

// checkSFTP reaches the namespace over SFTP, with OpenSSH's sftp: the
// admin lists and reads; the reader reads and may not write.
func (l *binaryListener) checkSFTP() {
	t := l.t
	sftp := func(key, batch string) (string, error) {
		c := exec.Command("sftp", "-F", "/dev/null", "-i", l.keys[key], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
			"-o", "UserKnownHostsFile="+filepath.Join(l.home, "known_hosts"), "-o", "StrictHostKeyChecking=accept-new",
			"-o", "LogLevel=ERROR", "-P", l.port, "-b", "-", "127.0.0.1")
		c.Stdin = strings.NewReader(batch)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	got := filepath.Join(l.home, "status.got")
	if out, err := sftp("admin", "ls /session\nget /status "+got+"\n"); err != nil || !strings.Contains(out, "bin") {
		t.Errorf("sftp ls /session, get /status: %v\n%s", err, out)
	} else if b, _ := os.ReadFile(got); !strings.Contains(string(b), "version ") {
		t.Errorf("sftp get /status brought %q", b)
	}
	up := filepath.Join(l.home, "newsession")
	os.WriteFile(up, []byte("name=viasftp\n"), 0600)
	if out, err := sftp("reader", "put "+up+" /session/new\n"); err == nil {
		t.Errorf("a read-only key's sftp put went through:\n%s", out)
	}
}

// lockedBuilder is a log one goroutine writes while the test reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
