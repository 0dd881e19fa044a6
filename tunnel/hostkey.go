package tunnel

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// UnknownHostError is a host whose key no known_hosts file holds.
type UnknownHostError struct {
	Alias          string
	Host           string // as in known_hosts: "host" or "[host]:port"
	KeyType        string
	Fingerprint    string // SHA256:…
	KnownHostsFile string // where --accept-new would add it
	// Searched are the known_hosts files that were read: none held a
	// key for Host.
	Searched []string
	// Addr and User are what ssh would be given to reach the host
	// (HostName, Port), for the command that accepts its key as ssh does.
	Addr string
	Port int
	User string
}

func (e *UnknownHostError) Error() string {
	where := "no known_hosts file exists yet"
	if len(e.Searched) > 0 {
		where = "it is in none of " + strings.Join(e.Searched, ", ")
	}
	ssh := ""
	if e.Addr != "" {
		ssh = "ssh "
		if e.Port != 0 && e.Port != 22 {
			ssh += fmt.Sprintf("-p %d ", e.Port)
		}
		if e.User != "" {
			ssh += e.User + "@"
		}
		ssh += e.Addr
		ssh = fmt.Sprintf(", or accept it once with %s, which adds it to ~/.ssh/known_hosts", ssh)
	}
	return fmt.Sprintf("tunnel: %s: host key of %s is not known (%s %s; %s); if that is the host's key (compare the fingerprint with the host's admin), run again with --accept-new to add it to %s%s",
		e.Alias, e.Host, e.KeyType, e.Fingerprint, where, e.KnownHostsFile, ssh)
}

// ChangedHostKeyError is a host that offers a key other than the one known
// for it: a reinstalled host, or someone in the middle.
type ChangedHostKeyError struct {
	Alias       string
	Host        string // as in known_hosts
	KeyType     string
	Fingerprint string // of the key offered now
	File        string // the known_hosts file holding the old key
	Line        int
}

func (e *ChangedHostKeyError) Error() string {
	return fmt.Sprintf("tunnel: %s: host key of %s has CHANGED (now %s %s); the known key is in %s line %d. "+
		"Someone may be intercepting the connection. If the host was reinstalled, remove the old key with: ssh-keygen -R '%s' -f %s",
		e.Alias, e.Host, e.KeyType, e.Fingerprint, e.File, e.Line, e.Host, e.File)
}

// RevokedHostKeyError is a host offering a key marked @revoked.
type RevokedHostKeyError struct {
	Alias, Host, Fingerprint, File string
	Line                           int
}

func (e *RevokedHostKeyError) Error() string {
	return fmt.Sprintf("tunnel: %s: host key of %s (%s) is revoked in %s line %d", e.Alias, e.Host, e.Fingerprint, e.File, e.Line)
}

// hostKeys checks a target's host key against its known_hosts files.
type hostKeys struct {
	t         *Target
	acceptNew bool
	log       *slog.Logger
	db        ssh.HostKeyCallback // nil when no file exists yet
	files     []string            // the files db reads
}

func newHostKeys(t *Target, acceptNew bool, log *slog.Logger) (*hostKeys, error) {
	var files []string
	var stamp strings.Builder
	for _, f := range t.KnownHosts {
		fi, err := os.Stat(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, &ConfigError{File: f, Err: err}
		}
		files = append(files, f)
		fmt.Fprintf(&stamp, "%q %s\n", f, statStamp(fi))
	}
	hk := &hostKeys{t: t, acceptNew: acceptNew, log: log, files: files}
	if len(files) > 0 {
		db, err := parsedKnownHosts.get(files, stamp.String())
		if err != nil {
			return nil, &ConfigError{File: files[0], Err: err}
		}
		hk.db = db
	}
	return hk, nil
}

// parsedKnownHosts shares one parse of the same known_hosts files among
// connections: a keeper dialling 1,000 hosts parsed its 1,000-line file
// 1,000 times, and kept each copy (227 MB of its heap, a third of its CPU
// in up). A file is parsed again as soon as its inode, size or
// modification time differ from the parse's, as after --accept-new adds a
// line, so a key removed from the file is no longer trusted by the next
// connection, as before.
var parsedKnownHosts = &knownHostsCache{}

