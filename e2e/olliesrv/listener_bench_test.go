package olliesrv

// The appliance listener's figures (issue 17), each beside its peer in the
// same run, interleaved iteration by iteration: time to interactive next
// to OpenSSH's sshd, and SFTP read throughput of a large stream next to
// 9P through an OpenSSH ssh -L of the namespace socket. docs/benchmarks.md
// says how to read them.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"github.com/creack/pty"
	"github.com/pkg/sftp"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/sshlab"
	"ollie/ns/client"
)

// benchLab starts an sshlab host (OpenSSH's sshd) and the listener, both
// letting in the lab's ed25519 client key, the daemon as the host's user
// if asHostUser; it skips without root or sshd: benchmarks are not tests.
func benchLab(b *testing.B, env []string, asHostUser bool) (*sshlab.Lab, *listenerHost) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root: internal/sshlab starts OpenSSH's sshd")
	}
	for _, p := range []string{"sshd", "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(p); err != nil {
			if _, err := os.Stat("/usr/sbin/" + p); err != nil {
				b.Skipf("needs %s (openssh-server, openssh-client)", p)
			}
		}
	}
	l := sshlab.Start(b, sshlab.Config{})
	cfg := listenerConfig{Env: env, Key: l.ClientKey}
	if asHostUser {
		cfg.Cred = &syscall.Credential{Uid: uint32(l.Host(0).UID), Gid: uint32(l.Host(0).GID)}
	}
	return l, startListener(b, cfg)
}

// untilOnPTY runs cmd on a pty and returns how long it took until want
// appeared; stop ends cmd by typing exit and waits for it.
func untilOnPTY(b *testing.B, cmd *exec.Cmd, want string) (took time.Duration, stop func()) {
	b.Helper()
	var seen lockedBuilder
	start := time.Now()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
	if err != nil {
		b.Fatal(err)
	}
	copied, appeared := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		io.Copy(writerFunc(func(s string) {
			seen.WriteString(s)
			if strings.Contains(seen.String(), want) {
				once.Do(func() { close(appeared) })
			}
		}), ptmx)
		close(copied)
	}()
	select {
	case <-appeared:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		b.Fatalf("%v: no %q on the pty; saw %q", cmd.Args, want, seen.String())
	}
	took = time.Since(start)
	return took, func() {
		io.WriteString(ptmx, "exit\r")
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("%v after exit: %v", cmd.Args, err)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			b.Errorf("%v did not end after exit", cmd.Args)
		}
		ptmx.Close()
		<-copied
	}
}

// BenchmarkListenerTimeToInteractive: from starting ssh -tt on a pty to
// the ollie shell's first prompt through the listener, beside OpenSSH's
// sshd (internal/sshlab, the same ed25519 client key, an ed25519 host
// key) until sh -i's prompt. Each iteration is one of each.
func BenchmarkListenerTimeToInteractive(b *testing.B) {
	l, h := benchLab(b, nil, false)
	const ps1 = "sshd-ready$ "
	var listener, sshd time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		took, stop := untilOnPTY(b, exec.Command("ssh", "-F", h.SSHConfig, "-tt", "ollie"), "ollie:/% ")
		listener += took
		b.StopTimer()
		stop()
		b.StartTimer()
		took, stop = untilOnPTY(b, l.SSH("-tt", l.Host(0).Name, "env PS1='"+ps1+"' sh -i"), ps1)
		sshd += took
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(listener.Microseconds())/1000/float64(b.N), "listener-ms")
	b.ReportMetric(float64(sshd.Microseconds())/1000/float64(b.N), "sshd-ms")
	b.ReportMetric(float64(listener)/float64(sshd), "x-sshd")
}

// streamAnswer is the scripted answer whose chat the throughput benchmark
// reads: 48 chunks of 64 KiB lines, 3 MiB, under the 4 MiB a chat keeps.
func streamAnswer() fakellm.Response {
	line := strings.Repeat("x", 1023) + "\n"
	chunk := strings.Repeat(line, 64)
	r := fakellm.Response{}
	for i := 0; i < 48; i++ {
		r.Text = append(r.Text, chunk)
	}
	return r
}

