package host

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/broker"
	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/internal/sudolab"
	"ollie/ns"
)

// TestBypassPending: with no desktop broker connected, an elevated tool's
// request waits in bypass/pending/{id}, where writing approve runs it
// outside the sandbox and deny gives the model the reason; bypass/policy
// can deny at once instead. (The scripted model names every call "c1", as
// many local models do: each turn's call must still be its own record.)
func TestBypassPending(t *testing.T) {
	tools := t.TempDir()
	os.WriteFile(filepath.Join(tools, "echo.meta"), []byte(`{"description": "Echo.", "elevated": true}`), 0644)
	// Outside the sandbox no_new_privs is off: the tool says so.
	os.WriteFile(filepath.Join(tools, "echo"), []byte("#!/bin/sh\necho \"echo got $(cat) nnp=$(grep NoNewPrivs /proc/self/status | tr -dc 0-9)\"\n"), 0755)
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", tools)
	t.Setenv("OLLIE_DATA", data)

	be := &twoStep{}
	_, fs := modelDaemon(t, be)
	if got := nstest.ReadFile(t, fs, "bypass/policy"); got != "nobroker=pending timeout=5m0s yolo=allow\n" {
		t.Errorf("default policy %q", got)
	}
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	sid, aid := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id")), strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/a/id"))
	chat, err := fs.Open("session/s/agent/a/chat", plan9.OREAD)
	if err != nil {
		t.Fatal(err)
	}
	defer chat.Close()

	pending := func() string {
		t.Helper()
		var id string
		await.Until(t, 10*time.Second, "a request in bypass/pending", func() bool {
			id = onlyPending(fs)
			return id != ""
		}, func() string {
			return fmt.Sprintf("state %q, log:\n%s", nstest.ReadFile(t, fs, "session/s/agent/"+aid+"/state"), nstest.ReadFile(t, fs, "session/s/agent/"+aid+"/log"))
		})
		return id
	}

	// Approved by writing the file.
	if err := nstest.WriteFile(fs, "session/s/agent/a/prompt", "hello"); err != nil {
		t.Fatal(err)
	}
	id := pending()
	if req := nstest.ReadFile(t, fs, "bypass/pending/"+id); !strings.Contains(req, "tool:     echo\n") || !strings.Contains(req, "write approve") {
		t.Errorf("bypass/pending/%s = %q", id, req)
	}
	// Who asks: the agent's session and the agent, by name and ID, as the
	// toolsrv got them with the call.
	if req := nstest.ReadFile(t, fs, "bypass/pending/"+id); !strings.Contains(req, `session:  "s" ("`+sid+`"), agent "a" ("`+aid+`")`+"\n") || strings.Contains(req, "variant") {
		t.Errorf("bypass/pending/%s does not name session %s and agent %s (or names a variant of a tool without):\n%s", id, sid, aid, req)
	}
	if err := nstest.WriteFile(fs, "bypass/pending/"+id, "maybe"); err == nil {
		t.Error("a bad decision was accepted")
	}
	if err := nstest.WriteFile(fs, "bypass/pending/"+id, "approve"); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, chat, 5)
	if !strings.Contains(strings.Join(lines, "\n"), `echo got {"text":"hello"} nnp=0`) {
		t.Errorf("after approve the chat is %q", lines)
	}

	// Denied by writing the file: the model reads the reason. The agent,
	// renamed, is named as it is called when it calls.
	if err := nstest.WriteFile(fs, "session/s/agent/a/name", "fixer"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "session/s/agent/fixer/prompt", "again"); err != nil {
		t.Fatal(err)
	}
	id = pending()
	if req := nstest.ReadFile(t, fs, "bypass/pending/"+id); !strings.Contains(req, `session:  "s" ("`+sid+`"), agent "fixer" ("`+aid+`")`+"\n") {
		t.Errorf("bypass/pending/%s does not name the agent renamed fixer (%s):\n%s", id, aid, req)
	}
	if err := nstest.WriteFile(fs, "bypass/pending/"+id, "deny not on a Friday"); err != nil {
		t.Fatal(err)
	}
	lines = readLines(t, chat, 5)
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "not on a Friday") || strings.Contains(got, `echo got {"text":"again"}`) {
		t.Errorf("after deny the chat is %q", lines)
	}

	// The policy denies at once when asked to.
	if err := nstest.WriteFile(fs, "bypass/policy", "nobroker=deny"); err != nil {
		t.Fatal(err)
	}
	if err := nstest.WriteFile(fs, "bypass/policy", "nobroker=sometimes"); err == nil {
		t.Error("a bad policy was accepted")
	}
	if err := nstest.WriteFile(fs, "session/s/agent/fixer/prompt", "third"); err != nil {
		t.Fatal(err)
	}
	lines = readLines(t, chat, 5)
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "no desktop broker is connected") {
		t.Errorf("with nobroker=deny the chat is %q", lines)
	}
}

