package remote

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/sshlab"
)

// TestDesktopModel: a host with no model of its own gets the desktop's
// through the tunnel (up -model-via desktop:deskllm). Its agent's turn
// reaches the scripted server on the desktop, which sees the desktop's
// API key; the host lists the backend; status shows the route and its
// usage. The key is then nowhere on the host: no file (its session file
// included), no process's argv or environment.
func TestDesktopModel(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	kb := make([]byte, 16)
	rand.Read(kb)
	key := "sk-desk-" + hex.EncodeToString(kb)
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "ormod"})
	r := newRemote(t, lab)
	h := lab.Host(0)
	r.must("deploy", "h11")

	llm := fakellm.Start(t)
	llm.RequireKey(key)
	llm.Push(fakellm.Text("the desktop's model ", "answers"))
	deskCfg := desktopBackends(t, llm.URL, "DESK_LLM_KEY", "desk-model")
	up := r.cmd("up", "-model-via", "desktop:deskllm", "h11")
	up.Env = append(up.Env, "XDG_CONFIG_HOME="+deskCfg, "DESK_LLM_KEY="+key)
	if out, err := up.CombinedOutput(); err != nil || !strings.Contains(string(out), "this desktop's model: backend desktop (desktop:deskllm desk-model)") {
		t.Fatalf("up -model-via: %v\n%s", err, out)
	}
	ollie := func(stdin string, args ...string) string {
		t.Helper()
		cmd := lab.SSH(append([]string{"h11", ".local/bin/ollie"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ssh h11 ollie %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The keeper writes the host's backend and has the daemon read it.
	awaitRead(t, 30*time.Second, ollie, "backends", "desktop\topenai", "the host never listed the desktop's backend")
	ollie("name=m", "rdwr", "session/new")
	ollie("name=a", "rdwr", "session/m/agent/new")
	ollie("say something", "write", "session/m/agent/a/prompt")
	awaitRead(t, 45*time.Second, ollie, "session/m/agent/a/log", "the desktop's model answers", "no reply through the desktop's model", agentStats(ollie, "m"))
	reqs := llm.Requests()
	last := reqs[len(reqs)-1]
	if got := last.Header.Get("Authorization"); got != "Bearer "+key || last.Header.Get("X-Ollie-Run") != "" {
		t.Errorf("the upstream got Authorization %q and X-Ollie-Run %q", got, last.Header.Get("X-Ollie-Run"))
	}
	st := r.must("status", "h11")
	if !strings.Contains(st, "desktop:deskllm desk-model (1 requests, ") {
		t.Errorf("status does not show the route and its usage:\n%s", st)
	}
	// down takes the desktop's model away from the host, and says so
	// (issue 31): its agents go back to the host's own backends rather
	// than failing on a model no longer connected.
	if out := r.must("down", "h11"); !strings.Contains(out, "h11: its agents no longer use this desktop's model") {
		t.Errorf("down does not say the desktop's model is gone:\n%s", out)
	}
	if b := ollie("", "read", "backends"); strings.Contains(b, "desktop\topenai") {
		t.Errorf("after down the host still lists the desktop's backend:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(h.Home, ".config", "ollie", "backends.desktop.json")); err == nil {
		t.Error("after down the host still has backends.desktop.json")
	}
	if out, err := lab.SSH("h11", ".local/share/ollie/current/olliesrv", "stop").CombinedOutput(); err != nil {
		t.Fatalf("olliesrv stop: %v\n%s", err, out)
	}

	searchFor(t, key, h.Home, "/tmp", "/var/log")
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(b, []byte(key)) {
				cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				if !bytes.Contains(cmd, []byte("ollie-remote")) && !bytes.Contains(cmd, []byte(".test")) {
					t.Errorf("the key is in %s/%s (%q)", p, f, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
				}
			}
		}
	}
	if sessions, _ := filepath.Glob(filepath.Join(h.Home, ".local/state/ollie/sessions/*")); len(sessions) == 0 {
		t.Error("no session file to search")
	}
}

// TestAirGappedHost: a host whose sshd runs in a network namespace with no
// route out (internal/netlab): deploy, then an agent on the desktop's
// model through the tunnel makes tool calls, one of which tries the
// internet and is refused. Afterwards the namespace's counters show that
// the host opened no connection at all but the SSH session.
func TestAirGappedHost(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "orgap", Isolated: true})
	r := newRemote(t, lab)
	h := lab.Host(0)
	r.must("deploy", "h11")

	llm := fakellm.Start(t)
	llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		var tools []string
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools = append(tools, strings.TrimSpace(m.Text()))
			}
		}
		switch len(tools) {
		case 0:
			return fakellm.ToolCall("shell", `{"command": "uname -s"}`)
		case 1:
			return fakellm.ToolCall("shell", `{"command": "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 443), 3); print('REACHED' + '-NET')\""}`)
		}
		return fakellm.Text("done: ", strings.Join(tools, " | "))
	})
	deskCfg := desktopBackends(t, llm.URL, "", "desk-model")
	up := r.cmd("up", "-model-via", "desktop:deskllm", "h11")
	up.Env = append(up.Env, "XDG_CONFIG_HOME="+deskCfg)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("up -model-via: %v\n%s", err, out)
	}
	ollie := ollieOn(lab, "h11")
	awaitRead(t, 30*time.Second, ollie, "backends", "desktop\topenai", "the host never listed the desktop's backend")
	ollie("name=m", "rdwr", "session/new")
	ollie("name=a", "rdwr", "session/m/agent/new")
	ollie("look around", "write", "session/m/agent/a/prompt")
	log := awaitRead(t, 90*time.Second, ollie, "session/m/agent/a/log", "done: ", "the agent did not finish")
	if !strings.Contains(log, "Linux") || strings.Contains(log, "REACHED-NET") || !strings.Contains(log, "Permission denied") {
		t.Errorf("the tools' results: want uname's answer and the internet refused:\n%s", log)
	}
	r.must("down", "-stop-daemon", "h11")
	if n, detail := h.Outbound(); n != 0 {
		t.Errorf("the air-gapped host opened %d connections besides the SSH session: %s", n, detail)
	}
}

