package deploy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"ollie/broker"
	"ollie/internal/demohost"
	"ollie/tunnel"
)

// InstallSystem's credential gate, over a real SSH connection to a host
// inside the test: the password is asked three times at most, and every
// buffer of InstallSystem's that held it (the grant's, and the line with
// its newline sent to sudo, kept through testHookSudoLine) is zeroed.
// cmd/ollie-remote's TestDeployLoginShells runs -system against the real
// sshd and sudo in the lab tier; this runs everywhere, and fast.

// sudoHost is an SSH server on loopback that runs -system's two scripts,
// the probe and the install with sudo, and nothing else: what they would
// do to SystemCommand they do to a file of the test's (Path), and their
// sudo is the test's, which asks for the password Right as sudo -S does.
type sudoHost struct {
	Client *tunnel.Client
	Path   string // where SystemCommand goes on this host
}

// testSudo asks for the password given as sudo -S does: sudo -n refuses,
// saying a password is required; sudo -S reads one line and runs what
// follows -- as the user, or says the password was wrong with sudo's C
// messages.
const testSudo = `#!/bin/sh
case $1 in
-n) echo "sudo: a password is required" >&2; exit 1 ;;
-S) ;;
*) echo "testsudo: unexpected $*" >&2; exit 2 ;;
esac
while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
shift
IFS= read -r line || line=
if [ "$line" != '%s' ]; then
	echo "Sorry, try again." >&2
	echo "sudo: 1 incorrect password attempt" >&2
	exit 1
fi
exec "$@"
`

func startSudoHost(t *testing.T, right string) *sudoHost {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "sudo"), []byte(fmt.Sprintf(testSudo, right)), 0700); err != nil {
		t.Fatal(err)
	}
	h := &sudoHost{Path: filepath.Join(dir, "usr-local-bin", "ollie")}
	// The commands InstallSystem sends, and what this host runs for each.
	run := map[string]string{
		Sh(systemProbe, SystemCommand): Sh(systemProbe, h.Path),
	}
	for _, mode := range []string{"n", "S"} {
		run[Sh(systemSudo, SystemCommand, systemWrapper, mode, systemInstall)] = Sh(systemSudo, h.Path, systemWrapper, mode, systemInstall)
	}

	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	clientKey, err := demohost.NewClientKey(key)
	if err != nil {
		t.Fatal(err)
	}
	srv := &gliderssh.Server{
		HostSigners: []gliderssh.Signer{signer},
		PublicKeyHandler: func(_ gliderssh.Context, k gliderssh.PublicKey) bool {
			return gliderssh.KeysEqual(k, clientKey)
		},
		Handler: func(s gliderssh.Session) {
			script, ok := run[s.RawCommand()]
			if !ok {
				fmt.Fprintf(s.Stderr(), "sudohost: not a command of -system's: %.80q\n", s.RawCommand())
				s.Exit(127)
				return
			}
			cmd := exec.Command("/bin/sh", "-c", script)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir, "LC_ALL=C"}
			cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s.Stderr()
			cmd.WaitDelay = time.Second
			err := cmd.Run()
			var ee *exec.ExitError
			switch {
			case err == nil:
				s.Exit(0)
			case errors.As(err, &ee):
				s.Exit(ee.ExitCode())
			default:
				fmt.Fprintf(s.Stderr(), "sudohost: %v\n", err)
				s.Exit(255)
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr.String())}, signer.PublicKey())+"\n"), 0600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("Host sudohost\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n",
		addr.IP, addr.Port, me.Username, key, known)), 0600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_AUTH_SOCK", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.Client, err = tunnel.Dial(ctx, "sudohost", tunnel.Options{ConfigFile: config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Client.Close() })
	return h
}

// typedGrant is a person at the desktop who types passwords in order; it
// keeps each slice it hands over, to look at later.
type typedGrant struct {
	mu       sync.Mutex
	pws      []string
	given    [][]byte
	problems []string
	closed   string
}

func (g *typedGrant) Password(ctx context.Context, attempt int, problem string) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.problems = append(g.problems, problem)
	if len(g.pws) == 0 {
		return nil, fmt.Errorf("%w: no more passwords", broker.ErrDenied)
	}
	pw := []byte(g.pws[0])
	g.pws = g.pws[1:]
	g.given = append(g.given, pw)
	return pw, nil
}

func (g *typedGrant) Close(result string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = result
	return nil
}

func allZero(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }

// TestInstallSystemPassword installs with a wrong password and then the
// right one, and then with three wrong ones, of which the third is the
// last asked: each time every buffer that held a password is zeroed.
func TestInstallSystemPassword(t *testing.T) {
	right, wrong := "pw-right-"+broker.NewID(), "pw-wrong-"+broker.NewID()
	h := startSudoHost(t, right)

	install := func(t *testing.T, pws ...string) (changed []string, problem string, g *typedGrant, lines [][]byte) {
		t.Helper()
		os.Remove(h.Path)
		g = &typedGrant{pws: pws}
		testHookSudoLine = func(line []byte) { lines = append(lines, line) }
		defer func() { testHookSudoLine = nil }()
		approve := broker.ApproverFunc(func(ctx context.Context, req *broker.Request) (broker.Grant, error) {
			if req.Tool != SystemTool || !req.Sudo {
				t.Errorf("asked to approve %+v", req)
			}
			return g, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		changed, problem = InstallSystem(ctx, h.Client, "sudohost", approve, Deadlines{Step: 20 * time.Second}, nil)
		return changed, problem, g, lines
	}
	zeroed := func(t *testing.T, g *typedGrant, lines [][]byte, asked int) {
		t.Helper()
		if len(g.given) != asked || len(lines) != asked {
			t.Errorf("%d passwords handed over, %d lines sent to sudo; want %d", len(g.given), len(lines), asked)
		}
		for i, pw := range g.given {
			if !allZero(pw) {
				t.Errorf("password %d is still in the buffer the grant handed over", i+1)
			}
		}
		for i, line := range lines {
			if !allZero(line) {
				t.Errorf("the line sent to sudo with password %d is still in memory", i+1)
			}
		}
	}

	t.Run("wrong then right", func(t *testing.T) {
		changed, problem, g, lines := install(t, wrong, right)
		if problem != "" || len(changed) != 1 || !strings.HasPrefix(changed[0], "installed "+SystemCommand) {
			t.Errorf("changed %q, problem %q: want it installed", changed, problem)
		}
		if b, _ := os.ReadFile(h.Path); string(b) != systemWrapper {
			t.Errorf("the host's %s holds %q, want the wrapper", SystemCommand, b)
		}
		if fmt.Sprint(g.problems) != "[ wrong password]" {
			t.Errorf("asked %q", g.problems)
		}
		zeroed(t, g, lines, 2)
	})

	t.Run("wrong three times", func(t *testing.T) {
		changed, problem, g, lines := install(t, wrong+"1", wrong+"2", wrong+"3", right)
		if len(changed) != 0 || !strings.Contains(problem, "the sudo password was wrong 3 times") {
			t.Errorf("changed %q, problem %q: want it not installed, the password wrong 3 times", changed, problem)
		}
		if _, err := os.Lstat(h.Path); err == nil {
			t.Errorf("installed after three wrong passwords")
		}
		if len(g.problems) != 3 {
			t.Errorf("the password was asked %d times, want 3 at most: %q", len(g.problems), g.problems)
		}
		zeroed(t, g, lines, 3)
	})
}