// TestBypassPasswordNowhere gives a sudo request its password through
// bypass/pending/{id}, as the person at the host does with no desktop
// connected: a wrong one, then the right one, each reaching the asker
// (the test binary asks the gate itself, as toolsrv does). Only the owner
// may write the file: an agent's tool and none are refused, and nothing
// they write reaches sudo. Then the passwords are looked for where they
// must never be: the event stream, every text the file read, every error
// a writer got, the daemon's log at debug level and its 9P trace.
func TestBypassPasswordNowhere(t *testing.T) {
	wrong, right := "pw-wrong-"+broker.NewID(), "pw-right-"+broker.NewID()
	r := startPasswordRig(t)
	defer r.stop()
	conn, err := net.Dial("unix", filepath.Join(filepath.Dir(r.d.Socket), "elevate"))
	if err != nil {
		t.Fatal(err)
	}
	req := &broker.Request{ID: broker.NewID(), Session: r.sid, SessionName: "s", Agent: r.aid, AgentName: "a", Tool: "fix_nginx", Variant: -1, Executable: "/usr/local/bin/fix_nginx", Cwd: "/tmp", Sudo: true}
	type answer struct {
		cv  *broker.Conversation
		ans broker.Answer
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		cv, ans, err := broker.Ask(context.Background(), conn, req)
		answered <- answer{cv, ans, err}
	}()
	r.awaitEvent("bypass.pending " + req.ID + " fix_nginx")
	r.file = "bypass/pending/" + req.ID
	file := r.file
	r.read()
	if err := r.write(r.fs, "approve"); err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil || a.ans.Decision != broker.Once {
		t.Fatalf("the asker got %+v %v", a.ans, a.err)
	}
	cv := a.cv
	defer cv.Close("ran")
	if text := r.read(); !strings.Contains(text, "approved: waiting for sudo to ask for the password") || !strings.Contains(text, "password: write 'password SECRET' to this file") {
		t.Errorf("once approved, %s reads:\n%s", file, text)
	}

	first := askPassword(cv, 1, "")
	r.awaitEvent("bypass.password " + req.ID + " 1")
	if text := r.read(); !strings.Contains(text, "approved: sudo asks for the password (attempt 1 of 3)\n") {
		t.Errorf("while sudo asks, %s reads:\n%s", file, text)
	}
	r.othersRefused(right)
	// A password typed without its word is refused, and not repeated.
	if err := r.write(r.fs, right); err == nil {
		t.Error("a bare password was taken as a decision")
	}
	if err := r.write(r.fs, "password "+wrong+"\n"); err != nil {
		t.Fatal(err)
	}
	gotPassword(t, first, wrong)

	second := askPassword(cv, 2, "wrong password")
	r.awaitEvent("bypass.password " + req.ID + " 2")
	if text := r.read(); !strings.Contains(text, "approved: sudo asks for the password again (attempt 2 of 3): wrong password\n") {
		t.Errorf("after a wrong password, %s reads:\n%s", file, text)
	}
	if err := r.write(r.fs, "password "+right); err != nil {
		t.Fatal(err)
	}
	gotPassword(t, second, right)
	cv.Close("ran")
	r.stop()
	r.checkNowhere(wrong, right)
}

// passwordRig is a daemon that logs at debug level and traces 9P, with a
// session and an agent, and a subscriber to every event. shown keeps
// every text the request's file read and every error a writer got.
type passwordRig struct {
	t          *testing.T
	d          *Daemon
	fs         *client.Fsys
	log, trace nstest.SyncBuffer
	events     nstest.SyncBuffer
	grown      chan struct{} // a token each time events grows
	stopped    bool
	sid, aid   string
	file       string // the request's file in bypass/pending
	shown      []string
}

