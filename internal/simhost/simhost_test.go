package simhost

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"ollie/agent/wire"
	"ollie/internal/demohost"
	"ollie/ns/client"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
)

// The start script as the keeper sends it (tunnel/keeper's startScript);
// the e2e tests (e2e/remote's TestSimFleet) send the keeper's own.
const startScript = `r="$HOME/.local/share/ollie"
if [ ! -x "$r/current/olliesrv" ]; then echo "ollie is not deployed on this host: run ollie-remote deploy first" >&2; exit 3; fi
exec "$r/current/olliesrv" start`

// bundle makes a bundle of a stand-in binary and two data files.
func bundle(t *testing.T, binText string) *deploy.Bundle {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"bin/olliesrv": binText, "data/tools/a.meta": "{}", "data/prompts/p.md": "hi"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := deploy.LoadBundle(filepath.Join(dir, "bin"), filepath.Join(dir, "data"), platform())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fleet starts n hosts with installed deployed, and returns the tunnel
// options that reach them.
func fleet(t *testing.T, n int, installed *deploy.Bundle) (*Fleet, tunnel.Options) {
	t.Helper()
	t.Setenv("SSH_AUTH_SOCK", "") // the fleet's key alone
	dir, err := os.MkdirTemp("", "simt")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	pub, err := demohost.NewClientKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Start(filepath.Join(dir, "h"), n, pub, &Options{Installed: installed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		os.RemoveAll(dir)
	})
	cf, err := f.WriteClientFiles(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	return f, tunnel.Options{ConfigFile: cf.Config}
}

func dial(t *testing.T, alias string, o tunnel.Options) *tunnel.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tunnel.Dial(ctx, alias, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestOtherKeysRefused(t *testing.T) {
	f, o := fleet(t, 1, nil)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	other, _ := ssh.NewSignerFromKey(priv)
	cfg := &ssh.ClientConfig{User: f.Hosts[0].User, Auth: []ssh.AuthMethod{ssh.PublicKeys(other)},
		HostKeyCallback: ssh.FixedHostKey(f.Hosts[0].HostKey), Timeout: 5 * time.Second}
	if c, err := ssh.Dial("tcp", f.Hosts[0].HostPort(), cfg); err == nil {
		c.Close()
		t.Fatal("a key the host was not given got in")
	}
	o.Override = &tunnel.Override{User: "someone-else"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := tunnel.Dial(ctx, "sim1", o); err == nil {
		c.Close()
		t.Fatal("another user name got in with the fleet's key")
	}
}

// The deploy probe, read by the real deploy.Push, finds a host on the
// installed bundle up to date, and a host on another one not (its upload
// then fails: a simulated host serves no files).
func TestProbe(t *testing.T) {
	installed := bundle(t, "binary one")
	_, o := fleet(t, 1, installed)
	c := dial(t, "sim1", o)
	ctx := context.Background()
	r := deploy.Push(ctx, c, installed, 3, deploy.Deadlines{}, nil)
	want := deploy.VersionOf(installed.Bins[platform()])
	if r.Err != "" || r.Version != want || strings.Join(r.Changed, ";") != "up to date: no file sent" || len(r.Degraded) > 0 {
		t.Errorf("deploy of the installed bundle: %+v; want up to date on %s, not degraded", r, want)
	}
	r = deploy.Push(ctx, c, bundle(t, "binary two"), 3, deploy.Deadlines{}, nil)
	if r.Err == "" || r.Files != 0 && r.Sent != 0 {
		t.Errorf("deploy of another bundle: %+v; want it to fail at the upload", r)
	}
}

func TestUnknownCommandFails(t *testing.T) {
	_, o := fleet(t, 1, nil)
	c := dial(t, "sim1", o)
	for _, cmd := range []string{"uname -a", deploy.Sh("cat /etc/passwd")} {
		_, err := c.Run(context.Background(), cmd, nil)
		var ee *tunnel.ExitError
		if !errors.As(err, &ee) || ee.Status != 127 || !strings.Contains(string(ee.Stderr), "runs no shell") {
			t.Errorf("%q: %v; want exit status 127 saying the host runs no shell", cmd, err)
		}
	}
}

// Nothing deployed: olliesrv start fails as the start script does, and
// the namespace's socket answers nothing.
func TestStartNotDeployed(t *testing.T) {
	f, o := fleet(t, 1, nil)
	c := dial(t, "sim1", o)
	_, err := c.Run(context.Background(), deploy.Sh(startScript), nil)
	var ee *tunnel.ExitError
	if !errors.As(err, &ee) || ee.Status != 3 || !strings.Contains(string(ee.Stderr), "not deployed") {
		t.Errorf("olliesrv start: %v; want exit status 3, not deployed", err)
	}
	if conn, err := c.DialUnix(f.Hosts[0].Socket()); err == nil {
		conn.Close()
		t.Error("the namespace answered with no daemon started")
	}
}

// start names the socket, which serves the namespace; a second start
// finds it running; stop ends it, and the keeper's look then says so.
func TestStartStop(t *testing.T) {
	f, o := fleet(t, 2, bundle(t, "binary"))
	h := f.Hosts[0]
	c := dial(t, h.Name, o)
	ctx := context.Background()
	for _, verb := range []string{"started", "running"} {
		out, err := c.Run(ctx, deploy.Sh(startScript), nil)
		if f := strings.Fields(string(out)); err != nil || len(f) != 4 || f[0] != verb || f[1] != h.Socket() || f[2] != "pid" {
			t.Fatalf("olliesrv start: %q, %v; want %s %s pid N", out, err, verb, h.Socket())
		}
	}
	if f.Hosts[1].Running() {
		t.Error("starting one host's daemon started another's")
	}
	nc := nsConn(t, c, h.Socket())
	st, err := nc.ReadAll(ctx, "status")
	if err != nil || !strings.Contains(string(st), "\nsessions 0\n") || !strings.HasPrefix(string(st), "version "+f.version+"\n") {
		t.Errorf("status: %q, %v", st, err)
	}
	out, err := c.Run(ctx, deploy.Sh(`r="$HOME/.local/share/ollie"; exec "$r/current/olliesrv" stop`), nil)
	if err != nil || !strings.HasPrefix(string(out), "stopped pid ") {
		t.Errorf("olliesrv stop: %q, %v", out, err)
	}
	if _, err := nc.ReadAll(ctx, "status"); err == nil {
		t.Error("the namespace still answers after olliesrv stop")
	}
	if conn, err := c.DialUnix(h.Socket()); err == nil {
		conn.Close()
		t.Error("the socket answers after olliesrv stop")
	}
	out, err = c.Run(ctx, deploy.Sh("sock=\"$1\"\nif [ ! -S \"$sock\" ]; then echo stopped; exit 0; fi\n"+startScript, h.Socket()), nil)
	if err != nil || string(out) != "stopped\n" {
		t.Errorf("the keeper's revive look after a stop: %q, %v; want stopped", out, err)
	}
}

func nsConn(t *testing.T, c *tunnel.Client, sock string) *client.Conn {
	t.Helper()
	conn, err := c.DialUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := client.NewConn(conn, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// A fleet run's steps on one host, as tunnel/fleet takes them: a session,
// its agent, the goal; the agent's answer in its stats, log and chat.
func TestGoal(t *testing.T) {
	f, o := fleet(t, 1, bundle(t, "binary"))
	f.opts.Answer = func(host, prompt string) string { return host + " read " + strings.Split(prompt, "\n")[1] }
	c := dial(t, "sim1", o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, deploy.Sh(startScript), nil); err != nil {
		t.Fatal(err)
	}
	nc := nsConn(t, c, f.Hosts[0].Socket())
	if name, err := nc.RdWr(ctx, "session/new", []byte("name=run1")); err != nil || string(name) != "run1\n" {
		t.Fatalf("session/new: %q, %v", name, err)
	}
	if name, err := nc.RdWr(ctx, "session/run1/agent/new", []byte(wire.NewAgent(wire.GoalAgent, "", ""))); err != nil || string(name) != wire.GoalAgent+"\n" {
		t.Fatalf("agent/new: %q, %v", name, err)
	}
	if err := nc.Write(ctx, "session/run1/goal", []byte("check the disks")); err != nil {
		t.Fatal(err)
	}
	dir := "session/run1/agent/" + wire.GoalAgent + "/"
	var st wire.Stats
	for st.Turns == 0 || st.State != wire.StateIdle {
		b, err := nc.ReadAll(ctx, dir+"stats")
		if err != nil || json.Unmarshal(b, &st) != nil {
			t.Fatalf("stats: %q, %v", b, err)
		}
		if st.Turns == 0 {
			nc.ReadAll(ctx, dir+"statewait")
		}
	}
	if st.Steps != 1 || st.Messages != 2 {
		t.Errorf("stats after the goal: %+v; want 1 turn, 1 step, 2 messages", st)
	}
	log, err := nc.ReadAll(ctx, dir+"log")
	if a := wire.LastAnswer(log, 1000); err != nil || a != "sim1 read check the disks" {
		t.Errorf("the answer in the log: %q, %v", a, err)
	}
	// chat is a stream: a read at its end waits for more.
	var chat strings.Builder
	fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = nc.Follow(fctx, dir+"chat", writerFunc(func(p []byte) { chat.Write(p) }))
	fcancel()
	if ctx.Err() != nil || !strings.HasPrefix(chat.String(), wire.GoalPrompt("check the disks", "run1")+"\n") || !strings.HasSuffix(chat.String(), "\nsim1 read check the disks\n") {
		t.Errorf("chat: %q (%v); want the prompt, then the answer", chat.String(), err)
	}
	st2, _ := nc.ReadAll(ctx, "status")
	if !strings.Contains(string(st2), "\nsessions 1\nagents 1\n") {
		t.Errorf("status: %q; want a session and an agent", st2)
	}
	if gs, err := nc.ReadAll(ctx, "session/run1/goalstatus"); err != nil || string(gs) != "running\n" {
		t.Errorf("goalstatus: %q, %v; want running (the agent never set it)", gs, err)
	}
}

// The keeper's approval channel: a socket forwarded to the host is
// registered in bypass/broker by the real gate, which says so on event
// and lists it; a path that is no socket is refused.
func TestBrokerRegistration(t *testing.T) {
	f, o := fleet(t, 1, bundle(t, "binary"))
	h := f.Hosts[0]
	c := dial(t, h.Name, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, deploy.Sh(startScript), nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(h.Home, "broker-0123456789abcdef")
	ln, err := c.ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc := nsConn(t, c, h.Socket())
	events := make(chan string, 4)
	on := make(chan struct{})
	go nc.SubscribeFrom(ctx, "event", []byte("bypass.broker"), func() { close(on) }, writerFunc(func(p []byte) { events <- string(p) }))
	<-on
	if err := nc.Write(ctx, "bypass/broker", []byte(path+" key="+strings.Repeat("ab", 32))); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev != "bypass.broker +"+path+"\n" {
		t.Errorf("event: %q", ev)
	}
	if b, err := nc.ReadAll(ctx, "bypass/broker"); err != nil || string(b) != path+"\n" {
		t.Errorf("bypass/broker: %q, %v", b, err)
	}
	if err := nc.Write(ctx, "bypass/broker", []byte(filepath.Join(h.Home, "nothing-here"))); err == nil {
		t.Error("a path that is no socket was registered")
	}
	if err := nc.Write(ctx, "bypass/broker", []byte("-"+path)); err != nil {
		t.Fatal(err)
	}
	if b, _ := nc.ReadAll(ctx, "bypass/broker"); len(b) != 0 {
		t.Errorf("bypass/broker after -PATH: %q", b)
	}
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(append([]byte(nil), p...)); return len(p), nil }
