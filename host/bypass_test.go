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
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if f, err := fs.Open("bypass/pending", plan9.OREAD); err == nil {
				dirs, _ := f.Dirreadall()
				f.Close()
				if len(dirs) == 1 {
					return dirs[0].Name
				}
			}
		}
		t.Fatalf("no request in bypass/pending; state %q, log:\n%s", nstest.ReadFile(t, fs, "session/s/agent/"+aid+"/state"), nstest.ReadFile(t, fs, "session/s/agent/"+aid+"/log"))
		return ""
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
	data, _ := filepath.Abs("../data")
	t.Setenv("OLLIE_DATA", data)
	var log, trace nstest.SyncBuffer
	d, err := Start(Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Trace: &trace,
		Log:      slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Backends: func(string) (backend.Backend, error) { return &twoStep{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			d.Shutdown(ctx)
		}
	}
	defer stop()
	fs := nstest.Attach(t, d.Socket, "")
	if _, err := nstest.RdWr(fs, "session/new", "name=s cwd=/tmp"); err != nil {
		t.Fatal(err)
	}
	if _, err := nstest.RdWr(fs, "session/s/agent/new", "name=a profile=default"); err != nil {
		t.Fatal(err)
	}
	sid, aid := strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/id")), strings.TrimSpace(nstest.ReadFile(t, fs, "session/s/agent/a/id"))

	// Every event, as a subscriber reads them.
	var events nstest.SyncBuffer
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
			events.Write(buf[:n])
		}
	}()
	awaitEvent := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(events.String(), want+"\n"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no event %q in:\n%s", want, events.String())
			}
		}
	}

	conn, err := net.Dial("unix", filepath.Join(filepath.Dir(d.Socket), "elevate"))
	if err != nil {
		t.Fatal(err)
	}
	req := &broker.Request{ID: broker.NewID(), Session: sid, SessionName: "s", Agent: aid, AgentName: "a", Tool: "fix_nginx", Variant: -1, Executable: "/usr/local/bin/fix_nginx", Cwd: "/tmp", Sudo: true}
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
	awaitEvent("bypass.pending " + req.ID + " fix_nginx")
	file := "bypass/pending/" + req.ID
	var shown []string // every text and error a person or a tool got
	read := func() string {
		t.Helper()
		text := nstest.ReadFile(t, fs, file)
		shown = append(shown, text)
		return text
	}
	write := func(fs *client.Fsys, data string) error {
		err := nstest.WriteFile(fs, file, data)
		shown = append(shown, fmt.Sprint(err))
		return err
	}
	read()
	if err := write(fs, "approve"); err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil || a.ans.Decision != broker.Once {
		t.Fatalf("the asker got %+v %v", a.ans, a.err)
	}
	cv := a.cv
	defer cv.Close("ran")
	if text := read(); !strings.Contains(text, "approved: waiting for sudo to ask for the password") || !strings.Contains(text, "password: write 'password SECRET' to this file") {
		t.Errorf("once approved, %s reads:\n%s", file, text)
	}

	type pwResult struct {
		pw  []byte
		err error
	}
	ask := func(attempt int, problem string) chan pwResult {
		ch := make(chan pwResult, 1)
		go func() {
			pw, err := cv.Password(context.Background(), attempt, problem)
			ch <- pwResult{pw, err}
		}()
		return ch
	}
	got := func(ch chan pwResult, want string) {
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

	first := ask(1, "")
	awaitEvent("bypass.password " + req.ID + " 1")
	if text := read(); !strings.Contains(text, "approved: sudo asks for the password (attempt 1 of 3)\n") {
		t.Errorf("while sudo asks, %s reads:\n%s", file, text)
	}
	// Only the owner writes it: not an agent's tool, not none.
	for who, other := range map[string]*client.Fsys{
		"the agent's tool":                      attachAgent(t, d, aid),
		"none":                                  attachPeer(t, d, ns.Remote, "none", ""),
		"a sandboxed tool without a capability": attachPeer(t, d, ns.Sandboxed, aid, ""),
	} {
		for _, data := range []string{"password " + right, "deny"} {
			if err := write(other, data); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s wrote %q to %s: %v", who, strings.Fields(data)[0], file, err)
			}
		}
	}
	// A password typed without its word is refused, and not repeated.
	if err := write(fs, right); err == nil {
		t.Error("a bare password was taken as a decision")
	}
	if err := write(fs, "password "+wrong+"\n"); err != nil {
		t.Fatal(err)
	}
	got(first, wrong)

	second := ask(2, "wrong password")
	awaitEvent("bypass.password " + req.ID + " 2")
	if text := read(); !strings.Contains(text, "approved: sudo asks for the password again (attempt 2 of 3): wrong password\n") {
		t.Errorf("after a wrong password, %s reads:\n%s", file, text)
	}
	if err := write(fs, "password "+right); err != nil {
		t.Fatal(err)
	}
	got(second, right)
	cv.Close("ran")
	stop()

	for what, s := range map[string]string{
		"the event stream":                         events.String(),
		"the daemon's log":                         log.String(),
		"the daemon's 9P trace":                    trace.String(),
		"what the file read and writers were told": strings.Join(shown, "\n"),
	} {
		for _, pw := range []string{wrong, right} {
			if strings.Contains(s, pw) {
				t.Errorf("a password is in %s:\n%s", what, s)
			}
		}
	}
	if !strings.Contains(trace.String(), "Twrite") {
		t.Error("the trace saw no write: it was not on")
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

	asked := 0 // chat requests the model has had
	// turn has the agent call root_id, and returns the id of its request
	// once parked.
	turn := func(prompt string) string {
		t.Helper()
		for state := ""; state != "idle\n"; time.Sleep(20 * time.Millisecond) {
			if state = nstest.ReadFile(t, fs, "session/s/agent/a/state"); ctx.Err() != nil {
				t.Fatalf("the agent stays %q", state)
			}
		}
		h.LLM.Push(fakellm.ToolCall("root_id", `{}`), fakellm.Text("done"))
		asked += 2
		if err := nstest.WriteFile(fs, "session/s/agent/a/prompt", prompt); err != nil {
			t.Fatal(err)
		}
		for ; ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
			f, err := fs.Open("bypass/pending", plan9.OREAD)
			if err != nil {
				t.Fatal(err)
			}
			dirs, _ := f.Dirreadall()
			f.Close()
			if len(dirs) == 1 {
				return dirs[0].Name
			}
		}
		t.Fatalf("no request in bypass/pending:\n%s", h.Log.String())
		return ""
	}
	// says waits until the request's entry reads want.
	says := func(id, want string) {
		t.Helper()
		text := ""
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if text, _ = nstest.TryRead(fs, "bypass/pending/"+id); strings.Contains(text, want) {
				return
			}
		}
		t.Fatalf("bypass/pending/%s never said %q; it reads:\n%s\nlog:\n%s", id, want, text, h.Log.String())
	}
	write := func(id, data string) {
		t.Helper()
		if err := nstest.WriteFile(fs, "bypass/pending/"+id, data); err != nil {
			t.Fatal(err)
		}
	}
	output := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := h.ToolOutput(ctx, asked)
		if err != nil {
			t.Fatalf("%v\nlog:\n%s", err, h.Log.String())
		}
		return strings.TrimSpace(out)
	}

	t.Run("right", func(t *testing.T) {
		id := turn("who am I as root?")
		says(id, "tool:     root_id\n")
		write(id, "approve")
		says(id, "approved: sudo asks for the password (attempt 1 of 3)\n")
		write(id, "password "+pw+"\n")
		if out := output(); out != "0" {
			t.Errorf("root_id gave the model %q, want 0 (run as root)", out)
		}
	})
	t.Run("wrong then right", func(t *testing.T) {
		id := turn("and again?")
		write(id, "approve")
		says(id, "approved: sudo asks for the password (attempt 1 of 3)\n")
		write(id, "password "+wrong)
		says(id, "approved: sudo asks for the password again (attempt 2 of 3): wrong password\n")
		write(id, "password "+pw)
		if out := output(); out != "0" {
			t.Errorf("root_id gave the model %q, want 0 (run as root)", out)
		}
	})
	t.Run("deny", func(t *testing.T) {
		id := turn("once more?")
		write(id, "approve")
		says(id, "approved: sudo asks for the password (attempt 1 of 3)\n")
		write(id, "deny not as root today")
		if out := output(); out == "0" || !strings.Contains(out, "not as root today") {
			t.Errorf("root_id gave the model %q: want not run, saying why", out)
		}
	})

	for what, s := range map[string]string{"the daemon's log": h.Log.String()} {
		for _, p := range []string{pw, wrong} {
			if strings.Contains(s, p) {
				t.Errorf("a password is in %s:\n%s", what, s)
			}
		}
	}
	secrets := []string{pw, wrong}
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
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := nstest.TryRead(admin, file); err == nil {
				return file, out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared", file)
			}
		}
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
