package tunnel

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kevinburke/ssh_config"

	"ollie/internal/paths"
)

// Options says where the ssh configuration comes from and how connections
// behave. The zero value reads ~/.ssh/config and ~/.ssh/known_hosts and
// refuses unknown host keys.
type Options struct {
	// ConfigFile is the ssh config file. "" reads ~/.ssh/config, then
	// /etc/ssh/ssh_config, as ssh does; a file named here is the only one
	// read, as with ssh -F.
	ConfigFile string
	// KnownHosts are the known_hosts files. nil uses UserKnownHostsFile
	// from the config; for a host it names none for, ~/.ssh/known_hosts
	// and known_hosts2, every UserKnownHostsFile the config names for
	// other hosts, and /etc/ssh/ssh_known_hosts (defaultKnownHosts).
	KnownHosts []string
	// AcceptNew adds an unknown host's key to the first known_hosts file
	// (as StrictHostKeyChecking=accept-new does). A changed key is still
	// refused.
	AcceptNew bool
	// Log receives connection events and the causes behind errors; nil
	// discards them.
	Log *slog.Logger
	// MaxSessions bounds the session channels (Run, SFTP) open at once on
	// one connection. 0 means 8, under sshd's default MaxSessions of 10.
	MaxSessions int
	// Override, if not nil, holds settings for the alias being dialled
	// that win over its ssh config (an inventory's host vars). Its jump
	// hosts are resolved through the config alone.
	Override *Override
}

// Override is what a host's own settings say about reaching it, winning
// over the ssh config for that alias only, as an Ansible inventory's
// ansible_host, ansible_user, … win over ~/.ssh/config. A zero field
// leaves the config's value. It travels as JSON to the keeper.
type Override struct {
	// HostName is the address dialled.
	HostName string `json:"hostname,omitempty"`
	// User and Port give way only to a user@ or :port in the alias itself.
	User string `json:"user,omitempty"`
	Port int    `json:"port,omitempty"`
	// IdentityFile is a key offered before the config's IdentityFiles
	// (as ssh -i is); ~ and the config's % tokens are expanded.
	IdentityFile string `json:"identity_file,omitempty"`
	// ProxyJump replaces the config's jump hosts, first hop first: each
	// "[user@]host[:port]" or an ssh config alias. ["none"] means none.
	ProxyJump []string `json:"proxy_jump,omitempty"`
}

// check refuses values no ssh would take, so that a bad inventory var is
// named rather than dialled.
func (ov *Override) check(alias string) error {
	bad := func(field, v string) error {
		return &ConfigError{Err: fmt.Errorf("%s: override %s %q is not usable", alias, field, v)}
	}
	if ov.HostName != "" && !plainWord(ov.HostName) {
		return bad("HostName", ov.HostName)
	}
	if ov.User != "" && (!plainWord(ov.User) || strings.ContainsAny(ov.User, "@:")) {
		return bad("User", ov.User)
	}
	if ov.Port < 0 || ov.Port > 65535 {
		return bad("Port", strconv.Itoa(ov.Port))
	}
	if strings.ContainsAny(ov.IdentityFile, "\x00\n") {
		return bad("IdentityFile", ov.IdentityFile)
	}
	for _, hop := range ov.ProxyJump {
		if !plainWord(hop) {
			return bad("ProxyJump hop", hop)
		}
		if _, _, _, err := splitAlias(hop); err != nil {
			return bad("ProxyJump hop", hop)
		}
	}
	return nil
}

