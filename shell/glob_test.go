package shell

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ollie/ns"
	"ollie/ns/nsdir"
	"ollie/tunnel/mux"
)

// globFleet serves, on ollie's default socket, a fleet namespace as the
// desktop's keeper does: a local tree with host/ listing web1, web2 and
// down, and each of web1 and web2 a real ns server mounted at host/NAME by
// tunnel/mux. On web1 sessions s1 and s2 have agents a1 and a2; on web2
// session s3 has agent a9 and session s4 has none. down cannot be
// reached.
func globFleet(t *testing.T) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ollie")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("NAMESPACE", dir)
	t.Setenv("OLLIE_UNAME", "")
	quiet := slog.New(slog.DiscardHandler)

	serve := func(name string, root *ns.Node) string {
		tree, err := ns.NewTree(root, "owner", "owner")
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, name)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		srv := &ns.Server{Tree: tree, Log: quiet}
		go srv.ServeUnix(l)
		t.Cleanup(func() { srv.Shutdown(context.Background()) })
		return sock
	}
	list := func(names func(c *ns.Call) []string) *ns.Each {
		return ns.Listing(func(_ context.Context, c *ns.Call) ([]string, error) { return names(c), nil },
			func(s string) ns.Entry { return ns.Entry{Name: s, Key: s} })
	}
	hostTree := func(host string, sessions map[string][]string) *ns.Node {
		return ns.Dir("", 0555, "",
			ns.ReadFile("name", 0444, "", func(context.Context, *ns.Call) ([]byte, error) { return []byte(host + "\n"), nil }),
			ns.ReadFile("noeol", 0444, "", func(context.Context, *ns.Call) ([]byte, error) { return []byte("one\ntwo"), nil }),
			ns.Dir("session", 0555, "",
				ns.Dynamic("s", 0555, "", list(func(*ns.Call) []string {
					var ss []string
					for s := range sessions {
						ss = append(ss, s)
					}
					slices.Sort(ss)
					return ss
				}),
					ns.Dir("agent", 0555, "",
						ns.Dynamic("a", 0555, "", list(func(c *ns.Call) []string { return sessions[c.Key("s")] }),
							ns.ReadFile("state", 0444, "", func(_ context.Context, c *ns.Call) ([]byte, error) {
								return fmt.Appendf(nil, "idle %s/%s\n", c.Key("s"), c.Key("a")), nil
							}))))))
	}
	socks := map[string]string{
		"web1": serve("web1", hostTree("web1", map[string][]string{"s1": {"a1", "a2"}, "s2": {"a1"}})),
		"web2": serve("web2", hostTree("web2", map[string][]string{"s3": {"a9"}, "s4": nil})),
		"down": filepath.Join(dir, "nothing"),
	}
	local := serve("local", ns.Dir("", 0555, "",
		ns.ReadFile("idx", 0444, "", func(context.Context, *ns.Call) ([]byte, error) { return []byte("3 hosts\n"), nil }),
		ns.Dir("host", 0555, "", ns.Dynamic("h", 0555, "", list(func(*ns.Call) []string { return []string{"down", "web2", "web1"} })))))
	dialer := func(sock string) func(context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	}
	m := &mux.Mux{
		Local: dialer(local),
		Mount: func(path []string) (func(context.Context) (net.Conn, error), bool) {
			if len(path) == 2 && path[0] == "host" && socks[path[1]] != "" {
				return dialer(socks[path[1]]), true
			}
			return nil, false
		},
		HandshakeTimeout: 2 * time.Second,
	}
	l, err := net.Listen("unix", filepath.Join(dir, nsdir.Service))
	if err != nil {
		t.Fatal(err)
	}
	go m.Serve(l)
	t.Cleanup(func() { m.Shutdown(context.Background()) })
}