// BenchmarkListenerSFTPStream: reading an agent's chat stream holding a
// 3 MiB scripted answer, from offset 0 to its length, four ways, each
// through OpenSSH's ssh client with the same ed25519 key:
//   - sftp-MB/s: the listener's sftp subsystem with pkg/sftp's client (one
//     ReadAt of the whole length: its default 32 KiB packets, up to 64 in
//     flight) over ssh -s ollie sftp;
//   - 9p-sshd-MB/s: ollie's 9P client (ns/client: one read of up to msize
//     in flight) over ssh -N -L of the namespace socket to OpenSSH's sshd
//     (internal/sshlab): the peer;
//   - 9p-sshd-nodelay-MB/s: the same forward held beside a session on a
//     pty, which makes ssh and sshd set TCP_NODELAY;
//   - 9p-listener-MB/s: the same client over ssh -N -L to the listener.
//
// The daemon runs as the sshlab host's user, so that sshd's forward is
// its owner's. Each iteration opens the file, reads its whole length and
// closes it on every path in turn; the SSH connections are made once,
// outside the timer, so ns/op is the four reads together.
func BenchmarkListenerSFTPStream(b *testing.B) {
	llm := fakellm.Start(b)
	l, h := benchLab(b, agentEnv(llm), true)
	h.must("name=bench cwd=/tmp\n", "rdwr", "session/new")
	h.must("name=a backend=openai\n", "rdwr", "session/bench/agent/new")
	llm.Push(streamAnswer())
	h.must("write a long answer\n", "write", "session/bench/agent/a/prompt")
	h.waitState("session/bench/agent/a", "idle")
	const chat = "session/bench/agent/a/chat"

	dir := b.TempDir()
	viaSshd := forward9P(b, filepath.Join(dir, "sshd.sock"),
		l.SSH("-N", "-o", "ExitOnForwardFailure=yes", "-L", filepath.Join(dir, "sshd.sock")+":"+filepath.Join(h.Dir, "ollie"), l.Host(0).Name))
	// The same forward held beside a session on a pty: that makes ssh and
	// sshd set TCP_NODELAY (an "interactive" connection), which a bare -N
	// forward goes without; 9P's one read in flight then waits on no
	// delayed ACK.
	viaSshdNoDelay := forward9P(b, filepath.Join(dir, "sshd-nodelay.sock"),
		l.SSH("-tt", "-o", "ExitOnForwardFailure=yes", "-L", filepath.Join(dir, "sshd-nodelay.sock")+":"+filepath.Join(h.Dir, "ollie"), l.Host(0).Name, "sleep 3600"))
	viaListener := forward9P(b, filepath.Join(dir, "listener.sock"),
		exec.Command("ssh", "-F", h.SSHConfig, "-N", "-o", "ExitOnForwardFailure=yes", "-L", filepath.Join(dir, "listener.sock")+":"+filepath.Join(h.Dir, "ollie"), "ollie"))
	size, err := viaSshd.Size(context.Background(), chat)
	if err != nil || size < 3<<20 {
		b.Fatalf("the chat is %d bytes (%v), want the 3 MiB answer in it", size, err)
	}

	ssh := exec.Command("ssh", "-F", h.SSHConfig, "-s", "ollie", "sftp")
	w, _ := ssh.StdinPipe()
	r, _ := ssh.StdoutPipe()
	if err := ssh.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ssh.Process.Kill(); ssh.Wait() })
	sc, err := sftp.NewClientPipe(r, w)
	if err != nil {
		b.Fatalf("sftp through the listener: %v", err)
	}
	b.Cleanup(func() { sc.Close() })
	readSFTP := func(buf []byte) error {
		f, err := sc.Open("/" + chat)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := f.ReadAt(buf, 0); n != len(buf) {
			return fmt.Errorf("sftp read of %s: %d bytes of %d: %w", chat, n, len(buf), err)
		}
		return nil
	}

	// The same bytes every way.
	want, got := make([]byte, size), make([]byte, size)
	if err := read9P(viaSshd, chat, want); err != nil {
		b.Fatal(err)
	}
	if !bytes.Contains(want, []byte("write a long answer")) {
		b.Fatalf("the chat does not hold the prompt: %.200q", want)
	}
	for name, read := range map[string]func([]byte) error{
		"sftp":                 func(p []byte) error { return readSFTP(p) },
		"9P via the listener":  func(p []byte) error { return read9P(viaListener, chat, p) },
		"9P via sshd, nodelay": func(p []byte) error { return read9P(viaSshdNoDelay, chat, p) },
	} {
		clear(got)
		if err := read(got); err != nil || !bytes.Equal(got, want) {
			b.Fatalf("%s read other bytes than 9P via sshd (%v)", name, err)
		}
	}

	var tSFTP, tSshd, tNoDelay, tListener time.Duration
	buf := make([]byte, size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := readSFTP(buf); err != nil {
			b.Fatal(err)
		}
		tSFTP += time.Since(start)
		start = time.Now()
		if err := read9P(viaSshd, chat, buf); err != nil {
			b.Fatal(err)
		}
		tSshd += time.Since(start)
		start = time.Now()
		if err := read9P(viaSshdNoDelay, chat, buf); err != nil {
			b.Fatal(err)
		}
		tNoDelay += time.Since(start)
		start = time.Now()
		if err := read9P(viaListener, chat, buf); err != nil {
			b.Fatal(err)
		}
		tListener += time.Since(start)
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbs(tSFTP), "sftp-MB/s")
	b.ReportMetric(mbs(tSshd), "9p-sshd-MB/s")
	b.ReportMetric(mbs(tNoDelay), "9p-sshd-nodelay-MB/s")
	b.ReportMetric(mbs(tListener), "9p-listener-MB/s")
	b.ReportMetric(tSshd.Seconds()/tSFTP.Seconds(), "sftp/9p-sshd")
	b.ReportMetric(tNoDelay.Seconds()/tSFTP.Seconds(), "sftp/9p-sshd-nodelay")
}

// forward9P starts ssh, an ssh -N -L of the namespace socket to sock, and
// dials the namespace through it.
func forward9P(b *testing.B, sock string, ssh *exec.Cmd) *client.Conn {
	b.Helper()
	if err := ssh.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ssh.Process.Kill(); ssh.Wait() })
	await.Until(b, 10*time.Second, fmt.Sprintf("%v making %s", ssh.Args, sock), func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	c, err := client.Dial(sock)
	if err != nil {
		b.Fatalf("9P through %v: %v", ssh.Args, err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// read9P reads n bytes of name from offset 0 through c.
func read9P(c *client.Conn, name string, buf []byte) error {
	ctx := context.Background()
	f, err := c.Open(ctx, name, plan9.OREAD)
	if err != nil {
		return err
	}
	defer f.Close()
	for off := 0; off < len(buf); {
		n, err := f.ReadAt(ctx, buf[off:], int64(off))
		if err != nil {
			return fmt.Errorf("9P read of %s at %d: %w", name, off, err)
		}
		off += n
	}
	return nil
}
