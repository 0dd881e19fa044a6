package simhost

// The commands ollie-remote runs on a host, answered without a shell.
// Every one comes as deploy.Sh makes it (a script and its arguments as
// printf escapes, handed to /bin/sh), and is known by the line that only
// it has; the answer is what the script prints on a host with
// Options.Installed deployed, its socket in Home and no systemd.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"

	"ollie/internal/sshsrv"
	"ollie/ns/words"
	"ollie/tunnel/deploy"
)

// maxCommand bounds the command line a client may send: ollie-remote's
// longest, the deploy probe with its versions, is under 4 KiB.
const maxCommand = 64 << 10

// A command is one script ollie-remote runs, known by a line of it.
type command struct {
	name string
	is   func(script string) bool
	run  func(h *Host, args []string) (stdout, stderr string, status int)
}

// lastLine is whether the script's last line is line.
func lastLine(line string) func(string) bool {
	return func(s string) bool { return strings.HasSuffix(strings.TrimRight(s, "\n"), "\n"+line) || s == line }
}

// commands are tried in order: the keeper's revive script ends with the
// start script, so it comes first.
var commands = []command{
	{"revive (the keeper's look at a daemon that does not answer)", func(s string) bool { return strings.HasPrefix(s, `sock="$1"`+"\n") }, (*Host).revive},
	{"olliesrv start", lastLine(`exec "$r/current/olliesrv" start`), (*Host).startCommand},
	{"olliesrv stop", lastLine(`r="$HOME/.local/share/ollie"; exec "$r/current/olliesrv" stop`), (*Host).stopCommand},
	{"the deploy probe", func(s string) bool { return strings.Contains(s, `"$r/current/olliesrv" install manifest "$r" "$@"`) }, (*Host).probe},
	{"the keeper's look for systemd", func(s string) bool { return strings.Contains(s, `"/proc/$p/cgroup"`) }, (*Host).supervisor},
}

// session serves one session channel: one exec, answered at once.
func (h *Host) session(_ *gliderssh.Server, _ *ssh.ServerConn, nc ssh.NewChannel, _ gliderssh.Context) {
	if !h.track() {
		nc.Reject(ssh.ResourceShortage, "the host is shutting down")
		return
	}
	defer h.channels.Done()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	ran := false
	for req := range reqs {
		switch req.Type {
		case "env":
			// As sshd's AcceptEnv in most distributions: the locale only.
			var kv struct{ Name, Value string }
			ok := ssh.Unmarshal(req.Payload, &kv) == nil && (kv.Name == "LANG" || strings.HasPrefix(kv.Name, "LC_"))
			req.Reply(ok, nil)
		case "exec":
			var cmd struct{ Command string }
			if ran || ssh.Unmarshal(req.Payload, &cmd) != nil || len(cmd.Command) > maxCommand {
				req.Reply(false, nil)
				continue
			}
			ran = true
			req.Reply(true, nil)
			stdout, stderr, status := h.exec(cmd.Command)
			ch.Write([]byte(stdout))
			ch.Stderr().Write([]byte(stderr))
			sshsrv.Exit(ch, status, "")
		default:
			// shell, pty-req, the sftp subsystem: a simulated host has
			// no shell and no files to serve.
			req.Reply(false, nil)
		}
	}
}

// exec answers one command line.
func (h *Host) exec(line string) (stdout, stderr string, status int) {
	script, args, err := unwrap(line)
	if err != nil {
		return "", fmt.Sprintf("simhost: %s runs no shell: %v\n", h.Name, err), 127
	}
	for _, c := range commands {
		if c.is(script) {
			return c.run(h, args)
		}
	}
	first, _, _ := strings.Cut(script, "\n")
	return "", fmt.Sprintf("simhost: %s runs no shell, and knows no script beginning %q\n", h.Name, first), 127
}

// The wrapper deploy.Sh puts around a script.
const (
	shPrefix = `exec /bin/sh -c 'eval "$(printf "`
	shSuffix = `")"'`
)

// unwrap takes deploy.Sh's wrapper off line: the script, and the
// arguments its first line (set -- ...) gives it.
func unwrap(line string) (script string, args []string, err error) {
	esc, ok := strings.CutPrefix(line, shPrefix)
	if esc, ok = strings.CutSuffix(esc, shSuffix); !ok {
		return "", nil, errors.New("not a script deploy.Sh wrapped")
	}
	text, err := unprintf(esc)
	if err != nil {
		return "", nil, err
	}
	set, script, _ := strings.Cut(text, "\n")
	rest, ok := strings.CutPrefix(set, "set --")
	if !ok {
		return "", nil, errors.New("the script does not begin with set --")
	}
	if args, err = words.Split(rest); err != nil {
		return "", nil, fmt.Errorf("its arguments: %w", err)
	}
	return script, args, nil
}

