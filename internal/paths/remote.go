package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// RemoteDir is the desktop directory where ollie-remote keeps, for the
// default ssh configuration, its keeper's control socket and one forwarded
// namespace socket per host (the keepers of other configurations use
// siblings: KeeperDir), and the terminal broker's socket:
// $XDG_RUNTIME_DIR/ollie-remote, else /tmp/ollie-remote.UID. It is short
// on purpose: a socket path has at most 107 bytes.
func RemoteDir() string {
	if d := os.Getenv("OLLIE_REMOTE_DIR"); d != "" {
		return d
	}
	if d := XDG("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ollie-remote")
	}
	return fmt.Sprintf("/tmp/ollie-remote.%d", os.Getuid())
}

var plainHost = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@:-]*$`)

// RemoteSocket is the local socket that reaches host's namespace while
// ollie-remote up holds it. A name that is not plain, or that would make
// the path too long, is replaced by a hash of it, so that two hosts never
// share a socket.
func RemoteSocket(host string) string { return RemoteSocketIn(RemoteDir(), host) }

// SSHConfig names the ssh configuration a keeper holds its hosts with:
// the ssh config file (-F) and the known_hosts files, as absolute paths.
// The zero value is the default: ~/.ssh/config (and /etc/ssh/ssh_config),
// and the known_hosts files they name. A host's name means what its
// configuration says, so one keeper holds hosts of one configuration.
type SSHConfig struct {
	Config string   `json:"config,omitempty"`
	Known  []string `json:"known,omitempty"`
}

// NewSSHConfig makes config and known absolute ("" and none stay the
// default), so that a configuration is named the same from any directory.
func NewSSHConfig(config string, known []string) SSHConfig {
	var s SSHConfig
	if config != "" {
		s.Config = absPath(config)
	}
	for _, k := range known {
		if k != "" {
			s.Known = append(s.Known, absPath(k))
		}
	}
	return s
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// IsDefault reports whether s is the default configuration.
func (s SSHConfig) IsDefault() bool { return s.Config == "" && len(s.Known) == 0 }

// Equal reports whether s and o are the same configuration.
func (s SSHConfig) Equal(o SSHConfig) bool {
	return s.Config == o.Config && slices.Equal(s.Known, o.Known)
}

// String names the configuration as its flags would: "-F FILE
// -known-hosts FILE", or "the default ssh configuration".
func (s SSHConfig) String() string {
	if s.IsDefault() {
		return "the default ssh configuration"
	}
	return strings.Join(s.Flags(), " ")
}

// Flags are ollie-remote's flags that name s: none for the default.
func (s SSHConfig) Flags() []string {
	var f []string
	if s.Config != "" {
		f = append(f, "-F", s.Config)
	}
	for _, k := range s.Known {
		f = append(f, "-known-hosts", k)
	}
	return f
}

// KeeperDir is the directory of the keeper that holds hosts with the ssh
// configuration s: its control socket, log and a socket per host. It is
// RemoteDir for the default configuration, and whenever OLLIE_REMOTE_DIR
// is set (the one keeper there refuses another configuration); for any
// other, a sibling of RemoteDir named by a hash of s, so that a user's
// keepers of different configurations, each with its own hosts, never
// share a socket.
func KeeperDir(s SSHConfig) string {
	if os.Getenv("OLLIE_REMOTE_DIR") != "" || s.IsDefault() {
		return RemoteDir()
	}
	sum := sha256.Sum256([]byte(s.Config + "\x00" + strings.Join(s.Known, "\x00")))
	return RemoteDir() + "-" + hex.EncodeToString(sum[:6])
}

// KeeperDirs lists the directories a keeper of this user may use: RemoteDir
// and, unless OLLIE_REMOTE_DIR names the one, those of its hashed siblings
// that are this user's private directories (in /tmp anyone may make one
// of that name, with a socket in it posing as a host).
func KeeperDirs() []string {
	dirs := []string{RemoteDir()}
	if os.Getenv("OLLIE_REMOTE_DIR") == "" {
		more, _ := filepath.Glob(RemoteDir() + "-" + strings.Repeat("[0-9a-f]", 12))
		for _, d := range more {
			fi, err := os.Lstat(d)
			if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
				continue
			}
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// KeeperSSHFile, in a keeper's directory, names the ssh configuration the
// keeper holds its hosts with (an SSHConfig as JSON), for status and
// ollie -H to name it.
const KeeperSSHFile = "ssh.json"

// KeeperSSH reads the ssh configuration of the keeper whose directory is
// dir.
func KeeperSSH(dir string) (SSHConfig, error) {
	var s SSHConfig
	b, err := os.ReadFile(filepath.Join(dir, KeeperSSHFile))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	return s, err
}

// RemoteSocketIn is RemoteSocket in a keeper's directory.
func RemoteSocketIn(dir, host string) string {
	if p := filepath.Join(dir, host+".ns"); plainHost.MatchString(host) && len(p) <= 100 {
		return p
	}
	sum := sha256.Sum256([]byte(host))
	return filepath.Join(dir, "h-"+hex.EncodeToString(sum[:8])+".ns")
}

// FindRemoteSocket is the socket of host among the keepers' directories
// (KeeperDirs): the one that exists, or RemoteSocket(host) when none
// does. A host named NAME~TAG (QualifiedHost) is NAME in the keeper whose
// tag is TAG. When keepers of different ssh configurations hold a host of
// that name, it lists their sockets, and ok is false.
func FindRemoteSocket(host string) (sock string, all []string, ok bool) {
	dirs := KeeperDirs()
	isSocket := func(p string) bool {
		fi, err := os.Lstat(p)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}
	for _, dir := range dirs {
		if p := RemoteSocketIn(dir, host); isSocket(p) {
			all = append(all, p)
		}
	}
	if name, tag, qualified := SplitQualified(host); qualified && len(all) == 0 {
		for dir, t := range KeeperTags(dirs) {
			if p := RemoteSocketIn(dir, name); t == tag && isSocket(p) {
				return p, []string{p}, true
			}
		}
	}
	switch len(all) {
	case 0:
		return RemoteSocket(host), nil, true
	case 1:
		return all[0], all, true
	}
	return "", all, false
}

// FleetHost is the name ollie -H takes for the desktop's own namespace
// (tunnel/desk), whose socket each keeper serves beside its hosts' ones.
// Every keeper's shows the hosts of all of this user's keepers, so any
// one that answers will do.
const FleetHost = "fleet"

// A host held under one name by keepers of two ssh configurations may be
// two machines: wherever both are shown at once (the fleet namespace, an
// approval), each is named NAME~TAG, TAG naming its keeper (KeeperTags).
// No ssh alias, address or user@host:port holds a '~'.
const qualifier = "~"

// QualifiedHost is host as the keeper tagged tag holds it, in a place that
// shows the hosts of every keeper: host~tag.
func QualifiedHost(host, tag string) string { return host + qualifier + tag }

// SplitQualified takes NAME~TAG apart; ok is false for a name without a
// tag.
func SplitQualified(name string) (host, tag string, ok bool) {
	i := strings.LastIndex(name, qualifier)
	if i <= 0 || i == len(name)-1 {
		return name, "", false
	}
	return name[:i], name[i+1:], true
}

var unplainTag = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// KeeperTags names each keeper directory of dirs for people, as
// QualifiedHost shows it: "default" for the default ssh configuration;
// else the base name of its -F file (of its first -known-hosts file when
// it has none), made plain; two keepers that would share a tag are told
// apart by their directory's hash, as is one whose configuration is not
// recorded.
func KeeperTags(dirs []string) map[string]string {
	tags := map[string]string{}
	count := map[string]int{}
	for _, dir := range dirs {
		tag := strings.TrimPrefix(filepath.Base(dir), filepath.Base(RemoteDir())+"-")
		if s, err := KeeperSSH(dir); err == nil {
			switch {
			case s.IsDefault():
				tag = "default"
			case s.Config != "":
				tag = filepath.Base(s.Config)
			default:
				tag = filepath.Base(s.Known[0])
			}
			tag = strings.Trim(unplainTag.ReplaceAllString(tag, "_"), "_")
			if tag == "" {
				tag = "config"
			}
		}
		tags[dir] = tag
		count[tag]++
	}
	for dir, tag := range tags {
		if count[tag] > 1 && dir != RemoteDir() {
			tags[dir] = tag + "-" + strings.TrimPrefix(filepath.Base(dir), filepath.Base(RemoteDir())+"-")
		}
	}
	return tags
}
