package shell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/ns"
	"ollie/ns/client"
	"ollie/ns/nsdir"
	"ollie/ns/stream"
)

// ollieNS is a real ns.Server on a Unix socket in a fresh $NAMESPACE,
// serving a small tree with a file of each kind, for the ollie tests.
type ollieNS struct {
	srv    *ns.Server
	sock   string
	stream *stream.Stream
	bus    *ns.Bus

	mu     sync.Mutex
	writes []string // each request log received
}

func newOllieNS(t *testing.T) *ollieNS {
	t.Helper()
	n := &ollieNS{stream: stream.NewStream(0), bus: &ns.Bus{}}
	n.stream.Write([]byte("start\n"))
	ended := stream.NewStream(0)
	ended.Write([]byte("all of it\n"))
	ended.Close()
	tree, err := ns.NewTree(n.root(ended), "owner", "owner")
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n.srv = srv

	// t.TempDir paths can be too long for a socket address.
	dir, err := os.MkdirTemp("", "ollie")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("NAMESPACE", dir)
	t.Setenv("OLLIE_UNAME", "")
	n.sock = filepath.Join(dir, nsdir.Service)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: n.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeUnix(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return n
}

// root is the tree served: a file of each kind, and a directory of
// entries made on the fly. ended is a stream already ended.
func (n *ollieNS) root(ended *stream.Stream) *ns.Node {
	text := func(s string) func(context.Context, *ns.Call) ([]byte, error) {
		return func(context.Context, *ns.Call) ([]byte, error) { return []byte(s), nil }
	}
	each := &ns.Each{
		List: func(ctx context.Context, c *ns.Call) ([]ns.Entry, error) {
			return []ns.Entry{{Name: "alpha", Key: "s1"}, {Name: "beta", Key: "s2"}}, nil
		},
		Lookup: func(ctx context.Context, c *ns.Call, name string) (ns.Entry, bool) {
			switch name {
			case "alpha", "s1":
				return ns.Entry{Name: "alpha", Key: "s1"}, true
			case "beta", "s2":
				return ns.Entry{Name: "beta", Key: "s2"}, true
			}
			return ns.Entry{}, false
		},
	}
	return ns.Dir("", 0555, "",
		ns.ReadFile("hello", 0444, "A greeting.", text("hello\n")),
		ns.ReadFile("whoami", 0444, "The attached user.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			return []byte(c.User + "\n"), nil
		}),
		ns.WriteFile("log", 0222, "Records each request.", func(ctx context.Context, c *ns.Call, data []byte) error {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.writes = append(n.writes, string(data))
			return nil
		}),
		ns.RdWrFile("echo", 0666, "Answers got: REQUEST.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			return append([]byte("got: "), req...), nil
		}),
		ns.RdWrFile("fail", 0666, "Always fails.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			return nil, errors.New("fail: no good")
		}),
		ns.StreamFile("stream", 0444, "Never ends by itself.", func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
			return n.stream, nil
		}),
		ns.StreamFile("ended", 0444, "Already ended.", func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
			return ended, nil
		}),
		&ns.Node{Name: "event", Mode: 0666, Doc: "Events.", Subscribe: func(ctx context.Context, c *ns.Call, filter []byte) (ns.Source, error) {
			return n.bus.Subscribe(strings.Fields(string(filter))...), nil
		}},
		ns.Dir("session", 0555, "Sessions.",
			ns.Dynamic("sname", 0555, "A session.", each,
				ns.ReadFile("id", 0444, "Its ID.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
					return []byte(c.Key("sname") + "\n"), nil
				}),
			),
		),
	)
}

func (n *ollieNS) logged() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.writes)
}

// ollieRun runs ollie in this process with stdin and returns what it
// printed and its status.
func ollieRun(stdin string, args ...string) (stdout, stderr string, status int) {
	var out, errb bytes.Buffer
	status = Run(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), status
}

