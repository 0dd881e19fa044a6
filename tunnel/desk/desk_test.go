package desk

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/internal/await"
	"ollie/ns"
	"ollie/ns/client"
	"ollie/tunnel/fleet"

	"ollie/internal/lab"
)

// fakeHost is a host's namespace, as far as the desk reads it: status,
// session/new and idx, bypass/pending.
type fakeHost struct {
	name    string
	version string
	mu      sync.Mutex
	sess    []string // session names
	pending map[string]string
	decided []string
	stuck   bool // answers nothing: its reads block
}

func (h *fakeHost) spec() *ns.Node {
	block := func(ctx context.Context) {
		h.mu.Lock()
		stuck := h.stuck
		h.mu.Unlock()
		if stuck {
			<-ctx.Done()
		}
	}
	type item struct{ id string }
	return ns.Dir("", 0555, "",
		ns.ReadFile("status", 0444, "", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			block(ctx)
			return []byte("version " + h.version + "\npid 1\n"), nil
		}),
		ns.Dir("session", 0555, "",
			ns.RdWrFile("new", 0666, "", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
				name, ok := strings.CutPrefix(strings.TrimSpace(string(req)), "name=")
				if !ok || strings.Contains(name, " ") {
					return nil, fmt.Errorf("session/new: bad request %q", req)
				}
				h.mu.Lock()
				h.sess = append(h.sess, name)
				h.mu.Unlock()
				return []byte(name + "\n"), nil
			}),
			ns.ReadFile("idx", 0444, "", func(ctx context.Context, c *ns.Call) ([]byte, error) {
				block(ctx)
				h.mu.Lock()
				defer h.mu.Unlock()
				var b strings.Builder
				for i, s := range h.sess {
					fmt.Fprintf(&b, "id%d\t%s\tfalse\ttrue\t-\t/home/%s\tok\t-\n", i, s, h.name)
				}
				return []byte(b.String()), nil
			}),
		),
		ns.Dir("bypass", 0555, "",
			ns.Dir("pending", 0555, "",
				ns.DynamicFile("id", 0644, "", ns.Listing(func(context.Context, *ns.Call) ([]item, error) {
					h.mu.Lock()
					defer h.mu.Unlock()
					var out []item
					for id := range h.pending {
						out = append(out, item{id})
					}
					return out, nil
				}, func(i item) ns.Entry { return ns.Entry{Name: i.id, Key: i.id} }),
					&ns.Node{Read: func(ctx context.Context, c *ns.Call) ([]byte, error) {
						h.mu.Lock()
						defer h.mu.Unlock()
						return []byte(h.pending[c.Key("id")]), nil
					}, Write: func(ctx context.Context, c *ns.Call, data []byte) error {
						h.mu.Lock()
						defer h.mu.Unlock()
						h.decided = append(h.decided, c.Key("id")+" "+string(data))
						delete(h.pending, c.Key("id"))
						return nil
					}}),
			),
		),
	)
}

