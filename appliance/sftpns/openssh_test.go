package sftpns_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/appliance/sftpns"
	"ollie/internal/await"
	"ollie/internal/demohost"
	"ollie/internal/lab"
)

// sshServer is a loopback SSH server with only the sftp subsystem, serving
// the fixture to one client key, and the OpenSSH client files to reach it.
type sshServer struct {
	port   int
	dir    string
	key    string // the client's private key file
	known  string // a known_hosts file naming the server's key
	config string // an ssh config file: nothing from the user's own
}

func startSSH(t *testing.T, fx *fixture, srv *sftpns.Server) *sshServer {
	t.Helper()
	dir := t.TempDir()
	s := &sshServer{dir: dir, key: filepath.Join(dir, "id"), known: filepath.Join(dir, "known_hosts"), config: filepath.Join(dir, "config")}
	clientKey, err := demohost.NewClientKey(s.key)
	if err != nil {
		t.Fatal(err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	gs := &gliderssh.Server{
		HostSigners: []gliderssh.Signer{signer},
		PublicKeyHandler: func(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
			return bytes.Equal(key.Marshal(), clientKey.Marshal())
		},
		Handler: func(s gliderssh.Session) {
			fmt.Fprintln(s.Stderr(), "only the sftp subsystem here")
			s.Exit(1)
		},
		SubsystemHandlers: map[string]gliderssh.SubsystemHandler{
			"sftp": func(s gliderssh.Session) {
				if err := srv.Serve(s); err != nil {
					t.Logf("sftp session: %v", err)
				}
			},
		},
	}
	go gs.Serve(ln)
	t.Cleanup(func() { gs.Close() })
	hostLine := fmt.Sprintf("[127.0.0.1]:%d %s", s.port, ssh.MarshalAuthorizedKey(signer.PublicKey()))
	if err := os.WriteFile(s.known, []byte(hostLine), 0600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`Host ns
	HostName 127.0.0.1
	Port %d
	User ollie
	IdentityFile %s
	IdentitiesOnly yes
	IdentityAgent none
	UserKnownHostsFile %s
	GlobalKnownHostsFile /dev/null
	StrictHostKeyChecking yes
	BatchMode yes
	LogLevel ERROR
`, s.port, s.key, s.known)
	if err := os.WriteFile(s.config, []byte(config), 0600); err != nil {
		t.Fatal(err)
	}
	return s
}

// OpenSSH's sftp in batch mode: ls, get, put.
func TestOpenSSHSFTP(t *testing.T) {
	bin, err := exec.LookPath("sftp")
	lab.Need(t, err == nil, "OpenSSH's sftp client (openssh-client)")
	fx := newFixture(t)
	s := startSSH(t, fx, &sftpns.Server{Dial: fx.dial, StreamWait: 200 * time.Millisecond})
	local := filepath.Join(s.dir, "state")
	upload := filepath.Join(s.dir, "upload")
	if err := os.WriteFile(upload, []byte("a prompt\n"), 0600); err != nil {
		t.Fatal(err)
	}
	batch := filepath.Join(s.dir, "batch")
	script := fmt.Sprintf("ls -l /\nget /state %s\nput %s /prompt\n-rename /state /x\n-mkdir /new\n", local, upload)
	if err := os.WriteFile(batch, []byte(script), 0600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-F", s.config, "-b", batch, "ns").CombinedOutput()
	if err != nil {
		t.Fatalf("sftp -b: %v\n%s", err, out)
	}
	for _, name := range []string{"state", "prompt", "upper", "chat", "dir"} {
		if !strings.Contains(string(out), " "+name+"\n") {
			t.Errorf("ls -l / lists no %s:\n%s", name, out)
		}
	}
	if b, err := os.ReadFile(local); err != nil || string(b) != stateText {
		t.Errorf("get /state: %q %v", b, err)
	}
	if got := fx.sent(); len(got) != 1 || got[0] != "a prompt\n" {
		t.Errorf("put /prompt sent %q", got)
	}
	if !strings.Contains(string(out), "operation unsupported") && !strings.Contains(string(out), "Operation unsupported") {
		t.Errorf("rename and mkdir not refused as unsupported:\n%s", out)
	}
}

// sshfs mounts the namespace: cat a snapshot, echo a prompt, tail -f a
// chat while it grows.
func TestSSHFS(t *testing.T) {
	bin, err := exec.LookPath("sshfs")
	lab.Need(t, err == nil, "sshfs (apt-get install sshfs)")
	lab.Root(t, "mounting with sshfs (FUSE)")
	_, err = os.Stat("/dev/fuse")
	lab.Need(t, err == nil, "/dev/fuse")
	fx := newFixture(t)
	s := startSSH(t, fx, &sftpns.Server{Dial: fx.dial, StreamWait: 200 * time.Millisecond})
	mnt := filepath.Join(s.dir, "mnt")
	if err := os.Mkdir(mnt, 0700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-F", s.config, "-o", "direct_io,dir_cache=no,attr_timeout=0,entry_timeout=0", "ns:/", mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("sshfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("fusermount", "-u", mnt).CombinedOutput(); err != nil {
			t.Errorf("fusermount -u: %v\n%s", err, out)
		}
	})

	if b, err := os.ReadFile(filepath.Join(mnt, "state")); err != nil || string(b) != stateText {
		t.Errorf("cat mnt/state: %q %v", b, err)
	}
	if out, err := exec.Command("sh", "-c", "echo hi > "+strconv.Quote(filepath.Join(mnt, "prompt"))).CombinedOutput(); err != nil {
		t.Errorf("echo hi > mnt/prompt: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	await.Poll(ctx, func() bool { return len(fx.sent()) > 0 })
	if got := fx.sent(); len(got) != 1 || got[0] != "hi\n" {
		t.Errorf("echo hi > mnt/prompt sent %q", got)
	}

	// rdwr on one descriptor: the reply is read on from where the
	// request ended.
	upper := strconv.Quote(filepath.Join(mnt, "upper"))
	if out, err := exec.Command("sh", "-c", "exec 3<>"+upper+"; printf 'shout this' >&3; cat <&3").CombinedOutput(); err != nil || string(out) != "SHOUT THIS" {
		t.Errorf("rdwr on one descriptor: %q %v", out, err)
	}

	fx.chat.Write([]byte("first\n"))
	var tailOut, tailErr lockedBuffer
	tail := exec.Command("tail", "-s", "0.1", "-f", filepath.Join(mnt, "chat"))
	tail.Stdout, tail.Stderr = &tailOut, &tailErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	// Each line is written once tail has shown the one before: tail
	// follows the chat as it grows.
	tailShows := func(line string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return await.Poll(ctx, func() bool { return strings.Contains(tailOut.String(), line) })
	}
	if tailShows("first\n") {
		fx.chat.Write([]byte("second\n"))
		if tailShows("second\n") {
			fx.chat.Write([]byte("third\n"))
			tailShows("third\n")
		}
	}
	tail.Process.Kill()
	tail.Wait()
	if got := tailOut.String(); got != "first\nsecond\nthird\n" {
		t.Errorf("tail -f mnt/chat: %q (stderr %q)", got, tailErr.String())
	}
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSSHFSNewSession (issue 31, item 6): mounted as README says, a
// session made after a listing shows in the next listing at once, not
// when sshfs's directory cache (20 s) expires.
func TestSSHFSNewSession(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("sshfs -p 2222 HOST:/ mnt -o ([^` \n]+)").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README gives no sshfs command with -o")
	}
	opts := string(m[1])
	if opts != sftpns.SSHFSOptions {
		t.Errorf("README mounts with -o %s; sftpns.SSHFSOptions is %s", opts, sftpns.SSHFSOptions)
	}
	bin, err := exec.LookPath("sshfs")
	lab.Need(t, err == nil, "sshfs (apt-get install sshfs)")
	lab.Root(t, "mounting with sshfs (FUSE)")
	_, err = os.Stat("/dev/fuse")
	lab.Need(t, err == nil, "/dev/fuse")
	fx := newFixture(t)
	s := startSSH(t, fx, &sftpns.Server{Dial: fx.dial, StreamWait: 200 * time.Millisecond})
	mnt := filepath.Join(s.dir, "mnt")
	if err := os.Mkdir(mnt, 0700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-F", s.config, "-o", opts, "ns:/", mnt).CombinedOutput(); err != nil {
		t.Fatalf("sshfs -o %s: %v\n%s", opts, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("fusermount", "-u", mnt).CombinedOutput(); err != nil {
			t.Errorf("fusermount -u: %v\n%s", err, out)
		}
	})

	ls := func() []string {
		es, err := os.ReadDir(filepath.Join(mnt, "session"))
		if err != nil {
			t.Fatalf("ls mnt/session: %v", err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	if got := ls(); len(got) != 0 {
		t.Fatalf("ls mnt/session = %q before any session", got)
	}
	fx.addSession("proj")
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	await.Poll(ctx, func() bool { got = ls(); return slices.Contains(got, "proj") })
	if !slices.Contains(got, "proj") {
		t.Fatalf("ls mnt/session = %q 2 s after session proj was made, mounted with -o %s", got, opts)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "session", "proj", "id")); err != nil || string(b) != "proj\n" {
		t.Errorf("cat mnt/session/proj/id: %q %v", b, err)
	}
}
