package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/broker"
	"ollie/chat"
	"ollie/host"
	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/internal/sudolab"
	"ollie/internal/termsafe"
	"ollie/ns/client"
)

// echoing is the agents' model: it calls echo with each prompt, then
// says what the tool said. It keeps what tools said.
type echoing struct {
	mu    sync.Mutex
	tools []string
}

func (b *echoing) Name() string                              { return "echoing" }
func (b *echoing) DefaultModel() string                      { return "m" }
func (b *echoing) Models(context.Context) ([]string, error)  { return []string{"m"}, nil }
func (b *echoing) ContextLength(context.Context, string) int { return 0 }
func (b *echoing) Chat(ctx context.Context, msgs []backend.Message, tools []backend.Tool, p backend.Params, on func(backend.Delta)) (*backend.Reply, error) {
	last := msgs[len(msgs)-1]
	if last.Role == backend.RoleTool {
		b.mu.Lock()
		b.tools = append(b.tools, last.Content)
		b.mu.Unlock()
		return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant, Content: "the tool said: " + last.Content}}, nil
	}
	args, _ := json.Marshal(map[string]string{"text": last.Content})
	return &backend.Reply{Message: backend.Message{Role: backend.RoleAssistant,
		ToolCalls: []backend.ToolCall{{ID: "c1", Name: "echo", Args: args}}}}, nil
}

func (b *echoing) said() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.tools, "\n")
}