func startPasswordRig(t *testing.T) *passwordRig {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_DATA", data)
	r := &passwordRig{t: t, grown: make(chan struct{}, 1)}
	d, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Trace: &r.trace,
		Log:      slog.New(slog.NewTextHandler(&r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Backends: func(string) (backend.Backend, error) { return &twoStep{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	r.fs = nstest.Attach(t, d.Socket, "")
	fs := r.fs
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	r.sid, r.aid = strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id")), strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/a/id"))

	// Every event, as a subscriber reads them.
	ev, err := fs.Open("event", plan9.ORDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Write([]byte("*")); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 8192)
		for {
			n, err := ev.Read(buf)
			if err != nil {
				return
			}
			r.events.Write(buf[:n])
			select {
			case r.grown <- struct{}{}:
			default:
			}
		}
	}()
	return r
}

// stop shuts the daemon down, once.
func (r *passwordRig) stop() {
	if !r.stopped {
		r.stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.d.Shutdown(ctx)
	}
}

// awaitEvent waits until the subscriber has read the event want.
func (r *passwordRig) awaitEvent(want string) {
	r.t.Helper()
	timeout := time.After(10 * time.Second)
	for !strings.Contains(r.events.String(), want+"\n") {
		select {
		case <-r.grown:
		case <-timeout:
			r.t.Fatalf("no event %q in:\n%s", want, r.events.String())
		}
	}
}

// read reads the request's file as its owner.
func (r *passwordRig) read() string {
	r.t.Helper()
	text := nstest.ReadFile(r.t, r.fs, r.file)
	r.shown = append(r.shown, text)
	return text
}

// write writes data to the request's file through fs.
func (r *passwordRig) write(fs *client.Fsys, data string) error {
	err := nstest.WriteFile(fs, r.file, data)
	r.shown = append(r.shown, fmt.Sprint(err))
	return err
}

// othersRefused checks that only the owner writes the request's file:
// not an agent's tool, not none.
func (r *passwordRig) othersRefused(password string) {
	for who, other := range map[string]*client.Fsys{
		"the agent's tool":                      attachAgent(r.t, r.d, r.aid),
		"none":                                  attachPeer(r.t, r.d, ns.Remote, "none", ""),
		"a sandboxed tool without a capability": attachPeer(r.t, r.d, ns.Sandboxed, r.aid, ""),
	} {
		for _, data := range []string{"password " + password, "deny"} {
			if err := r.write(other, data); err == nil || !strings.Contains(err.Error(), "permission denied") {
				r.t.Errorf("%s wrote %q to %s: %v", who, strings.Fields(data)[0], r.file, err)
			}
		}
	}
}

// checkNowhere looks for the passwords in the event stream, the log, the
// trace and what the file showed.
func (r *passwordRig) checkNowhere(passwords ...string) {
	for what, s := range map[string]string{
		"the event stream":                         r.events.String(),
		"the daemon's log":                         r.log.String(),
		"the daemon's 9P trace":                    r.trace.String(),
		"what the file read and writers were told": strings.Join(r.shown, "\n"),
	} {
		for _, pw := range passwords {
			if strings.Contains(s, pw) {
				r.t.Errorf("a password is in %s:\n%s", what, s)
			}
		}
	}
	if !strings.Contains(r.trace.String(), "Twrite") {
		r.t.Error("the trace saw no write: it was not on")
	}
}

type pwResult struct {
	pw  []byte
	err error
}

// askPassword asks for the password as sudo's askpass does, in the
// background.
func askPassword(cv *broker.Conversation, attempt int, problem string) chan pwResult {
	ch := make(chan pwResult, 1)
	go func() {
		pw, err := cv.Password(context.Background(), attempt, problem)
		ch <- pwResult{pw, err}
	}()
	return ch
}

// gotPassword checks that the asker got want.
func gotPassword(t *testing.T, ch chan pwResult, want string) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || string(r.pw) != want {
			t.Fatalf("sudo got %q %v, want %q", r.pw, r.err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sudo got no password")
	}
}

// TestBypassSudoAtHost runs a sudo tool approved through bypass/pending
// with no desktop connected, against the real gate, toolsrv and sudo:
// olliesrv runs as a user whose password sudo asks for, and the person at
// the host (the test, root, the daemon's admin) approves it and gives the
// password by writing the file. The right password runs the tool as
// root; a wrong one is asked for again, the entry saying so, and the
// right one then runs it; a deny at the password ends it without running
// it. Then the passwords are looked for in the daemon's log and files,
// and in every process's argv and environment.
func TestBypassSudoAtHost(t *testing.T) {
	pw, wrong := "Pw-"+broker.NewID(), "Wrong-"+broker.NewID()
	h := sudolab.Start(t, sudolab.Config{User: "olpend", Password: pw, Tools: map[string]string{
		"root_id.meta": `{"description": "Print the user id the tool runs as.", "sudo": true, "readOnly": true}`,
		"root_id":      "#!/bin/sh\nid -u\n",
	}})
	fs := nstest.Attach(t, h.Socket, "")
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd="+h.Work); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &sudoTurns{t: t, ctx: ctx, h: h, fs: fs}

	t.Run("right", func(t *testing.T) {
		id := s.turn("who am I as root?")
		s.says(id, "tool:     root_id\n")
		s.write(id, "approve")
		s.says(id, "approved: sudo asks for the password (attempt 1 of 3)\n")
		s.write(id, "password "+pw+"\n")
		if out := s.output(); out != "0" {
			t.Errorf("root_id gave the model %q, want 0 (run as root)", out)
		}
	})
	t.Run("wrong then right", func(t *testing.T) {
		id := s.turn("and again?")
		s.write(id, "approve")
		s.says(id, "approved: sudo asks for the password (attempt 1 of 3)\n")
		s.write(id, "password "+wrong)
		s.says(id, "approved: sudo asks for the password again (attempt 2 of 3): wrong password\n")
		s.write(id, "password "+pw)
		if out := s.output(); out != "0" {
			t.Errorf("root_id gave the model %q, want 0 (run as root)", out)
		}
	})
	t.Run("deny", func(t *testing.T) {
		id := s.turn("once more?")
		s.write(id, "approve")
		s.says(id, "approved: sudo asks for the password (attempt 1 of 3)\n")
		s.write(id, "deny not as root today")
		if out := s.output(); out == "0" || !strings.Contains(out, "not as root today") {
			t.Errorf("root_id gave the model %q: want not run, saying why", out)
		}
	})
	searchSecrets(t, h, pw, wrong)
}

// sudoTurns drives the agent of TestBypassSudoAtHost: each turn a call
// of root_id, parked in bypass/pending for the test to answer. Its
// helpers fail the test of the top level, whose deadline ctx is.
type sudoTurns struct {
	t     *testing.T
	ctx   context.Context
	h     *sudolab.Host
	fs    *client.Fsys
	asked int // chat requests the model has had
}

// turn has the agent call root_id, and returns the id of its request
// once parked.
func (s *sudoTurns) turn(prompt string) string {
	t, fs := s.t, s.fs
	t.Helper()
	state := ""
	if !await.Poll(s.ctx, func() bool {
		state = nstest.ReadFile(t, fs, "session/s/agent/a/state")
		return state == "idle\n"
	}) {
		t.Fatalf("the agent stays %q", state)
	}
	s.h.LLM.Push(fakellm.ToolCall("root_id", `{}`), fakellm.Text("done"))
	s.asked += 2
	if err := nstest.WriteFile(fs, "session/s/agent/a/prompt", prompt); err != nil {
		t.Fatal(err)
	}
	id := ""
	if !await.Poll(s.ctx, func() bool {
		f, err := fs.Open("bypass/pending", plan9.OREAD)
		if err != nil {
			t.Fatal(err)
		}
		dirs, _ := f.Dirreadall()
		f.Close()
		if len(dirs) == 1 {
			id = dirs[0].Name
		}
		return id != ""
	}) {
		t.Fatalf("no request in bypass/pending:\n%s", s.h.Log.String())
	}
	return id
}

// says waits until the request's entry reads want.
func (s *sudoTurns) says(id, want string) {
	s.t.Helper()
	text := ""
	await.Until(s.t, 30*time.Second, fmt.Sprintf("bypass/pending/%s saying %q", id, want), func() bool {
		text, _ = nstest.TryRead(s.fs, "bypass/pending/"+id)
		return strings.Contains(text, want)
	}, func() string { return "it reads:\n" + text + "\nlog:\n" + s.h.Log.String() })
}

func (s *sudoTurns) write(id, data string) {
	s.t.Helper()
	if err := nstest.WriteFile(s.fs, "bypass/pending/"+id, data); err != nil {
		s.t.Fatal(err)
	}
}

// output is what the last call of root_id gave the model.
func (s *sudoTurns) output() string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	out, err := s.h.ToolOutput(ctx, s.asked)
	if err != nil {
		s.t.Fatalf("%v\nlog:\n%s", err, s.h.Log.String())
	}
	return strings.TrimSpace(out)
}