func TestOllieReadGlob(t *testing.T) {
	globFleet(t)
	out, errs, st := ollieRun("", "read", "host/*/session/*/agent/*/state")
	want := `host/web1/session/s1/agent/a1/state: idle s1/a1
host/web1/session/s1/agent/a2/state: idle s1/a2
host/web1/session/s2/agent/a1/state: idle s2/a1
host/web2/session/s3/agent/a9/state: idle s3/a9
`
	if out != want || errs != "" || st != ollieExitOK {
		t.Errorf("ollie read 'host/*/session/*/agent/*/state' = %d\n%s\nstderr %q; want\n%s", st, out, errs, want)
	}

	// ?, [...], an absolute pattern; a file without a last newline still
	// ends its lines, each prefixed.
	out, _, st = ollieRun("", "read", "/host/web[12]/noeol")
	if want := "/host/web1/noeol: one\n/host/web1/noeol: two\n/host/web2/noeol: one\n/host/web2/noeol: two\n"; out != want || st != 0 {
		t.Errorf("read /host/web[12]/noeol = %d %q, want %q", st, out, want)
	}
	out, _, _ = ollieRun("", "read", "host/web?/session/s?/agent/a[^2]/state")
	if want := "host/web1/session/s1/agent/a1/state: idle s1/a1\nhost/web1/session/s2/agent/a1/state: idle s2/a1\nhost/web2/session/s3/agent/a9/state: idle s3/a9\n"; out != want {
		t.Errorf("read with ? and [^2] = %q, want %q", out, want)
	}

	// A literal path prints as it always did.
	out, _, st = ollieRun("", "read", "host/web1/session/s1/agent/a2/state")
	if out != "idle s1/a2\n" || st != 0 {
		t.Errorf("read of one literal path = %d %q", st, out)
	}

	// No match: an error naming the pattern, the status of a missing file.
	_, errs, st = ollieRun("", "read", "host/*/session/*/agent/nobody/state")
	_, errs2, st2 := ollieRun("", "read", "host/web1/nothing")
	if st != st2 || st != ollieExitFailed || !strings.Contains(errs, "host/*/session/*/agent/nobody/state: no file matches") {
		t.Errorf("a glob that matches nothing: status %d (a missing file: %d, %q), stderr %q", st, st2, errs2, errs)
	}
	if _, errs, st := ollieRun("", "read", "host/[/x"); st != ollieExitFailed || !strings.Contains(errs, "bad pattern") {
		t.Errorf("a malformed pattern: %d %q", st, errs)
	}
}

func TestOllieLsStatGlob(t *testing.T) {
	globFleet(t)
	out, errs, st := ollieRun("", "ls", "host/*/session")
	want := "host/web1/session: s1/\nhost/web1/session: s2/\nhost/web2/session: s3/\nhost/web2/session: s4/\n"
	if out != want || errs != "" || st != 0 {
		t.Errorf("ls host/*/session = %d %q %q, want %q", st, out, errs, want)
	}
	out, _, _ = ollieRun("", "ls", "host/*/name")
	if want := "host/web1/name\nhost/web2/name\n"; out != want {
		t.Errorf("ls host/*/name = %q, want %q", out, want)
	}
	out, _, st = ollieRun("", "stat", "host/w*")
	if st != 0 || !strings.Contains(out, "host/web1: name   web1\n") || !strings.Contains(out, "host/web2: type   dir\n") ||
		strings.Count(out, "\n") != 18 {
		t.Errorf("stat host/w* = %d\n%s", st, out)
	}
}

func TestOllieWriteGlobRefused(t *testing.T) {
	globFleet(t)
	for _, cmd := range []string{"write", "rdwr", "rdwrs"} {
		_, errs, st := ollieRun("x", cmd, "host/*/name")
		if st != ollieExitUsage || !strings.Contains(errs, "a glob in "+cmd+": name one file") {
			t.Errorf("ollie %s with a glob: %d %q", cmd, st, errs)
		}
	}
}

func TestShellGlob(t *testing.T) {
	globFleet(t)
	script := `cd host
cat */session/s3/agent/*/state
ls w*/session
stat web1/session/s?/agent/a2
echo hi > */name
rdwr */name x
cd w*
cat /host/*/session/s2/agent/a1/state
`
	out, errs, st := ollieRun(script)
	want := `web2/session/s3/agent/a9/state: idle s3/a9
web1/session: s1/
web1/session: s2/
web2/session: s3/
web2/session: s4/
`
	if !strings.HasPrefix(out, want) {
		t.Errorf("shell output:\n%s\nwant it to start with\n%s", out, want)
	}
	if !strings.Contains(out, "web1/session/s1/agent/a2: name   a2\n") {
		t.Errorf("stat with a glob in the shell:\n%s", out)
	}
	if !strings.HasSuffix(out, "/host/web1/session/s2/agent/a1/state: idle s2/a1\n") {
		t.Errorf("cat of an absolute glob:\n%s", out)
	}
	for _, e := range []string{"echo: a glob in echo: name one file", "rdwr: a glob in rdwr: name one file", "cd: a glob in cd: name one directory"} {
		if !strings.Contains(errs, e) {
			t.Errorf("stderr %q lacks %q", errs, e)
		}
	}
	if st != ollieExitFailed {
		t.Errorf("status %d, want %d", st, ollieExitFailed)
	}
}
