// Package sshlab starts real OpenSSH sshd processes on loopback addresses
// (127.0.0.11, 127.0.0.12, …), each a "host" with its own host key, system
// user and log, and writes an ssh config and known_hosts that reach them.
//
// Tests use it to talk to the same sshd users have, not to an in-process
// imitation. It needs root (it creates users and runs sshd) and the
// openssh-server package; without them Start skips the test in plain go
// test and fails it in the lab tier (internal/lab), since a skipped SSH
// test in CI would hide a broken setup.
//
// With Config.Isolated each host's sshd runs in a network namespace of its
// own with no way out (internal/netlab): its address is the namespace's
// end of a veth pair (10.201.X.2, port 22), and Host.Outbound proves what
// the host tried to reach besides its SSH sessions.
//
// Several labs may run at once, in one test process or in parallel test
// processes: each sshd listens on a port of its own, so the addresses are
// shared, and each lab keeps its client key and authorized_keys in its own
// directory. System users are shared between labs (created if missing,
// reused if present); Config.UserPrefix keeps labs apart whose users need
// different passwords or sudo rules.
package sshlab

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"

	"ollie/internal/lab"
	"ollie/internal/netlab"
)

// Root holds every lab's directory. It is not under /tmp: sshd's StrictModes
// refuses an AuthorizedKeysFile below a group or world writable directory,
// and /tmp is world writable.
const Root = "/var/lib/ollie-sshlab"

// Config says what hosts a lab has.
type Config struct {
	// Hosts is how many hosts to start, on 127.0.0.11, 127.0.0.12, …
	// (with Isolated, each on 10.201.X.2 in a namespace of its own;
	// at most MaxHosts either way).
	// 0 means 1.
	Hosts int
	// UserPrefix names the hosts' users: prefix + last address byte
	// ("olab11"). "" means "olab".
	UserPrefix string
	// Password, if set, is each user's real password (chpasswd), for sudo.
	// Without it an account gets the unusable password "*", which sshd
	// (UsePAM no) accepts for key logins where a locked "!" is refused.
	Password string
	// ExtraPath puts directories first on PATH for one host's sessions,
	// by host index (0 is the first host). The directories must be
	// readable by that host's user.
	ExtraPath map[int][]string
	// Sudoers writes /etc/sudoers.d/ollie-sshlab-USER letting each user
	// run anything as root with its password, or with none if SudoNopasswd.
	// The file is removed when the lab stops.
	Sudoers, SudoNopasswd bool
	// Sshd holds extra sshd_config lines for every host. They come first,
	// so they win over the lab's own settings (sshd takes the first value).
	Sshd []string
	// Shell gives a host's user another login shell than /bin/bash, by
	// host index: a path sshd can execute, which runs commands as
	// SHELL -c CMD with argv[0] its base name (so busybox's ash is a
	// symlink named ash to busybox). Users are shared between labs: each
	// lab sets its users' shells, and puts /bin/bash back when it stops.
	Shell map[int]string
	// Isolated runs each host's sshd in a network namespace of its own
	// (internal/netlab) whose only link leads to the test's namespace,
	// with no default route: the host reaches nothing but the desktop's
	// end of that link, and its firewall refuses and counts even that.
	// The host's Addr is the namespace's end of the link, its Port 22,
	// and its Netns and Net name the namespace. Everything its sessions
	// run (olliesrv too) runs in that namespace; the file system is the
	// machine's, so Unix sockets, forwarded ones too, work as before.
	Isolated bool
}

// Lab is a set of running hosts and the client files that reach them.
type Lab struct {
	Dir        string // the lab's directory, root-owned, 0755
	ConfigFile string // ssh config with a Host entry per host (h11, h12, …)
	KnownHosts string // known_hosts holding every host's key
	ClientKey  string // the client's private key (ed25519, no passphrase)
	ClientPub  string // the client's public key line
	Hosts      []*Host

	t   testing.TB
	cfg Config
}

// Host is one sshd.
type Host struct {
	Name       string // ssh config alias, e.g. "h11"
	Addr       string // e.g. "127.0.0.11"
	Port       int
	User       string // the login user, e.g. "olab11"
	Home       string // the user's home directory
	UID, GID   int
	HostKey    string // private host key file
	HostKeyPub string // public host key line ("ssh-ed25519 AAAA…")
	Log        string // sshd log file
	SshdConfig string // sshd_config file
	// Netns is the network namespace of an isolated host
	// (Config.Isolated), for ip netns exec; "" for a host on loopback.
	Netns string
	// Net is that namespace: Net.Command runs a command inside it, as
	// root; nil for a host on loopback.
	Net *netlab.Net

	lab *Lab
	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when cmd has been waited for.
	exited chan struct{}
}

