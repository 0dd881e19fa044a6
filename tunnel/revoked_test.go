package tunnel_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh/knownhosts"

	"ollie/internal/sshlab"
	"ollie/tunnel"
)

// TestRevokedHostKey is a host whose key is marked @revoked in a
// known_hosts file: it is refused, saying where the revocation is, even
// when the key is also listed as the host's, when the revocation is in
// another of the files, and with AcceptNew; and nothing is written.
func TestRevokedHostKey(t *testing.T) {
	l := sshlab.Start(t, sshlab.Config{})
	h := l.Host(0)
	addr := net.JoinHostPort(h.Addr, strconv.Itoa(h.Port))
	hostKey := strings.TrimSpace(h.HostKeyPub)
	known := knownhosts.Normalize(addr) + " " + hostKey + "\n"
	revoked := "@revoked * " + hostKey + "\n"
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	cases := []struct {
		name  string
		files map[string]string // known_hosts files, in order
		line  int               // of the @revoked line, in the last file
	}{
		{"revoked only", map[string]string{"a": "# revoked\n" + revoked}, 2},
		{"revoked and known", map[string]string{"a": known + revoked}, 2},
		{"revoked in the second file", map[string]string{"a": known, "b": "\n\n" + revoked}, 3},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var files []string
			for _, name := range []string{"a", "b"} {
				if content, ok := c.files[name]; ok {
					files = append(files, write(strconv.Itoa(i)+name, content))
				}
			}
			last := files[len(files)-1]
			before, _ := os.ReadFile(files[0])
			for _, how := range []string{"Options.KnownHosts", "UserKnownHostsFile"} {
				o := opts(t, l)
				o.AcceptNew = true // a revoked key is refused all the same
				if how == "Options.KnownHosts" {
					o.KnownHosts = files
				} else {
					o.ConfigFile = writeConfig(t, l, "Host *\n  UserKnownHostsFile "+strings.Join(files, " "))
				}
				cl, err := tunnel.Dial(context.Background(), h.Name, o)
				if err == nil {
					cl.Close()
					t.Fatalf("%s: a host whose key is @revoked was accepted", how)
				}
				var re *tunnel.RevokedHostKeyError
				if !errors.As(err, &re) {
					t.Fatalf("%s: Dial: %v, want a RevokedHostKeyError", how, err)
				}
				t.Log(err)
				if re.File != last || re.Line != c.line {
					t.Errorf("%s: error names %s line %d, want %s line %d", how, re.File, re.Line, last, c.line)
				}
				for _, want := range []string{"revoked", last, "line " + strconv.Itoa(c.line), fingerprint(t, h.HostKeyPub)} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: message lacks %q", how, want)
					}
				}
				if !tunnel.Permanent(err) {
					t.Errorf("%s: a revoked key is not Permanent: reconnecting would try it again", how)
				}
			}
			if after, _ := os.ReadFile(files[0]); string(after) != string(before) {
				t.Errorf("known_hosts was changed: %q", after)
			}
		})
	}
}