// unprintf undoes deploy.Sh's printf escapes: "%%" and "\NNN" (octal).
func unprintf(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			if i+1 >= len(s) || s[i+1] != '%' {
				return "", errors.New("a lone % in the printf format")
			}
			b.WriteByte('%')
			i++
		case '\\':
			if i+4 > len(s) {
				return "", errors.New("a short escape in the printf format")
			}
			n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
			if err != nil {
				return "", fmt.Errorf("a bad escape %q in the printf format", s[i:i+4])
			}
			b.WriteByte(byte(n))
			i += 3
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// notDeployed is what the start script says where nothing is deployed.
const notDeployed = "ollie is not deployed on this host: run ollie-remote deploy first\n"

// startCommand is olliesrv start: the namespace served from now on.
func (h *Host) startCommand(args []string) (string, string, int) {
	if h.f.version == "" {
		return "", notDeployed, 3
	}
	verb := "running"
	if h.startDaemon() {
		verb = "started"
	}
	return fmt.Sprintf("%s %s pid %d\n", verb, h.Socket(), os.Getpid()), "", 0
}

// stopCommand is olliesrv stop.
func (h *Host) stopCommand(args []string) (string, string, int) {
	if h.f.version == "" {
		return "", "/bin/sh: 1: exec: " + h.Home + "/.local/share/ollie/current/olliesrv: not found\n", 127
	}
	if !h.stopDaemon() {
		return "not running\n", "", 0
	}
	return fmt.Sprintf("stopped pid %d\n", os.Getpid()), "", 0
}

// revive is the keeper's look at a daemon that did not answer on args[0]:
// "stopped" when none runs (the socket is gone), as after olliesrv stop;
// a daemon that runs is one that was slow.
func (h *Host) revive(args []string) (string, string, int) {
	if len(args) != 1 || args[0] != h.Socket() || !h.Running() {
		return "stopped\n", "", 0
	}
	return fmt.Sprintf("pid %d\nrunning %s pid %d\n", os.Getpid(), h.Socket(), os.Getpid()), "", 0
}

// supervisor is the keeper's look for the systemd unit of the daemon:
// none starts it here.
func (h *Host) supervisor(args []string) (string, string, int) { return "", "", 0 }

// probe is the deploy probe: the platform, home, where the login shell
// finds ollie, the decompressors, what making the upload directories
// said, and install manifest's JSON for the
// versions asked about (args).
func (h *Host) probe(args []string) (string, string, int) {
	root := path.Join(h.Home, ".local/share/ollie")
	m := deploy.Manifest{Root: root, Versions: map[string]string{}, Data: map[string]deploy.File{}, Shell: "/bin/sh"}
	found := "none"
	if b := h.f.opts.Installed; b != nil {
		bin := b.Bins[platform()]
		m.Current, m.Installed, m.Decoders = h.f.version, true, deploy.Decoders
		m.Versions[h.f.version] = bin.SHA256
		for _, v := range args {
			if _, ok := m.Versions[v]; !ok {
				m.Versions[v] = ""
			}
		}
		for p, f := range b.Data {
			m.Data[p] = deploy.File{SHA256: f.SHA256, Mode: f.Mode}
		}
		if h.Running() {
			m.Daemon = path.Join(root, h.f.version, "olliesrv")
		}
		found = "ours " + path.Join(h.Home, ".local/bin/ollie")
	}
	js, err := json.Marshal(&m)
	if err != nil {
		return "", err.Error() + "\n", 1
	}
	// The empty line: what making the upload directories said (nothing).
	return fmt.Sprintf("%s\n%s\n%s\nzstd gzip \n\n%s\n", uname(), h.Home, found, js), "", 0
}

// platform is the hosts' OS and architecture, this machine's.
func platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// uname is what uname -sm says on this machine, as deploy.Platform reads it.
func uname() string {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "arm": "armv7l"}[runtime.GOARCH]
	if arch == "" {
		arch = runtime.GOARCH
	}
	return strings.ToUpper(runtime.GOOS[:1]) + runtime.GOOS[1:] + " " + arch
}