// plainWord is a non-empty value without spaces or control characters,
// not starting with '-' (which ssh would take for an option).
func plainWord(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

func (o Options) logger() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

func (o Options) maxSessions() int {
	if o.MaxSessions <= 0 {
		return 8
	}
	return o.MaxSessions
}

// Defaults applied where the ssh config says nothing. OpenSSH sends no
// keepalives by default; a tunnel that must notice a dead path does.
const (
	DefaultConnectTimeout = 15 * time.Second
	DefaultAliveInterval  = 15 * time.Second
	DefaultAliveCountMax  = 3
)

// Target is an alias resolved through the ssh config.
type Target struct {
	Alias    string // as given, without user@ and :port
	HostName string // the address dialled
	User     string
	Port     int
	// IdentityFiles are the keys offered after the agent's, ~ expanded.
	// Empty when the config names none: the defaults are used then.
	IdentityFiles []string
	// IdentitiesOnly limits the agent's keys to those of IdentityFiles.
	IdentitiesOnly bool
	// ProxyJump lists the jump hosts, first hop first; each is itself an
	// alias resolved through the config.
	ProxyJump      []string
	ConnectTimeout time.Duration
	// AliveInterval is how often keepalive@openssh.com is sent; 0 sends
	// none. After AliveCountMax unanswered ones the connection is closed.
	AliveInterval time.Duration
	AliveCountMax int
	// KnownHosts are the known_hosts files the host key is checked
	// against; an accepted new key goes to the first.
	KnownHosts []string
}

// Addr is the host:port dialled.
func (t *Target) Addr() string {
	return net.JoinHostPort(t.HostName, strconv.Itoa(t.Port))
}

// String names the target as users typed it, with the address behind it.
func (t *Target) String() string {
	return fmt.Sprintf("%s@%s (%s)", t.User, t.Alias, t.Addr())
}

// ConfigError is an ssh config that cannot be read or holds a bad value.
// Retrying does not help.
type ConfigError struct {
	File string // "" when the problem is in the alias itself
	Err  error
}

func (e *ConfigError) Error() string {
	if e.File == "" {
		return "tunnel: " + e.Err.Error()
	}
	return fmt.Sprintf("tunnel: ssh config %s: %v", e.File, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

type configFile struct {
	name string
	cfg  *ssh_config.Config
}

func loadConfigs(o Options) ([]configFile, error) {
	if o.ConfigFile != "" {
		c, err := parseConfig(o.ConfigFile)
		if err != nil {
			return nil, &ConfigError{File: o.ConfigFile, Err: err}
		}
		return []configFile{{o.ConfigFile, c}}, nil
	}
	var files []configFile
	for _, name := range []string{filepath.Join(homeDir(), ".ssh", "config"), "/etc/ssh/ssh_config"} {
		c, err := parseConfig(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, &ConfigError{File: name, Err: err}
		}
		files = append(files, configFile{name, c})
	}
	return files, nil
}

// parsed keeps each config file parsed, by its content: the keeper
// resolves every host it connects to, and parsing a config of n Host
// blocks for each of n hosts is n² work (20 ms a host at 200 blocks;
// half of the keeper's CPU in an up of 200 hosts). While the file's
// inode, size and modification time stay those of the parse it is not
// even read again: reading, lowercasing and hashing a 200 KB config for
// each of 1,000 hosts was a fifth of the keeper's CPU in their up.
var parsed struct {
	sync.Mutex
	m map[string]parsedConfig
}

type parsedConfig struct {
	sum   [sha256.Size]byte
	stamp string // the file's inode, size and mtime when sum was taken
	cfg   *ssh_config.Config
}

// statStamp is what tells a file changed without reading it: its inode,
// size and modification time (the ssh config's and known_hosts' caches).
func statStamp(fi os.FileInfo) string {
	return fmt.Sprint(fileID(fi), " ", fi.Size(), " ", fi.ModTime().UnixNano())
}

// fileID is a file's inode, 0 where the system gives none.
func fileID(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

func parseConfig(name string) (*ssh_config.Config, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	stamp := statStamp(fi)
	parsed.Lock()
	p, ok := parsed.m[name]
	parsed.Unlock()
	if ok && p.stamp == stamp {
		return p.cfg, nil // lookups only read it
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	// A file that includes others may change with them: parsed anew.
	if bytes.Contains(bytes.ToLower(b), []byte("include")) {
		return ssh_config.DecodeBytes(b)
	}
	sum := sha256.Sum256(b)
	if ok && p.sum == sum {
		parsed.Lock()
		parsed.m[name] = parsedConfig{sum, stamp, p.cfg}
		parsed.Unlock()
		return p.cfg, nil
	}
	cfg, err := ssh_config.DecodeBytes(b)
	if err != nil {
		return nil, err
	}
	parsed.Lock()
	if parsed.m == nil {
		parsed.m = map[string]parsedConfig{}
	}
	parsed.m[name] = parsedConfig{sum, stamp, cfg}
	parsed.Unlock()
	return cfg, nil
}

// lookup answers for one alias across config files: the first value
// found wins, as in ssh.
type lookup struct {
	alias string
	files []configFile
}

func (l lookup) get(key string) (val, file string, err error) {
	for _, f := range l.files {
		v, err := f.cfg.Get(l.alias, key)
		if err != nil {
			return "", f.name, &ConfigError{File: f.name, Err: err}
		}
		if v != "" {
			return v, f.name, nil
		}
	}
	return "", "", nil
}

// all gathers every value of a key that accumulates (IdentityFile).
func (l lookup) all(key string) ([]string, error) {
	var out []string
	for _, f := range l.files {
		v, err := f.cfg.GetAll(l.alias, key)
		if err != nil {
			return nil, &ConfigError{File: f.name, Err: err}
		}
		out = append(out, v...)
	}
	return out, nil
}

func (l lookup) int(key string) (int, bool, error) {
	v, file, err := l.get(key)
	if err != nil || v == "" {
		return 0, false, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false, &ConfigError{File: file, Err: fmt.Errorf("Host %s: %s %q is not a number", l.alias, key, v)}
	}
	return n, true, nil
}

// splitAlias takes "user@host:port" apart. A bracketed IPv6 address keeps
// its port; a bare one has none.
func splitAlias(s string) (userName, host string, port int, err error) {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		userName, s = s[:i], s[i+1:]
	}
	host = s
	if h, p, e := net.SplitHostPort(s); e == nil {
		n, e := strconv.Atoi(p)
		if e != nil || n <= 0 || n > 65535 {
			return "", "", 0, fmt.Errorf("%q: bad port %q", s, p)
		}
		host, port = h, n
	}
	if host == "" {
		return "", "", 0, fmt.Errorf("%q: no host", s)
	}
	return userName, host, port, nil
}

// Resolve looks an alias up in the ssh config. The alias is a config Host
// alias or an address, optionally as user@host:port; an explicit user or
// port wins over o.Override's, which wins over the config's.
func Resolve(alias string, o Options) (*Target, error) {
	userName, host, port, err := splitAlias(alias)
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	ov := o.Override
	if ov == nil {
		ov = &Override{}
	} else if err := ov.check(host); err != nil {
		return nil, err
	}
	if userName == "" {
		userName = ov.User
	}
	if port == 0 {
		port = ov.Port
	}
	files, err := loadConfigs(o)
	if err != nil {
		return nil, err
	}
	l := lookup{alias: host, files: files}
	t := &Target{Alias: host, HostName: host, User: userName, Port: port}

	if ov.HostName != "" {
		t.HostName = ov.HostName
	} else if v, _, err := l.get("HostName"); err != nil {
		return nil, err
	} else if v != "" {
		t.HostName = strings.ReplaceAll(v, "%h", host)
	}
	if t.User == "" {
		v, _, err := l.get("User")
		if err != nil {
			return nil, err
		}
		t.User = v
	}
	if t.User == "" {
		t.User = localUser()
	}
	if t.Port == 0 {
		n, ok, err := l.int("Port")
		if err != nil {
			return nil, err
		}
		t.Port = 22
		if ok && n > 0 {
			t.Port = n
		}
	}
	ex := expander{home: homeDir(), local: localUser(), remote: t.User, host: t.HostName, alias: host, port: t.Port}
	if ov.IdentityFile != "" {
		t.IdentityFiles = append(t.IdentityFiles, ex.expand(ov.IdentityFile))
	}
	ids, err := l.all("IdentityFile")
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !strings.EqualFold(id, "none") {
			t.IdentityFiles = append(t.IdentityFiles, ex.expand(id))
		}
	}
	if v, _, err := l.get("IdentitiesOnly"); err != nil {
		return nil, err
	} else {
		t.IdentitiesOnly = strings.EqualFold(v, "yes")
	}
	if len(ov.ProxyJump) > 0 {
		if len(ov.ProxyJump) > 1 || !strings.EqualFold(ov.ProxyJump[0], "none") {
			t.ProxyJump = append([]string(nil), ov.ProxyJump...)
		}
	} else if v, _, err := l.get("ProxyJump"); err != nil {
		return nil, err
	} else if v != "" && !strings.EqualFold(v, "none") {
		for _, hop := range strings.Split(v, ",") {
			hop = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(hop), "ssh://"))
			if hop != "" {
				t.ProxyJump = append(t.ProxyJump, hop)
			}
		}
	}
	t.ConnectTimeout = DefaultConnectTimeout
	if n, ok, err := l.int("ConnectTimeout"); err != nil {
		return nil, err
	} else if ok && n > 0 {
		t.ConnectTimeout = time.Duration(n) * time.Second
	}
	t.AliveInterval = DefaultAliveInterval
	if n, ok, err := l.int("ServerAliveInterval"); err != nil {
		return nil, err
	} else if ok {
		t.AliveInterval = time.Duration(n) * time.Second
	}
	t.AliveCountMax = DefaultAliveCountMax
	if n, ok, err := l.int("ServerAliveCountMax"); err != nil {
		return nil, err
	} else if ok && n > 0 {
		t.AliveCountMax = n
	}
	switch {
	case len(o.KnownHosts) > 0:
		t.KnownHosts = append([]string(nil), o.KnownHosts...)
	default:
		v, _, err := l.get("UserKnownHostsFile")
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(v) {
			if !strings.EqualFold(f, "none") {
				t.KnownHosts = append(t.KnownHosts, ex.expand(f))
			}
		}
		if len(t.KnownHosts) == 0 {
			t.KnownHosts = defaultKnownHosts(files, ex)
		}
	}
	return t, nil
}

// defaultKnownHosts are the known_hosts files of a host for which the
// config names none: OpenSSH's own (~/.ssh/known_hosts first, where
// AcceptNew adds a key, then known_hosts2 and the system's), and every
// UserKnownHostsFile the config names for its other hosts. A host that
// only an inventory knows (ansible_host, ansible_port) is often one the
// person reached before under a config alias, whose key was accepted
// into that alias's file: the key known for its address and port there
// is the key the person accepted for it, so it is checked, not trusted
// more.
func defaultKnownHosts(files []configFile, ex expander) []string {
	home := filepath.Join(homeDir(), ".ssh")
	out := []string{filepath.Join(home, "known_hosts"), filepath.Join(home, "known_hosts2")}
	seen := map[string]bool{out[0]: true, out[1]: true}
	add := func(f string) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, f := range files {
		for _, h := range f.cfg.Hosts {
			for _, n := range h.Nodes {
				kv, ok := n.(*ssh_config.KV)
				if !ok || !strings.EqualFold(kv.Key, "UserKnownHostsFile") {
					continue
				}
				for _, v := range strings.Fields(kv.Value) {
					if !strings.EqualFold(v, "none") {
						add(ex.expand(v))
					}
				}
			}
		}
	}
	add("/etc/ssh/ssh_known_hosts")
	add("/etc/ssh/ssh_known_hosts2")
	return out
}

// expander does ssh_config's ~ and % tokens for file names.
type expander struct {
	home, local, remote, host, alias string
	port                             int
}

func (e expander) expand(s string) string {
	if s == "~" {
		s = e.home
	} else if strings.HasPrefix(s, "~/") {
		s = filepath.Join(e.home, s[2:])
	}
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'd':
			b.WriteString(e.home)
		case 'u':
			b.WriteString(e.local)
		case 'r':
			b.WriteString(e.remote)
		case 'h':
			b.WriteString(e.host)
		case 'n':
			b.WriteString(e.alias)
		case 'p':
			b.WriteString(strconv.Itoa(e.port))
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func homeDir() string {
	if h, err := paths.Home(); err == nil {
		return h
	}
	return "/"
}

func localUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}