type knownHostsCache struct {
	mu sync.Mutex
	// by the files' list; one entry each, the latest parse
	entries map[string]*knownHostsEntry
}

type knownHostsEntry struct {
	stamp string
	once  sync.Once
	db    ssh.HostKeyCallback
	err   error
}

func (c *knownHostsCache) get(files []string, stamp string) (ssh.HostKeyCallback, error) {
	key := strings.Join(files, "\x00")
	c.mu.Lock()
	e := c.entries[key]
	if e == nil || e.stamp != stamp {
		if c.entries == nil {
			c.entries = map[string]*knownHostsEntry{}
		}
		e = &knownHostsEntry{stamp: stamp}
		c.entries[key] = e
	}
	c.mu.Unlock()
	// Dials at once wait for one parse, not one each.
	e.once.Do(func() { e.db, e.err = knownhosts.New(files...) })
	return e.db, e.err
}

var probeKey = sync.OnceValue(func() ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return k
})

// algorithms lists the host key algorithms of the keys known for the
// host, nil if none. Without it the server may present a key of another
// type than the known one, which knownhosts reports as a mismatch.
func (hk *hostKeys) algorithms() []string {
	if hk.db == nil {
		return nil
	}
	// knownhosts has no lookup: a key no one has makes it list the known ones.
	err := hk.db(hk.t.Addr(), hk.remote(), probeKey())
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, x := range a {
			if !seen[x] {
				seen[x] = true
				algos = append(algos, x)
			}
		}
	}
	for _, w := range ke.Want {
		switch typ := w.Key.Type(); typ {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(typ)
		}
	}
	return algos
}

func (hk *hostKeys) remote() net.Addr {
	ip := net.ParseIP(hk.t.HostName)
	if ip == nil {
		ip = net.IPv4zero
	}
	return &net.TCPAddr{IP: ip, Port: hk.t.Port}
}

func (hk *hostKeys) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	var err error = &knownhosts.KeyError{}
	if hk.db != nil {
		err = hk.db(hostname, remote, key)
	}
	if err == nil {
		return nil
	}
	host := knownhosts.Normalize(hostname)
	fp := ssh.FingerprintSHA256(key)
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &ke) && len(ke.Want) == 0:
		file := hk.t.KnownHosts[0]
		if !hk.acceptNew {
			return &UnknownHostError{Alias: hk.t.Alias, Host: host, KeyType: key.Type(), Fingerprint: fp, KnownHostsFile: file,
				Searched: hk.files, Addr: hk.t.HostName, Port: hk.t.Port, User: hk.t.User}
		}
		if err := appendKnownHost(file, hostname, key); err != nil {
			return fmt.Errorf("tunnel: %s: adding host key to %s: %w", hk.t.Alias, file, err)
		}
		hk.log.Info("added host key", "alias", hk.t.Alias, "host", host, "key", key.Type()+" "+fp, "file", file)
		return nil
	case errors.As(err, &ke):
		w := ke.Want[0]
		for _, k := range ke.Want {
			if k.Key.Type() == key.Type() {
				w = k
				break
			}
		}
		return &ChangedHostKeyError{Alias: hk.t.Alias, Host: host, KeyType: key.Type(), Fingerprint: fp, File: w.Filename, Line: w.Line}
	case errors.As(err, &re):
		return &RevokedHostKeyError{Alias: hk.t.Alias, Host: host, Fingerprint: fp, File: re.Revoked.Filename, Line: re.Revoked.Line}
	}
	return fmt.Errorf("tunnel: %s: checking host key of %s: %w", hk.t.Alias, host, err)
}

var knownHostsMu sync.Mutex

func appendKnownHost(file, hostname string, key ssh.PublicKey) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	line := knownhosts.Line([]string{hostname}, key) + "\n"
	// A file whose last line lacks its newline would get the key glued to it.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, st.Size()-1); err != nil && err != io.EOF {
			f.Close()
			return err
		}
		if b[0] != '\n' {
			line = "\n" + line
		}
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