// searchSecrets looks for the secrets in the daemon's log and files, and
// in every process's argv and environment.
func searchSecrets(t *testing.T, h *sudolab.Host, secrets ...string) {
	for what, s := range map[string]string{"the daemon's log": h.Log.String()} {
		for _, p := range secrets {
			if strings.Contains(s, p) {
				t.Errorf("a password is in %s:\n%s", what, s)
			}
		}
	}
	filepath.WalkDir(h.Dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || strings.HasPrefix(p, filepath.Join(h.Dir, "bin")) {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("a password is in %s", p)
			}
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			b, _ := os.ReadFile(filepath.Join(p, f))
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("a password is in %s/%s", p, f)
				}
			}
		}
	}
	if sessions, _ := filepath.Glob(filepath.Join(h.Dir, "state", "ollie", "sessions", "*")); len(sessions) == 0 {
		t.Error("no session file was searched")
	}
}

// TestPendingReadOnlyByItsAgent: a request parked in bypass/pending says
// what a tool of one agent wants to run, with its arguments: the agent
// that asked reads it (its tools wait on it), the admin reads and answers
// it, and no other agent's tool, nor none, can read it; the asker cannot
// answer its own. A request no agent made is the admin's alone.
func TestPendingReadOnlyByItsAgent(t *testing.T) {
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	t.Setenv("OLLIE_DATA", data)
	d, admin := modelDaemon(t, &twoStep{})
	if _, err := nstest.RdWr(admin, "session/new", "name=s cwd="+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"name=a", "name=b"} {
		if _, err := nstest.RdWr(admin, "session/s/agent/new", req); err != nil {
			t.Fatal(err)
		}
	}
	sid := strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/id"))
	aid := strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/a/id"))
	bid := strings.TrimSpace(nstest.ReadFile(t, admin, "session/s/agent/b/id"))
	a, b := attachAgent(t, d, aid), attachAgent(t, d, bid)
	none := attachPeer(t, d, ns.Remote, "none", "")
	noToken := attachPeer(t, d, ns.Sandboxed, aid, "")

	// ask parks a request as toolsrv sends one, and returns its file.
	ask := func(agentID string) (string, chan broker.Answer) {
		t.Helper()
		conn, err := net.Dial("unix", filepath.Join(filepath.Dir(d.Socket), "elevate"))
		if err != nil {
			t.Fatal(err)
		}
		req := &broker.Request{ID: broker.NewID(), Session: sid, SessionName: "s", Agent: agentID, Tool: "deploy", Variant: -1,
			Executable: "/usr/local/bin/deploy", Args: []byte(`{"token": "s3cret-arg"}`), Cwd: "/tmp", Bypass: true}
		out := make(chan broker.Answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cv, ans, err := broker.Ask(ctx, conn, req)
			if err != nil {
				ans = broker.Answer{Decision: "error", Reason: err.Error()}
			} else {
				cv.Close("ran")
			}
			out <- ans
		}()
		file := "bypass/pending/" + req.ID
		await.Until(t, 10*time.Second, file+" appearing", func() bool {
			_, err := nstest.TryRead(admin, file)
			return err == nil
		})
		return file, out
	}

	file, answer := ask(aid)
	if text, err := nstest.TryRead(a, file); err != nil || !strings.Contains(text, "s3cret-arg") {
		t.Errorf("the asking agent's tool cannot read its own request: %q %v", text, err)
	}
	for who, fs := range map[string]*client.Fsys{"another agent's tool": b, "none": none, "a sandboxed tool without a capability": noToken} {
		if text, err := nstest.TryRead(fs, file); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s read agent a's pending request: %q %v", who, text, err)
		}
	}
	for who, fs := range map[string]*client.Fsys{"the asking agent's tool": a, "another agent's tool": b} {
		if err := nstest.WriteFile(fs, file, "approve"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s answered agent a's request: %v", who, err)
		}
	}
	if err := nstest.WriteFile(admin, file, "deny not now"); err != nil {
		t.Fatal(err)
	}
	if ans := <-answer; ans.Decision != broker.Deny || !strings.Contains(ans.Reason, "not now") {
		t.Errorf("the asker got %+v, want the admin's deny", ans)
	}

	// A request that names no agent is the admin's alone.
	file, answer = ask("")
	for who, fs := range map[string]*client.Fsys{"agent a's tool": a, "agent b's tool": b, "none": none} {
		if text, err := nstest.TryRead(fs, file); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s read a request no agent made: %q %v", who, text, err)
		}
	}
	if err := nstest.WriteFile(admin, file, "deny"); err != nil {
		t.Fatal(err)
	}
	<-answer
}

// onlyPending is the id of the one request in bypass/pending, or "" while
// there is not exactly one.
func onlyPending(fs *client.Fsys) string {
	f, err := fs.Open("bypass/pending", plan9.OREAD)
	if err != nil {
		return ""
	}
	dirs, _ := f.Dirreadall()
	f.Close()
	if len(dirs) != 1 {
		return ""
	}
	return dirs[0].Name
}
