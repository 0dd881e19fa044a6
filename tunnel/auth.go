package tunnel

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// AuthError is a server that accepted none of the keys offered.
type AuthError struct {
	User, Alias, Addr string
	Tried             []string // the keys offered: "agent: ssh-ed25519 SHA256:…", "FILE (ssh-ed25519 SHA256:…)"
	Skipped           []string // keys that could not be offered, and why
	Allowed           []string // the methods the server allows
}

func (e *AuthError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tunnel: %s@%s (%s): authentication failed", e.User, e.Alias, e.Addr)
	if !slices.Contains(e.Allowed, "publickey") && len(e.Allowed) > 0 {
		fmt.Fprintf(&b, "; the server allows only %s, and only keys are used here", strings.Join(e.Allowed, ", "))
	} else if len(e.Tried) == 0 {
		b.WriteString("; no key to offer (no ssh-agent with keys, no usable identity file)")
	} else {
		fmt.Fprintf(&b, "; tried %s", strings.Join(e.Tried, ", "))
	}
	if len(e.Skipped) > 0 {
		fmt.Fprintf(&b, "; skipped %s", strings.Join(e.Skipped, ", "))
	}
	return b.String()
}

// keyring is what a dial offers: the agent's keys, then the identity
// files'. It holds the agent's connection until close.
type keyring struct {
	signers []ssh.Signer
	tried   []string
	skipped []string
	agent   net.Conn
}

func (k *keyring) close() {
	if k.agent != nil {
		k.agent.Close()
	}
}

func defaultIdentityFiles() []string {
	d := filepath.Join(homeDir(), ".ssh")
	return []string{filepath.Join(d, "id_ed25519"), filepath.Join(d, "id_ecdsa"), filepath.Join(d, "id_rsa")}
}

func loadKeyring(t *Target, log *slog.Logger) *keyring {
	k := &keyring{}
	files := t.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		files = defaultIdentityFiles()
	}
	// Identity files first into a list, so that IdentitiesOnly can match the
	// agent's keys against them (a passphrase-protected file still has its
	// .pub beside it).
	type idFile struct {
		name   string
		signer ssh.Signer
		pub    ssh.PublicKey
	}
	var ids []idFile
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if explicit || !errors.Is(err, os.ErrNotExist) {
				log.Debug("identity file unreadable", "alias", t.Alias, "file", f, "err", err)
				k.skipped = append(k.skipped, f+" (unreadable)")
			}
			continue
		}
		s, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			log.Info("skipping passphrase-protected key; add it to ssh-agent to use it", "alias", t.Alias, "file", f)
			k.skipped = append(k.skipped, f+" (passphrase-protected: add it to ssh-agent)")
			pub := pm.PublicKey
			if pub == nil {
				pub = readPub(f + ".pub")
			}
			ids = append(ids, idFile{name: f, pub: pub})
		case err != nil:
			log.Info("skipping identity file", "alias", t.Alias, "file", f, "err", err)
			k.skipped = append(k.skipped, f+" (not a private key)")
		default:
			ids = append(ids, idFile{name: f, signer: s, pub: s.PublicKey()})
		}
	}
	offered := map[string]bool{}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			log.Info("ssh-agent unreachable", "sock", sock, "err", err)
			k.skipped = append(k.skipped, "ssh-agent at "+sock+" (unreachable)")
		} else {
			k.agent = conn
			signers, err := agent.NewClient(conn).Signers()
			if err != nil {
				log.Info("ssh-agent", "sock", sock, "err", err)
			}
			for _, s := range signers {
				blob := s.PublicKey().Marshal()
				if t.IdentitiesOnly && !slices.ContainsFunc(ids, func(f idFile) bool {
					return f.pub != nil && bytes.Equal(f.pub.Marshal(), blob)
				}) {
					continue
				}
				offered[string(blob)] = true
				k.signers = append(k.signers, s)
				k.tried = append(k.tried, "agent: "+describe(s.PublicKey()))
			}
		}
	}
	for _, f := range ids {
		if f.signer == nil || offered[string(f.pub.Marshal())] {
			continue
		}
		offered[string(f.pub.Marshal())] = true
		k.signers = append(k.signers, f.signer)
		k.tried = append(k.tried, f.name+" ("+describe(f.pub)+")")
	}
	return k
}

func readPub(name string) ssh.PublicKey {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil
	}
	return pub
}

func describe(k ssh.PublicKey) string {
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// authMethods offers every key in one publickey method (x/crypto tries a
// method name once, so a second publickey method would never run) and
// turns the end of the road into an AuthError naming what was tried.
func (k *keyring) configure(cfg *ssh.ClientConfig, t *Target) {
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeysCallback(func() ([]ssh.Signer, error) { return k.signers, nil })}
	cfg.AuthCallback = func(ctx *ssh.ClientAuthContext) (ssh.AuthMethod, error) {
		if slices.Contains(ctx.TriedMethods, "publickey") || !slices.Contains(ctx.AllowedMethods, "publickey") {
			return nil, &AuthError{User: t.User, Alias: t.Alias, Addr: t.Addr(), Tried: k.tried, Skipped: k.skipped, Allowed: ctx.AllowedMethods}
		}
		return nil, nil
	}
}