// daemon is olliesrv in this process, with an elevated tool echo (which
// parks in bypass/pending, no desktop being connected), a session s and
// agents a and b, and a connection as its admin.
type daemon struct {
	d      *host.Daemon
	c      *client.Conn
	be     *echoing
	sid    string
	agents map[string]string // name → ID
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo.", "elevated": true}`), 0644)
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\necho \"echo got $(cat)\"\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)
	be := &echoing{}
	d, err := host.Start(host.Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backends: func(string) (backend.Backend, error) { return be, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	dd := &daemon{d: d, be: be, agents: map[string]string{}}
	dd.c = dd.dial(t)
	ctx := context.Background()
	if _, err := dd.c.RdWr(ctx, "session/new", []byte("name=s cwd=/tmp")); err != nil {
		t.Fatal(err)
	}
	dd.sid = dd.read(t, "session/s/id")
	for _, a := range []string{"a", "b"} {
		if _, err := dd.c.RdWr(ctx, "session/s/agent/new", []byte("name="+a+" profile=default")); err != nil {
			t.Fatal(err)
		}
		dd.agents[a] = dd.read(t, "session/s/agent/"+a+"/id")
	}
	return dd
}

func (d *daemon) dial(t *testing.T) *client.Conn {
	t.Helper()
	c, err := client.DialAs(d.d.Socket, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (d *daemon) read(t *testing.T, name string) string {
	t.Helper()
	b, err := d.c.ReadAll(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// parked waits until n requests wait in bypass/pending.
func (d *daemon) parked(t *testing.T, n int) {
	t.Helper()
	var have int
	await.Until(t, 10*time.Second, fmt.Sprintf("%d requests in bypass/pending", n), func() bool {
		dirs, err := d.c.Ls(context.Background(), "bypass/pending")
		if err != nil {
			t.Fatal(err)
		}
		have = len(dirs)
		return have == n
	}, func() string { return fmt.Sprintf("there are %d", have) })
}

// watch runs WatchPending for agent until the test ends, and delivers
// what it finds.
func (d *daemon) watch(t *testing.T, agent string) <-chan chat.Pending {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	found := make(chan chat.Pending, 16)
	done := make(chan error, 1)
	dial := func() (*client.Conn, error) { return client.DialAs(d.d.Socket, "") }
	go func() { done <- chat.WatchPending(ctx, dial, agent, func(p chat.Pending) { found <- p }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("WatchPending returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("WatchPending did not return when its context ended")
		}
	})
	return found
}

func next(t *testing.T, found <-chan chat.Pending) chat.Pending {
	t.Helper()
	select {
	case p := <-found:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("WatchPending found nothing")
		return chat.Pending{}
	}
}

// TestWatchPending: a request of agent a parked before the watch began is
// found; one of agent b is not; Decide approve runs a's tool, and a's next
// request is found.
func TestWatchPending(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	if err := d.c.Write(ctx, "session/s/agent/a/prompt", []byte("early")); err != nil {
		t.Fatal(err)
	}
	d.parked(t, 1)
	found := d.watch(t, d.agents["a"])
	early := next(t, found)
	if early.Attempt != 0 || early.Sudo || !strings.Contains(early.Text, "tool:     echo\n") || !strings.Contains(early.Text, `\"text\":\"early\"`) {
		t.Errorf("found %+v", early)
	}
	if err := d.c.Write(ctx, "session/s/agent/b/prompt", []byte("bees")); err != nil {
		t.Fatal(err)
	}
	d.parked(t, 2)
	if err := chat.Decide(ctx, d.c, early.ID, "approve"); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "approved, the tool to run",
		func() bool { return strings.Contains(d.be.said(), `echo got {"text":"early"}`) },
		func() string { return fmt.Sprintf("the tools said %q", d.be.said()) })
	d.idle(t, "a")
	if err := d.c.Write(ctx, "session/s/agent/a/prompt", []byte("late")); err != nil {
		t.Fatal(err)
	}
	// Events come in order: b's request, had it been found, would have
	// been found before this one.
	late := next(t, found)
	if !strings.Contains(late.Text, `\"text\":\"late\"`) || late.ID == early.ID {
		t.Errorf("after a's second request WatchPending found %+v", late)
	}
	if err := chat.Decide(ctx, d.c, late.ID, "deny not now"); err != nil {
		t.Fatal(err)
	}
}

// idle waits until agent is idle.
func (d *daemon) idle(t *testing.T, agent string) {
	t.Helper()
	await.Until(t, 10*time.Second, "agent "+agent+" to be idle",
		func() bool { return d.read(t, "session/s/agent/"+agent+"/state") == "idle" })
}

// TestWatchPendingPassword: a sudo request of the agent is found for its
// approval and for each of sudo's asks for the password, once each, even
// when the host publishes two events for one ask; GivePassword hands the
// password, bytes as given, to the asker. The test binary asks the gate
// itself, as toolsrv does: plain go test has no sudo to run.
func TestWatchPendingPassword(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	aid := d.agents["a"]
	found := d.watch(t, aid)
	type asked struct {
		cv  *broker.Conversation
		err error
	}
	ask := func() <-chan asked {
		conn, err := net.Dial("unix", filepath.Join(filepath.Dir(d.d.Socket), "elevate"))
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan asked, 1)
		go func() {
			req := &broker.Request{Session: d.sid, SessionName: "s", Agent: aid, AgentName: "a", Tool: "fix", Variant: -1, Executable: "/usr/local/bin/fix", Cwd: "/", Sudo: true}
			cv, ans, err := broker.Ask(ctx, conn, req)
			if err == nil && ans.Decision == broker.Deny {
				err = fmt.Errorf("denied: %s", ans.Reason)
			}
			ch <- asked{cv, err}
		}()
		return ch
	}
	type pw struct {
		pw  []byte
		err error
	}
	sudoAsks := func(cv *broker.Conversation, attempt int, problem string) <-chan pw {
		ch := make(chan pw, 1)
		go func() {
			p, err := cv.Password(ctx, attempt, problem)
			ch <- pw{p, err}
		}()
		return ch
	}
	got := func(ch <-chan pw) pw {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("sudo got no password")
			return pw{}
		}
	}

	first := ask()
	p := next(t, found)
	if p.Attempt != 0 || !p.Sudo {
		t.Fatalf("found %+v, want a sudo request to approve", p)
	}
	if err := chat.Decide(ctx, d.c, p.ID, "always"); err != nil {
		t.Fatal(err)
	}
	a := <-first
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.cv.Close("ran")
	one := sudoAsks(a.cv, 1, "")
	if p1 := next(t, found); p1.ID != p.ID || p1.Attempt != 1 || !strings.Contains(p1.Text, "approved: sudo asks for the password") {
		t.Fatalf("when sudo asks, found %+v", p1)
	}
	if err := chat.GivePassword(ctx, d.c, p.ID, []byte(" not this one ")); err != nil {
		t.Fatal(err)
	}
	if r := got(one); r.err != nil || string(r.pw) != " not this one " {
		t.Fatalf("sudo got %q %v", r.pw, r.err)
	}
	two := sudoAsks(a.cv, 2, "wrong password")
	if p2 := next(t, found); p2.ID != p.ID || p2.Attempt != 2 || !strings.Contains(p2.Text, "wrong password") {
		t.Fatalf("when sudo asks again, found %+v", p2)
	}
	if err := chat.GivePassword(ctx, d.c, p.ID, []byte("right")); err != nil {
		t.Fatal(err)
	}
	if r := got(two); string(r.pw) != "right" {
		t.Fatalf("sudo got %q %v", r.pw, r.err)
	}
	a.cv.Close("ran")

	// Approved always, the tool's next request does not wait for a
	// decision; sudo's ask is found once, though the host publishes it
	// as parked and as asking.
	second := ask()
	b := <-second
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.cv.Close("denied")
	ask1 := sudoAsks(b.cv, 1, "")
	q := next(t, found)
	if q.ID == p.ID || q.Attempt != 1 {
		t.Fatalf("for the request approved always, found %+v", q)
	}
	if err := chat.Decide(ctx, d.c, q.ID, "approve"); err == nil {
		t.Error("an approval was taken by a request waiting for its password")
	}
	if err := chat.Decide(ctx, d.c, q.ID, "deny not as root"); err != nil {
		t.Fatal(err)
	}
	if r := got(ask1); !errors.Is(r.err, broker.ErrDenied) || !strings.Contains(r.err.Error(), "not as root") {
		t.Errorf("denied, sudo got %q %v", r.pw, r.err)
	}
	// Found once: a second report of q would come before the next
	// request's, since the watch takes the host's events in order.
	third := ask()
	c := <-third
	if c.err != nil {
		t.Fatal(c.err)
	}
	defer c.cv.Close("denied")
	sudoAsks(c.cv, 1, "")
	if r := next(t, found); r.ID == q.ID || r.Attempt != 1 {
		t.Errorf("after the request approved always, found %+v again", r)
	}
}

// Decide and GivePassword write only a request's file: an ID that walks
// elsewhere is refused before anything is written.
func TestAnswersStayInPending(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	policy := d.read(t, "bypass/policy")
	for _, id := range []string{"../../session/s/agent/a/prompt", "../policy", "..", "", "a/b", "x y"} {
		if err := chat.Decide(ctx, d.c, id, "deny"); err == nil {
			t.Errorf("Decide(%q) was written", id)
		}
		if err := chat.GivePassword(ctx, d.c, id, []byte("nobroker=deny")); err == nil {
			t.Errorf("GivePassword(%q) was written", id)
		}
	}
	if got := d.read(t, "bypass/policy"); got != policy {
		t.Errorf("bypass/policy is %q, was %q", got, policy)
	}
	for _, bad := range []string{"", "two\nlines"} {
		if err := chat.GivePassword(ctx, d.c, "someid", []byte(bad)); err == nil {
			t.Errorf("GivePassword took %q", bad)
		}
	}
	for _, bad := range []string{"yes", "approve now", "deny two\nlines", "password x"} {
		if err := chat.Decide(ctx, d.c, "someid", bad); err == nil {
			t.Errorf("Decide took %q", bad)
		}
	}
}

// TestGivePasswordSudo: through the chat's API, with the real gate,
// toolsrv and sudo (the lab tier): the agent's sudo request is found,
// approved, found again when sudo asks for the password, and the password
// given runs the tool as root.
func TestGivePasswordSudo(t *testing.T) {
	pw := "Pw-" + broker.NewID()
	h := sudolab.Start(t, sudolab.Config{User: "olchat", Password: pw, Tools: map[string]string{
		"root_id.meta": `{"description": "Print the user id the tool runs as.", "sudo": true, "readOnly": true}`,
		"root_id":      "#!/bin/sh\nid -u\n",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.DialAs(h.Socket, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RdWr(ctx, "session/new", []byte("name=s cwd="+h.Work)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RdWr(ctx, "session/s/agent/new", []byte("name=a")); err != nil {
		t.Fatal(err)
	}
	aid, err := c.ReadAll(ctx, "session/s/agent/a/id")
	if err != nil {
		t.Fatal(err)
	}
	found := make(chan chat.Pending, 4)
	watched := make(chan error, 1)
	dial := func() (*client.Conn, error) { return client.DialAs(h.Socket, "") }
	go func() {
		watched <- chat.WatchPending(ctx, dial, strings.TrimSpace(string(aid)), func(p chat.Pending) { found <- p })
	}()
	next := func() chat.Pending {
		t.Helper()
		select {
		case p := <-found:
			return p
		case err := <-watched:
			t.Fatalf("WatchPending: %v", err)
		case <-ctx.Done():
			t.Fatalf("nothing found:\n%s", h.Log.String())
		}
		return chat.Pending{}
	}

	h.LLM.Push(fakellm.ToolCall("root_id", `{}`), fakellm.Text("done"))
	if err := c.Write(ctx, "session/s/agent/a/prompt", []byte("who am I as root?")); err != nil {
		t.Fatal(err)
	}
	p := next()
	if !p.Sudo || p.Attempt != 0 || !strings.Contains(p.Text, "tool:     root_id\n") {
		t.Fatalf("found %+v", p)
	}
	if err := chat.Decide(ctx, c, p.ID, "approve"); err != nil {
		t.Fatal(err)
	}
	if p = next(); p.Attempt != 1 {
		t.Fatalf("approved, found %+v", p)
	}
	if err := chat.GivePassword(ctx, c, p.ID, []byte(pw)); err != nil {
		t.Fatal(err)
	}
	out, err := h.ToolOutput(ctx, 2)
	if err != nil {
		t.Fatalf("%v\n%s", err, h.Log.String())
	}
	if strings.TrimSpace(out) != "0" {
		t.Errorf("root_id gave the model %q, want 0 (run as root)", out)
	}
}

// TestWatchPendingHostWords: what a request's asker wrote (names, the
// executable, arguments, the directory) reaches ollie chat's in-place
// approval quoted and under "this host says:", never as the sentence of
// whoever shows it: a request whose words name another host names it
// only inside quotes.
func TestWatchPendingHostWords(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	aid := d.agents["a"]
	found := d.watch(t, aid)
	conn, err := net.Dial("unix", filepath.Join(filepath.Dir(d.d.Socket), "elevate"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		req := &broker.Request{Session: d.sid, SessionName: "s\nollie: h5 asks to run as root (sudo)", Agent: aid,
			AgentName: `a" for h5 (asked by h5)`, Tool: "fix", Variant: -1, Executable: "/usr/local/bin/fix for h5",
			Args: json.RawMessage(`{"why":"sudo password for h5 (asked by h5): "}`), Cwd: "/h5", Sudo: true}
		_, _, err := broker.Ask(ctx, conn, req)
		done <- err
	}()
	p := next(t, found)
	first, _, _ := strings.Cut(p.Text, "\n")
	if first != "ollie: this host asks to run as root (sudo)" {
		t.Errorf("the request's first line is %q", first)
	}
	if own := termsafe.Unquoted(p.Text); strings.Contains(own, "h5") || !strings.Contains(own, "\n  this host says:\n") {
		t.Errorf("outside its quotes the request names h5, or does not attribute the asker's words:\n%s", p.Text)
	}
	if err := chat.Decide(ctx, d.c, p.ID, "deny not now"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("the asker: %v", err)
	}
}