// TestFleetDesktopModel: a fleet run whose hosts have no model of their
// own runs on the desktop's (-model-via); its results say what the run
// used. A second run with a token budget too small for its work is cut
// off by the desktop, and each host's result says why.
func TestFleetDesktopModel(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	lab := sshlab.Start(t, sshlab.Config{Hosts: 2, UserPrefix: "orfmd"})
	r := newRemote(t, lab)
	llm := fakellm.Start(t)
	llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return fakellm.Response{Text: []string{"checked as ", strings.TrimSpace(last.Text())}, Usage: &fakellm.Usage{PromptTokens: 100, CompletionTokens: 10}}
		}
		return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"command": "id -un"}`}}, Usage: &fakellm.Usage{PromptTokens: 100, CompletionTokens: 10}}
	})
	deskCfg := desktopBackends(t, llm.URL, "", "desk-model")
	fleetRun := func(args ...string) (string, int) {
		cmd := r.cmd(append([]string{"fleet", "run", "-json", "-model-via", "desktop:deskllm"}, args...)...)
		cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+deskCfg)
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	out, code := fleetRun("h11,h12", "check who runs here")
	res := jsonResults(t, out)
	if code != 0 || res["h11"].Result != "done" || !strings.Contains(res["h12"].Answer, "checked as orfmd12") {
		t.Fatalf("fleet run -model-via: exit %d\n%s", code, out)
	}
	id := runIDRE.FindString(res["h11"].Run)
	if st := r.must("fleet", "status", id); !strings.Contains(st, "the desktop's model: 4 requests, 440 tokens") {
		t.Errorf("the run's model usage is not in its results:\n%s", st)
	}

	out, code = fleetRun("-run-tokens", "150", "h11,h12", "check who runs here")
	res = jsonResults(t, out)
	if code != 1 {
		t.Errorf("a run past its budget exited %d, want 1:\n%s", code, out)
	}
	cut := 0
	for _, h := range []string{"h11", "h12"} {
		if j := res[h]; j.Result == "error" && strings.Contains(j.Error, "token budget for run fleet-") {
			cut++
		}
	}
	if cut == 0 {
		t.Errorf("no host was told the run's budget was spent:\n%s", out)
	}

	// Chosen per host: h11 is in an inventory group whose var sends it to
	// the desktop's model; h12 is not, and uses its own backend (the same
	// scripted server, reached directly).
	h12cfg := filepath.Join(lab.Host(1).Home, ".config", "ollie")
	os.MkdirAll(h12cfg, 0700)
	os.WriteFile(filepath.Join(h12cfg, "backends.json"),
		[]byte(`{"backends": {"own": {"type": "openai", "url": "`+llm.URL+`/v1", "model": "own-model"}}}`), 0600)
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", lab.Host(1).UID, lab.Host(1).GID), filepath.Join(lab.Host(1).Home, ".config")).Run()
	r.must("down", "-stop-daemon", "-all")
	inv := filepath.Join(t.TempDir(), "hosts.ini")
	os.WriteFile(inv, []byte("[airgapped]\nh11\n[airgapped:vars]\nollie_model_via=desktop:deskllm\n[lan]\nh12\n"), 0644)
	cmd := r.cmd("fleet", "run", "-json", "-i", inv, "@airgapped,@lan", "check who runs here")
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+deskCfg)
	b, err := cmd.CombinedOutput()
	res = jsonResults(t, string(b))
	if err != nil || res["h11"].Result != "done" || res["h12"].Result != "done" {
		t.Fatalf("a run with the model chosen per host: %v\n%s", err, b)
	}
	st := r.must("status", "h11", "h12")
	if !strings.Contains(tableLine(st, "h11"), "desktop:deskllm desk-model (2 requests") || !strings.Contains(tableLine(st, "h12"), "host's own") {
		t.Errorf("status after the run:\n%s", st)
	}
}

// tableLine is the line of a table that begins with host.
func tableLine(table, host string) string {
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, host+" ") {
			return l
		}
	}
	return ""
}

// TestDesktopModelDrop: the SSH connection drops while the desktop's
// model streams a reply: the upstream request is cancelled, the host's
// turn does not hang, and it is asked again once the keeper has
// reconnected, which the chat says.
func TestDesktopModelDrop(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "ormdd"})
	r := newRemote(t, lab)
	h := lab.Host(0)
	r.must("deploy", "h11")
	llm := fakellm.Start(t)
	// The first reply streams a little, then hangs until its client is
	// gone: only a cancelled upstream request lets it go.
	llm.Push(fakellm.Hang("word0 ", "word1 "), fakellm.Text("asked again after the drop"))
	deskCfg := desktopBackends(t, llm.URL, "", "desk-model")
	up := r.cmd("up", "-model-via", "desktop:deskllm", "h11")
	up.Env = append(up.Env, "XDG_CONFIG_HOME="+deskCfg)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("up -model-via: %v\n%s", err, out)
	}
	ollie := ollieOn(lab, "h11")
	ollie("name=m", "rdwr", "session/new")
	ollie("name=a", "rdwr", "session/m/agent/new")
	ollie("count", "write", "session/m/agent/a/prompt")
	// Once the model is asked, its reply streams: the first words, then
	// nothing until its client is gone.
	await.Until(t, 30*time.Second, "the model was never asked", func() bool { return llm.Served() > 0 })
	if h.KillConnections() == 0 {
		t.Fatal("no SSH connection to cut")
	}
	awaitRead(t, 90*time.Second, ollie, "session/m/agent/a/log", "asked again after the drop", "the turn did not end with the reply asked again", agentStats(ollie, "m"))
	if llm.Abandoned() == 0 {
		t.Error("the upstream stream went on after the host's connection dropped")
	}
}

// TestAirGappedOllama: the air-gapped host's own Ollama (the scripted one,
// serving on the host namespace's loopback): deploy, an agent on it through
// Ollama's native API, with the window ollie set; no prompt cut, and no
// connection out but the SSH session.
func TestAirGappedOllama(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "orgol", Isolated: true})
	r := newRemote(t, lab)
	h := lab.Host(0)
	ln, err := h.Net.Listen("tcp", "127.0.0.1:11434")
	if err != nil {
		t.Fatal(err)
	}
	ollama := fakellm.NewListener(ln)
	defer ollama.Close()
	ollama.SetModels(fakellm.Model{ID: "qwen3:8b", ContextLength: 40960})
	ollama.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return fakellm.Text("the kernel is ", strings.TrimSpace(last.Text()))
		}
		return fakellm.ToolCall("shell", `{"command": "uname -s"}`)
	})
	r.must("deploy", "h11")
	cfgDir := filepath.Join(h.Home, ".config", "ollie")
	os.MkdirAll(cfgDir, 0700)
	os.WriteFile(filepath.Join(cfgDir, "backends.json"), []byte(`{"backends": {"local": {"type": "ollama", "url": "http://127.0.0.1:11434", "model": "qwen3:8b"}}}`), 0600)
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), filepath.Join(h.Home, ".config")).Run()
	ollie := ollieOn(lab, "h11")
	if m := ollie("", "read", "models"); !strings.Contains(m, "local\tqwen3:8b\tctx=32768") {
		t.Errorf("models does not show the window ollie sets:\n%s", m)
	}
	ollie("name=m", "rdwr", "session/new")
	ollie("name=a", "rdwr", "session/m/agent/new")
	ollie("which kernel?", "write", "session/m/agent/a/prompt")
	awaitRead(t, 90*time.Second, ollie, "session/m/agent/a/log", "the kernel is Linux", "the agent did not answer on the host's Ollama", agentStats(ollie, "m"))
	chats := ollama.OllamaChats()
	if len(chats) != 2 {
		t.Errorf("%d native chats, want 2", len(chats))
	}
	for _, c := range chats {
		if c.NumCtx != 32768 || c.Truncated() {
			t.Errorf("a chat ran with num_ctx %d, truncated %v", c.NumCtx, c.Truncated())
		}
	}
	if st := ollie("", "read", "session/m/agent/a/stats"); !strings.Contains(st, `"context_window": 32768`) {
		t.Errorf("stats does not show the window:\n%s", st)
	}
	r.must("down", "-stop-daemon", "-all")
	if n, detail := h.Outbound(); n != 0 {
		t.Errorf("the host opened %d connections besides the SSH session: %s", n, detail)
	}
}

// desktopBackends is a desktop's XDG_CONFIG_HOME whose backends.json has
// one backend, deskllm, at url (the scripted server), its key in keyEnv
// ("" for none).
func desktopBackends(t testing.TB, url, keyEnv, model string) string {
	dir := filepath.Join(t.TempDir(), "config")
	os.MkdirAll(filepath.Join(dir, "ollie"), 0700)
	key := ""
	if keyEnv != "" {
		key = `, "key_env": "` + keyEnv + `"`
	}
	os.WriteFile(filepath.Join(dir, "ollie", "backends.json"),
		[]byte(`{"backends": {"deskllm": {"type": "openai", "url": "`+url+`/v1"`+key+`, "model": "`+model+`"}}}`), 0600)
	return dir
}

// ollieOn runs the ollie command on a lab host over OpenSSH, with stdin,
// and returns what it printed (its errors too: callers look for what
// they expect in it).
func ollieOn(lab *sshlab.Lab, host string) func(stdin string, args ...string) string {
	return func(stdin string, args ...string) string {
		cmd := lab.SSH(append([]string{host, ".local/bin/ollie"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
}

// awaitRead waits until file, read on the host with ollie, holds want,
// and returns what it read last; if it does not within within, it fails t
// saying what never happened, with what it read and any detail.
func awaitRead(t *testing.T, within time.Duration, ollie func(stdin string, args ...string) string, file, want, what string, detail ...func() string) string {
	t.Helper()
	var got string
	await.Until(t, within, what, func() bool {
		got = ollie("", "read", file)
		return strings.Contains(got, want)
	}, func() string {
		msg := file + ":\n" + got
		for _, d := range detail {
			msg += "\n" + d()
		}
		return msg
	})
	return got
}

// agentStats is a detail for awaitRead: agent a's stats in session.
func agentStats(ollie func(stdin string, args ...string) string, session string) func() string {
	return func() string { return "stats:\n" + ollie("", "read", "session/"+session+"/agent/a/stats") }
}