// MaxHosts is how many hosts a lab can have.
const MaxHosts = 9

// Start starts cfg.Hosts hosts and stops them, and removes the lab
// directory, when the test ends.
func Start(t testing.TB, cfg Config) *Lab {
	t.Helper()
	if err := check(); err != nil {
		lab.Need(t, false, fmt.Sprintf("sshlab: %v (run .ci/run, or apt-get install openssh-server sudo, as root)", err))
	}
	if cfg.Isolated {
		if err := netlab.Check(); err != nil {
			lab.Need(t, false, fmt.Sprintf("sshlab: isolated hosts: %v (run .ci/run, or apt-get install iproute2 nftables, as root)", err))
		}
	}
	if cfg.Hosts <= 0 {
		cfg.Hosts = 1
	}
	// The lab's hosts are 127.0.0.11–19: the rest of 127/8 stays free
	// for whatever else the machine runs.
	if cfg.Hosts > MaxHosts {
		t.Fatalf("sshlab: %d hosts: at most %d (127.0.0.11–19)", cfg.Hosts, MaxHosts)
	}
	if cfg.UserPrefix == "" {
		cfg.UserPrefix = "olab"
	}
	if err := os.MkdirAll(Root, 0o755); err != nil {
		t.Fatalf("sshlab: %v", err)
	}
	// MkdirAll keeps the mode of an existing Root; StrictModes needs it tight.
	if err := os.Chmod(Root, 0o755); err != nil {
		t.Fatalf("sshlab: %v", err)
	}
	removeStale()
	dir, err := os.MkdirTemp(Root, fmt.Sprintf("lab-%d-", os.Getpid()))
	if err != nil {
		t.Fatalf("sshlab: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("sshlab: %v", err)
	}
	l := &Lab{
		Dir:        dir,
		ConfigFile: filepath.Join(dir, "ssh_config"),
		KnownHosts: filepath.Join(dir, "known_hosts"),
		ClientKey:  filepath.Join(dir, "id_ed25519"),
		t:          t,
		cfg:        cfg,
	}
	t.Cleanup(l.stop)
	if err := l.setup(); err != nil {
		t.Fatalf("sshlab: %v", err)
	}
	return l
}

func check() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (it creates users and runs sshd)")
	}
	for _, p := range []string{"/usr/sbin/sshd", "ssh"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%s not found", p)
		}
	}
	return nil
}

// removeStale removes the directories of labs whose test process is gone
// (killed before its cleanup ran).
func removeStale() {
	ents, _ := os.ReadDir(Root)
	for _, e := range ents {
		f := strings.Split(e.Name(), "-")
		if len(f) < 3 || f[0] != "lab" {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(Root, e.Name()))
		}
	}
}

func (l *Lab) setup() error {
	pub, err := writeKey(l.ClientKey, "sshlab-client")
	if err != nil {
		return err
	}
	l.ClientPub = pub
	for _, d := range []string{"authorized_keys", "hosts"} {
		if err := os.Mkdir(filepath.Join(l.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return err
	}
	for i := 0; i < l.cfg.Hosts; i++ {
		n := 11 + i
		h := &Host{
			Name: fmt.Sprintf("h%d", n),
			Addr: fmt.Sprintf("127.0.0.%d", n),
			User: fmt.Sprintf("%s%d", l.cfg.UserPrefix, n),
			lab:  l,
		}
		hd := filepath.Join(l.Dir, "hosts", h.Name)
		if err := os.Mkdir(hd, 0o755); err != nil {
			return err
		}
		h.HostKey = filepath.Join(hd, "ssh_host_ed25519_key")
		h.Log = filepath.Join(hd, "sshd.log")
		h.SshdConfig = filepath.Join(hd, "sshd_config")
		if h.HostKeyPub, err = writeKey(h.HostKey, h.Name); err != nil {
			return err
		}
		l.Hosts = append(l.Hosts, h)
		if l.cfg.Isolated {
			if h.Net, err = netlab.Create(); err != nil {
				return err
			}
			h.Netns, h.Addr = h.Net.Name, h.Net.Addr
		}
	}
	// useradd and chpasswd lock /etc/passwd and /etc/shadow, so users are
	// made one after another; the sshds then start in parallel.
	for i, h := range l.Hosts {
		if err := l.user(h, l.shell(i)); err != nil {
			return err
		}
	}
	for i, h := range l.Hosts {
		if err := l.writeSshdConfig(i, h); err != nil {
			return err
		}
	}
	errs := make([]error, len(l.Hosts))
	var wg sync.WaitGroup
	for i, h := range l.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.start(true)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return l.writeClientFiles()
}

// writeKey writes a new ed25519 private key in OpenSSH format and returns
// its public key line. Go makes it faster than a ssh-keygen process.
func writeKey(path, comment string) (string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	blk, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		return "", err
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(spub)))
	if err := os.WriteFile(path+".pub", []byte(line+" "+comment+"\n"), 0o644); err != nil {
		return "", err
	}
	return line, nil
}