// serveTree serves root on a socket in dir, until the test ends.
func serveTree(t *testing.T, dir, name string, root *ns.Node) string {
	t.Helper()
	me, _ := user.Current()
	tree, err := ns.NewTree(root, me.Username, me.Username)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, name+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := &ns.Server{Tree: tree}
	go srv.ServeUnix(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return sock
}

type rig struct {
	sock  string // the desk's
	hosts map[string]*fakeHost
	socks map[string]string
	c     *client.Conn
	store fleet.Store
}

func newRig(t *testing.T, names ...string) *rig {
	dir, err := os.MkdirTemp("", "desk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &rig{hosts: map[string]*fakeHost{}, socks: map[string]string{}, store: fleet.Store{Dir: filepath.Join(dir, "runs")}}
	for i, n := range names {
		h := &fakeHost{name: n, version: fmt.Sprintf("v1.%d", i), pending: map[string]string{}}
		r.hosts[n] = h
		r.socks[n] = serveTree(t, dir, n, h.spec())
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		err := Serve(ctx, dir, Config{Runs: r.store, Timeout: 500 * time.Millisecond, Held: func() []Host {
			var hs []Host
			for _, n := range names {
				hs = append(hs, Host{Name: n, Socket: r.socks[n], Tunnel: "connected"})
			}
			return hs
		}})
		if err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-served })
	r.sock = Socket(dir)
	await.Until(t, 5*time.Second, "the desk's namespace answering on its socket", func() bool {
		r.c, err = client.DialAs(Socket(dir), "")
		return err == nil
	}, func() string { return err.Error() })
	t.Cleanup(func() { r.c.Close() })
	return r
}

func (r *rig) read(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := r.c.ReadAll(ctx, name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

// TestHostsAndSessions: host/idx lists each held host with its version and
// a round-trip time; session/new needs remote=HOST and creates it there;
// session/idx tells which host each session runs on and whether it
// answers now, listing a silent host's sessions as last seen.
func TestHostsAndSessions(t *testing.T) {
	r := newRig(t, "web1", "web2")
	ctx := context.Background()
	idx := r.read(t, "host/idx")
	for _, want := range []string{"web1\tconnected\tv1.0\t", "web2\tconnected\tv1.1\t"} {
		if !strings.Contains(idx, want) {
			t.Errorf("host/idx has no %q:\n%s", want, idx)
		}
	}
	if dirs, err := r.c.Ls(ctx, "host"); err != nil || len(dirs) != 3 {
		t.Errorf("ls host: %d entries, %v; want idx, web1, web2", len(dirs), err)
	}
	if _, err := r.c.RdWr(ctx, "session/new", []byte("name=x")); err == nil || !strings.Contains(err.Error(), "remote=HOST") {
		t.Errorf("session/new without remote=: %v", err)
	}
	if _, err := r.c.RdWr(ctx, "session/new", []byte("name=x remote=db9")); err == nil || !strings.Contains(err.Error(), "db9") || !strings.Contains(err.Error(), "web1, web2") {
		t.Errorf("session/new on a host not held: %v", err)
	}
	got, err := r.c.RdWr(ctx, "session/new", []byte("name=deploy remote=web2"))
	if err != nil || strings.TrimSpace(string(got)) != "deploy" {
		t.Fatalf("session/new remote=web2: %q, %v", got, err)
	}
	if s := r.hosts["web2"].sess; len(s) != 1 || s[0] != "deploy" {
		t.Errorf("web2 has sessions %v, want deploy", s)
	}
	r.c.RdWr(ctx, "session/new", []byte("name=check remote=web1"))
	idx = r.read(t, "session/idx")
	for _, want := range []string{"id0\tcheck\tfalse\ttrue\tweb1\t", "id0\tdeploy\tfalse\ttrue\tweb2\t"} {
		if !strings.Contains(idx, want) {
			t.Errorf("session/idx has no %q:\n%s", want, idx)
		}
	}
	// web1 stops answering: its sessions stay listed, not connected, and
	// the index does not wait for it longer than the timeout.
	r.hosts["web1"].mu.Lock()
	r.hosts["web1"].stuck = true
	r.hosts["web1"].mu.Unlock()
	start := time.Now()
	idx = r.read(t, "session/idx")
	if !strings.Contains(idx, "id0\tcheck\tfalse\tfalse\tweb1\t") || !strings.Contains(idx, "\tdeploy\tfalse\ttrue\tweb2\t") {
		t.Errorf("with web1 silent, session/idx is:\n%s", idx)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("session/idx waited %s for a silent host", took)
	}
	if idx := r.read(t, "host/idx"); !strings.Contains(idx, "web1\tconnected\t-\t-\n") {
		t.Errorf("host/idx with web1 silent:\n%s", idx)
	}
}

// TestPendingAcrossHosts: every host's pending requests in one directory,
// named HOST.ID; reading one reads the host's, writing one decides it
// there; a host's odd names are not listed.
func TestPendingAcrossHosts(t *testing.T) {
	r := newRig(t, "web1", "web.two")
	r.hosts["web1"].pending["aa01"] = "web1 asks to run apt_upgrade\n"
	r.hosts["web.two"].pending["bb02"] = "web.two asks to run shell\n"
	r.hosts["web.two"].pending["..evil"] = "no\n"
	ctx := context.Background()
	dirs, err := r.c.Ls(ctx, "bypass/pending")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, d.Name)
	}
	if strings.Join(names, " ") != "web.two.bb02 web1.aa01" && strings.Join(names, " ") != "web1.aa01 web.two.bb02" {
		t.Errorf("bypass/pending lists %v, want web1.aa01 and web.two.bb02 only", names)
	}
	if got := r.read(t, "bypass/pending/web.two.bb02"); got != "web.two asks to run shell\n" {
		t.Errorf("reading web.two.bb02 gave %q", got)
	}
	if err := r.c.Write(ctx, "bypass/pending/web1.aa01", []byte("deny not today")); err != nil {
		t.Fatal(err)
	}
	if d := r.hosts["web1"].decided; len(d) != 1 || d[0] != "aa01 deny not today" {
		t.Errorf("web1 was told %v", d)
	}
	if len(r.hosts["web.two"].decided) != 0 {
		t.Errorf("web.two was told %v", r.hosts["web.two"].decided)
	}
}

// TestRuns: the runs kept on the desktop, as files.
func TestRuns(t *testing.T) {
	r := newRig(t, "web1")
	run := fleet.NewRun("clean old logs\nthen report", []string{"web*"}, []*fleet.Host{
		{Name: "web1", Result: "complete", State: "complete", Steps: 3, ToolCalls: 2, Tokens: 900, Answer: "removed 2 GB"},
		{Name: "web2", State: "running shell"},
		{Name: "web3", Result: "unreachable", State: "unreachable", Detail: "connection refused"},
	})
	if err := r.store.Save(run); err != nil {
		t.Fatal(err)
	}
	if idx := r.read(t, "run/idx"); !strings.HasPrefix(idx, run.ID+"\trunning\t3\t1\t") || !strings.HasSuffix(idx, "\tclean old logs\n") {
		t.Errorf("run/idx:\n%s", idx)
	}
	st := r.read(t, "run/"+run.ID+"/status")
	for _, want := range []string{"state running\n", "session fleet-" + run.ID + "\n", "hosts 3\n", "working 1\n", "finished 1\n", "failed 1\n"} {
		if !strings.Contains(st, want) {
			t.Errorf("status has no %q:\n%s", want, st)
		}
	}
	hosts := r.read(t, "run/"+run.ID+"/hosts")
	if !strings.Contains(hosts, "web1\tcomplete\tcomplete\t") || !strings.Contains(hosts, "web2\trunning shell\t-\t") || !strings.Contains(hosts, "\tconnection refused\n") {
		t.Errorf("hosts:\n%s", hosts)
	}
	if res := r.read(t, "run/"+run.ID+"/results"); strings.Count(res, "\n") != 3 || !strings.Contains(res, `"answer":"removed 2 GB"`) {
		t.Errorf("results:\n%s", res)
	}
	if _, err := r.c.ReadAll(context.Background(), "run/rnothere1/status"); err == nil {
		t.Error("a run that does not exist was read")
	}
}

// TestHostsMounted: host/NAME is that host's whole namespace, and a glob
// across hosts reads each.
func TestHostsMounted(t *testing.T) {
	r := newRig(t, "web1", "web2")
	ctx := context.Background()
	dirs, err := r.c.Ls(ctx, "host/web2")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, d.Name)
	}
	if strings.Join(names, " ") != "status session bypass" {
		t.Errorf("ls host/web2 = %v, want the host's root: status session bypass", names)
	}
	if got := r.read(t, "host/web2/status"); !strings.HasPrefix(got, "version v1.1\n") {
		t.Errorf("host/web2/status = %q", got)
	}
	if got, err := r.c.RdWr(ctx, "host/web1/session/new", []byte("name=direct")); err != nil || strings.TrimSpace(string(got)) != "direct" {
		t.Errorf("session/new through the mount: %q %v", got, err)
	}
	matches, err := r.c.Glob(ctx, "host/*/status")
	if err != nil || strings.Join(matches, " ") != "/host/web1/status /host/web2/status" {
		t.Errorf("glob host/*/status = %v, %v", matches, err)
	}
}

// TestSandboxedRefused: a process of this user that runs sandboxed
// (no_new_privs, as every Landlock tool does) is not served: the
// namespace decides every host's pending approvals.
func TestSandboxedRefused(t *testing.T) {
	if sock := os.Getenv("DESK_TEST_DIAL"); sock != "" {
		c, err := client.DialTimeout(sock, "", 2*time.Second)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = c.ReadAll(ctx, "host/idx")
		}
		fmt.Printf("dial: %v\n", err)
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	lab.Need(t, err == nil, "setpriv (util-linux), to run a no_new_privs process")
	r := newRig(t, "web1")
	sock := r.sock
	for _, nnp := range []bool{false, true} {
		args := []string{os.Args[0], "-test.run=^TestSandboxedRefused$"}
		if nnp {
			args = append([]string{setpriv, "--no-new-privs"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DESK_TEST_DIAL="+sock)
		out, _ := cmd.CombinedOutput()
		served := strings.Contains(string(out), "dial: <nil>")
		if served == nnp {
			t.Errorf("no_new_privs %v: served %v:\n%s", nnp, served, out)
		}
	}
}
