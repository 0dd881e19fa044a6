package appliance

// authorized_keys: OpenSSH's format, parsed by x/crypto/ssh, and the
// options this server honours.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"strconv"
	"strings"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
)

// ReadOnlyOption is the authorized_keys option of ours that gives a key
// the namespace's read-only rights.
const ReadOnlyOption = "ollie-read-only"

// A grant is what one authorized_keys line allows its key.
type grant struct {
	from     []string // from= patterns; nil: any address
	command  string   // command=: the forced command; "" for none
	noPTY    bool
	noFwd    bool
	readOnly bool
}

// maxAuthorizedKeys bounds the file read at each login.
const maxAuthorizedKeys = 1 << 20

// lookup finds key in the authorized_keys file and returns its grant.
// Bad lines are skipped, as sshd skips them.
func lookup(file string, key ssh.PublicKey) (grant, bool, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return grant{}, false, nil
	}
	if err != nil {
		return grant{}, false, err
	}
	defer f.Close()
	b := make([]byte, maxAuthorizedKeys+1)
	n, _ := readFull(f, b)
	if n > maxAuthorizedKeys {
		return grant{}, false, fmt.Errorf("%s is over %d bytes", file, maxAuthorizedKeys)
	}
	want := key.Marshal()
	for _, line := range bytes.Split(b[:n], []byte("\n")) {
		pub, _, opts, _, err := ssh.ParseAuthorizedKey(line)
		if err != nil || !bytes.Equal(pub.Marshal(), want) {
			continue
		}
		g, err := parseOptions(opts)
		if err != nil {
			return grant{}, false, fmt.Errorf("%s: %w", file, err)
		}
		return g, true, nil
	}
	return grant{}, false, nil
}

func readFull(f *os.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// parseOptions reads the options of one line. An option this server
// does not know is an error: the key is refused rather than given rights
// its author thought restricted.
func parseOptions(opts []string) (grant, error) {
	var g grant
	pty, fwd := false, false
	for _, o := range opts {
		name, val, hasVal := strings.Cut(o, "=")
		name = strings.ToLower(name)
		if hasVal {
			uq, err := strconv.Unquote(val)
			if err != nil {
				return g, fmt.Errorf("option %s: bad quoting", name)
			}
			val = uq
		}
		switch name {
		case "from":
			g.from = strings.Split(val, ",")
		case "command":
			g.command = val
		case "no-pty":
			g.noPTY = true
		case "restrict":
			g.noPTY, g.noFwd = true, true
		case "pty":
			pty = true
		case "port-forwarding":
			fwd = true
		case "no-port-forwarding":
			g.noFwd = true
		case ReadOnlyOption:
			g.readOnly = true
		case "no-agent-forwarding", "no-x11-forwarding", "no-user-rc":
			// Refused here anyway.
		default:
			return g, fmt.Errorf("option %q is not one ollie's listener knows", name)
		}
	}
	if pty {
		g.noPTY = false
	}
	if fwd {
		g.noFwd = false
	}
	if g.readOnly {
		g.noFwd = true // a forward would reach the socket as the daemon's own user
	}
	return g, nil
}

// fromAllows reports whether addr matches the from= patterns as sshd
// matches them: a negated match refuses, else any match allows. Patterns
// are addresses with * and ?, or CIDRs; a host name never matches.
func fromAllows(patterns []string, addr net.Addr) bool {
	if patterns == nil {
		return true
	}
	ip := hostIP(addr)
	if ip == nil {
		return false
	}
	allowed := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		if !matchAddr(p, ip) {
			continue
		}
		if neg {
			return false
		}
		allowed = true
	}
	return allowed
}

func hostIP(addr net.Addr) net.IP {
	if a, ok := addr.(*net.TCPAddr); ok {
		if v4 := a.IP.To4(); v4 != nil {
			return v4
		}
		return a.IP
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return nil
	}
	return net.ParseIP(host)
}

func matchAddr(pattern string, ip net.IP) bool {
	if strings.Contains(pattern, "/") {
		_, n, err := net.ParseCIDR(pattern)
		return err == nil && n.Contains(ip)
	}
	ok, err := path.Match(pattern, ip.String())
	return err == nil && ok
}

// A login is what the connection proved: its key, the key's grant and the
// address it came from. It lives in the connection's context.
type login struct {
	key         ssh.PublicKey
	fingerprint string
	grant       grant
}

type loginKey struct{}

func loginOf(ctx gliderssh.Context) *login {
	l, _ := ctx.Value(loginKey{}).(*login)
	return l
}

// authorize is the public-key check: the key is in AuthorizedKeys and
// the address matches its from=.
func (s *Server) authorize(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
	fp := ssh.FingerprintSHA256(key)
	g, ok, err := lookup(s.AuthorizedKeys, key)
	if err != nil {
		s.Log.Warn("sshd: authorized_keys", "err", err)
	}
	if !ok {
		s.refuse(ctx, "key not in authorized_keys", fp)
		return false
	}
	if !fromAllows(g.from, ctx.RemoteAddr()) {
		s.refuse(ctx, "from= does not match", fp)
		return false
	}
	// The last key accepted is the one the connection signs with: x/crypto
	// asks once per key, and gliderlabs keeps the last accepted one too.
	ctx.SetValue(loginKey{}, &login{key: key, fingerprint: fp, grant: g})
	return true
}