func TestOllieCommands(t *testing.T) {
	n := newOllieNS(t)
	for _, tc := range []struct {
		args         []string
		stdin        string
		out, errText string // errText: a substring of stderr
		status       int
	}{
		{args: []string{"ls"}, out: "hello\nwhoami\nlog\necho\nfail\nstream\nended\nevent\nsession/\n"},
		{args: []string{"ls", "/session/"}, out: "alpha/\nbeta/\n"},
		{args: []string{"ls", "session/s1/id"}, out: "session/s1/id\n"},
		{args: []string{"ls", "-l", "session"}, out: "dr-xr-xr-x owner owner 0 alpha/\ndr-xr-xr-x owner owner 0 beta/\n"},
		{args: []string{"read", "hello"}, out: "hello\n"},
		{args: []string{"read", "/session/beta/../alpha/id"}, out: "s1\n"},
		{args: []string{"read", "ended"}, out: "all of it\n"},
		// The server's own user is the admin whatever name it gives.
		{args: []string{"-u", "alice", "read", "whoami"}, out: "admin\n"},
		{args: []string{"-a", n.sock, "read", "whoami"}, out: "admin\n"},
		{args: []string{"write", "log"}, stdin: "one request\n"},
		{args: []string{"rdwr", "echo"}, stdin: "hi\n", out: "got: hi\n"},
		{args: []string{"stat", "hello"}, out: "path   /hello\nname   hello\ntype   file\nmode   -r--r--r--\n"},
		{args: []string{"help"}, out: "usage: ollie"},
		{args: []string{"-h"}, out: "usage: ollie"},

		{args: []string{"rdwr", "fail"}, stdin: "x", errText: "ollie: /fail: fail: no good\n", status: 1},
		{args: []string{"read", "nope"}, errText: "ollie: /nope: nope: file does not exist\n", status: 1},
		{args: []string{"write", "hello"}, errText: "ollie: /hello: hello: file is read-only\n", status: 1},
		{args: []string{"read", "echo"}, errText: "ollie: /echo: echo: request file", status: 1},
		{args: []string{"read", "session"}, errText: "ollie: /session: is a directory\n", status: 1},

		{args: []string{"read"}, errText: "usage: ollie read PATH", status: 2},
		{args: []string{"stat", "a", "b"}, errText: "usage: ollie stat PATH", status: 2},
		{args: []string{"ls", "a", "b"}, errText: "usage: ollie ls", status: 2},
		{args: []string{"frob", "x"}, errText: `unknown command "frob"`, status: 2},
		{args: []string{"-x", "read", "hello"}, errText: "flag provided but not defined: -x", status: 2},
		{args: []string{"-a", "tcp!nohost", "read", "hello"}, errText: "bad address", status: 2},

		{args: []string{"-a", n.sock + ".missing", "read", "hello"}, errText: "ollie: no olliesrv at " + n.sock + ".missing (start it with `olliesrv`)\n", status: 3},
	} {
		out, errText, status := ollieRun(tc.stdin, tc.args...)
		if status != tc.status || !strings.HasPrefix(out, tc.out) || !strings.Contains(errText, tc.errText) || (tc.errText == "" && errText != "") {
			t.Errorf("ollie %q: status %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, status, out, errText, tc.status, tc.out, tc.errText)
		}
	}
	if got := n.logged(); !slices.Equal(got, []string{"one request\n"}) {
		t.Errorf("log received %q", got)
	}

	// $NAMESPACE locates the server when no -a is given; without one there
	// is no server.
	t.Setenv("NAMESPACE", filepath.Join(filepath.Dir(n.sock), "elsewhere"))
	if _, errText, status := ollieRun("", "ls"); status != 3 || !strings.Contains(errText, "no olliesrv at") {
		t.Errorf("ollie ls without a server: status %d, stderr %q", status, errText)
	}
}

func TestOllieScript(t *testing.T) {
	n := newOllieNS(t)
	script := `pwd
ls
cd session   # a comment
pwd
ls -l alpha
cat alpha/id beta/id
cd ..
echo hello   world > log
echo -n 'quoted  "text"' >>log
rdwr echo some "more text"
cat nope
cd hello
ls session nope hello
stat /hello
rdwr fail
bogus
echo 'unterminated
cd /session/alpha
pwd
cd ../../..
pwd
`
	out, errText, status := ollieRun(script)
	wantOut := `/
hello
whoami
log
echo
fail
stream
ended
event
session/
/session
-r--r--r-- owner owner 0 id
s1
s2
got: some more text
session:
alpha/
beta/

nope:

hello:
hello
path   /hello
name   hello
type   file
mode   -r--r--r--
owner  owner
group  owner
length 0
qid    0x1.0
`
	if !strings.HasPrefix(out, wantOut) || !strings.HasSuffix(out, "\n/session/alpha\n/\n") {
		t.Errorf("script stdout:\n%s\nwant it to start with:\n%s", out, wantOut)
	}
	wantErr := `ollie: /nope: nope: file does not exist
ollie: cd: /hello: not a directory
ollie: /nope: nope: file does not exist
ollie: /fail: fail: no good
ollie: bogus: unknown command (type help)
ollie: syntax error: unterminated '
`
	if errText != wantErr {
		t.Errorf("script stderr:\n%s\nwant:\n%s", errText, wantErr)
	}
	if status != 1 {
		t.Errorf("script with failures: status %d, want 1", status)
	}
	if got := n.logged(); !slices.Equal(got, []string{"hello world\n", `quoted  "text"`}) {
		t.Errorf("log received %q", got)
	}
}

// A script's status is its exit's, else 1 if a command failed.
func TestOllieScriptStatus(t *testing.T) {
	newOllieNS(t)
	for _, tc := range []struct {
		script string
		status int
	}{
		{"ls\ncat hello\n", 0},
		{"cat nope\nls\n", 1},
		{"cat hello\nexit 7\ncat nope\n", 7},
		{"cat nope\nexit\ncat hello\n", 1},
		{"exit 300\n", 1},
	} {
		if _, errText, status := ollieRun(tc.script); status != tc.status {
			t.Errorf("script %q: status %d (stderr %q), want %d", tc.script, status, errText, tc.status)
		}
	}
	if out, _, _ := ollieRun("help\n"); !strings.Contains(out, "cat FILE...") {
		t.Errorf("shell help: %q", out)
	}
}

// A shell whose server goes away stops with status 3.
func TestOllieScriptLostServer(t *testing.T) {
	n := newOllieNS(t)
	r, w := io.Pipe()
	var out, errb nstest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(nil, r, &out, &errb) }()
	io.WriteString(w, "cat hello\n")
	ollieWaitFor(t, "the first command", func() bool { return out.String() == "hello\n" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The shell may notice the lost connection and stop before it reads
	// more, so nothing may read this: write without waiting.
	go func() {
		io.WriteString(w, "cat hello\nls\n")
		w.Close()
	}()
	select {
	case status := <-done:
		r.Close()
		if status != 3 || !strings.Contains(errb.String(), "connection to olliesrv lost") {
			t.Errorf("status %d, stderr %q; want 3 and a lost connection", status, errb.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the shell did not stop")
	}
}

func TestShellSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // operators as themselves
	}{
		{"", nil},
		{"  ls  -l\t/x ", []string{"ls", "-l", "/x"}},
		{`echo 'a  b' "c \"d\" \\ \n" e\ f`, []string{"echo", "a  b", `c "d" \ \n`, "e f"}},
		{"echo x>f", []string{"echo", "x", ">", "f"}},
		{"echo x >> f # note", []string{"echo", "x", ">>", "f"}},
		{"echo a#b ''", []string{"echo", "a#b", ""}},
		{"# all comment", nil},
	} {
		words, err := shellSplit(tc.in)
		var got []string
		for _, w := range words {
			if w.op != "" {
				got = append(got, w.op)
			} else {
				got = append(got, w.text)
			}
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("shellSplit(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`echo 'a`, `echo "a`, `echo "a\"`} {
		if _, err := shellSplit(bad); err == nil {
			t.Errorf("shellSplit(%q): no error", bad)
		}
	}
}

func TestShellCompleter(t *testing.T) {
	newOllieNS(t)
	var out bytes.Buffer
	sh := &ollieShell{cwd: "/", stdout: &shellOutput{w: &out}, stderr: &out}
	var err error
	if sh.conn, err = client.Dial(""); err != nil {
		t.Fatal(err)
	}
	defer sh.conn.Close()
	c := shellCompleter{sh}
	for _, tc := range []struct {
		line, cwd string
		want      []string
		n         int
	}{
		{"c", "/", []string{"at ", "d ", "hat "}, 1},
		{"cat se", "/", []string{"ssion/"}, 2},
		{"cat session/", "/", []string{"alpha/", "beta/"}, 0},
		{"cat /session/al", "/", []string{"pha/"}, 2},
		{"cat e", "/", []string{"cho ", "nded ", "vent "}, 1},
		{"echo x >lo", "/", []string{"g "}, 2},
		{"cat ../hel", "/session", []string{"lo "}, 3},
		{"cat nope/x", "/", nil, 0},
	} {
		sh.cwd = tc.cwd
		ends, n := c.Do([]rune(tc.line), len([]rune(tc.line)))
		var got []string
		for _, e := range ends {
			got = append(got, string(e))
		}
		if !slices.Equal(got, tc.want) || n != tc.n {
			t.Errorf("complete %q in %s = %q, %d; want %q, %d", tc.line, tc.cwd, got, n, tc.want, tc.n)
		}
	}
}

// TestOllieHelperProcess is not a test: it is ollie, run as a child by the
// tests that need signals or a terminal.
func TestOllieHelperProcess(t *testing.T) {
	if os.Getenv("OLLIE_TEST_HELPER") != "1" {
		return
	}
	var args []string
	if a := os.Getenv("OLLIE_TEST_ARGS"); a != "" {
		args = strings.Split(a, "\x1f")
	}
	os.Exit(Run(args, os.Stdin, os.Stdout, os.Stderr))
}

// ollieCommand returns a command running ollie with args in a child.
func ollieCommand(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestOllieHelperProcess$")
	// Under -race a child exiting 0 would otherwise sleep a second.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "OLLIE_TEST_HELPER=1", "OLLIE_TEST_ARGS="+strings.Join(args, "\x1f"))
	return cmd
}

// ollieWaitFor polls cond until it holds, failing the test after a while.
func ollieWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, 10*time.Second, what, cond)
}

// ollieWait waits for cmd to exit and returns its status.
func ollieWait(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("ollie did not exit")
		return -1
	}
}

// A signal interrupts a blocked read: the command exits 130, the shell
// goes on with the next command.
func TestOllieSignals(t *testing.T) {
	n := newOllieNS(t)
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		sig    syscall.Signal
		ready  string // stdout when the child is blocked
		out    string // all of stdout, at exit
		errOut string
		status int
	}{
		{"read SIGINT", []string{"read", "stream"}, "", syscall.SIGINT, "start\n", "start\n", "", 130},
		{"read SIGTERM", []string{"read", "stream"}, "", syscall.SIGTERM, "start\n", "start\n", "", 130},
		{"rdwrs", []string{"rdwrs", "event"}, "a.*\n", syscall.SIGINT, "a.x yes\n", "", "", 130},
		{"script", nil, "cat stream\nls session\ncat hello\n", syscall.SIGINT, "start\n", "start\nalpha/\nbeta/\nhello\n", "ollie: interrupted\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := ollieCommand(t, tc.args...)
			cmd.Stdin = strings.NewReader(tc.stdin)
			var out, errb nstest.SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ollieWaitFor(t, "output "+tc.ready, func() bool {
				n.bus.Publish("b.no", "no")
				n.bus.Publish("a.x", "yes")
				return strings.Contains(out.String(), tc.ready)
			})
			cmd.Process.Signal(tc.sig)
			status := ollieWait(t, cmd)
			if status != tc.status || (tc.out != "" && out.String() != tc.out) || errb.String() != tc.errOut {
				t.Errorf("status %d, stdout %q, stderr %q; want %d, %q, %q", status, out.String(), errb.String(), tc.status, tc.out, tc.errOut)
			}
			if strings.Contains(out.String(), "b.no") {
				t.Errorf("the filter let b.no through")
			}
		})
	}
}