func (l *Lab) writeSshdConfig(i int, h *Host) error {
	// An isolated host has its namespace's ports to itself.
	port := 22
	if h.Net == nil {
		var err error
		if port, err = freePort(h.Addr); err != nil {
			return err
		}
	}
	h.Port = port
	var b bytes.Buffer
	for _, s := range l.cfg.Sshd {
		fmt.Fprintln(&b, s)
	}
	if dirs := l.cfg.ExtraPath[i]; len(dirs) > 0 {
		fmt.Fprintf(&b, "SetEnv PATH=%s:/usr/local/bin:/usr/bin:/bin\n", strings.Join(dirs, ":"))
	}
	// UsePAM no: pam_loginuid and friends fail in some containers, and
	// sudo does its own PAM regardless of how the login happened.
	fmt.Fprintf(&b, `ListenAddress %s:%d
HostKey %s
PidFile none
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile %s/authorized_keys/%%u
StrictModes yes
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
AllowTcpForwarding yes
MaxSessions 10
MaxStartups 100:30:200
LogLevel VERBOSE
PrintMotd no
UseDNS no
Subsystem sftp internal-sftp
`, h.Addr, h.Port, h.HostKey, l.Dir)
	return os.WriteFile(h.SshdConfig, b.Bytes(), 0o644)
}

func freePort(addr string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Host returns the i'th host (0 is h11).
func (l *Lab) Host(i int) *Host { return l.Hosts[i] }

// SSH returns the OpenSSH client, ssh -F ConfigFile -o BatchMode=yes args...
func (l *Lab) SSH(args ...string) *exec.Cmd {
	return exec.Command("ssh", append([]string{"-F", l.ConfigFile, "-o", "BatchMode=yes"}, args...)...)
}

func (l *Lab) stop() {
	for _, h := range l.Hosts {
		h.Stop()
	}
	for _, h := range l.Hosts {
		if h.Net != nil {
			if err := h.Net.Close(); err != nil {
				l.t.Errorf("sshlab: %s: %v", h.Name, err)
			}
		}
	}
	if l.cfg.Sudoers {
		for _, h := range l.Hosts {
			os.Remove(sudoersFile(h.User))
		}
	}
	// A shell of the test's (a symlink it made) may be gone after it.
	for i, h := range l.Hosts {
		if l.shell(i) != defaultShell {
			userMu.Lock()
			setShell(h.User, defaultShell)
			userMu.Unlock()
		}
	}
	if l.t.Failed() {
		for _, h := range l.Hosts {
			if b, err := os.ReadFile(h.Log); err == nil && len(b) > 0 {
				l.t.Logf("sshlab: %s sshd log:\n%s", h.Name, tail(b, 4000))
			}
		}
	}
	os.RemoveAll(l.Dir)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// writeClientFiles writes the ssh config and known_hosts, once the ports
// are settled.
func (l *Lab) writeClientFiles() error {
	var cfg, kh bytes.Buffer
	for _, h := range l.Hosts {
		fmt.Fprintf(&cfg, "Host %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n\n",
			h.Name, h.Addr, h.Port, h.User, l.ClientKey, l.KnownHosts)
		fmt.Fprintf(&kh, "%s %s\n", knownHost(h.Addr, h.Port), h.HostKeyPub)
	}
	if err := os.WriteFile(l.ConfigFile, cfg.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(l.KnownHosts, kh.Bytes(), 0o644)
}

// knownHost is how known_hosts names addr:port: OpenSSH looks a host on
// port 22 up by its bare address, any other as [addr]:port.
func knownHost(addr string, port int) string {
	if port == 22 {
		return addr
	}
	return fmt.Sprintf("[%s]:%d", addr, port)
}
