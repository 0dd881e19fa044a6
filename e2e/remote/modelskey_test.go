package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"ollie/agent/fakellm"
	"ollie/internal/sshlab"
)

// TestDesktopModelKey: a process on the host other than its olliesrv (a
// tool can connect to models.sock as well: Landlock does not mediate it,
// and sshd listens there) dials the socket itself and asks for a chat
// completion without the key and with a wrong one: both are refused, the
// desktop's model never sees them, and status counts them but no usage;
// the daemon's agent still gets answers. After the daemon is
// killed and started again, an agent made on the new one gets an answer
// through the desktop: the keeper gave it the key again.
func TestDesktopModelKey(t *testing.T) {
	t.Parallel() // its own lab users, keeper, state and model: it waits more than it works
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: "ormky"})
	r := newRemote(t, lab)
	h := lab.Host(0)
	r.must("deploy", "h11")
	llm := fakellm.Start(t)
	deskCfg := desktopBackends(t, llm.URL, "", "desk-model")
	up := r.cmd("up", "-model-via", "desktop:deskllm", "h11")
	up.Env = append(up.Env, "XDG_CONFIG_HOME="+deskCfg)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("up -model-via: %v\n%s", err, out)
	}
	ollie := ollieOn(lab, "h11")
	awaitRead(t, 30*time.Second, ollie, "backends", "desktop\topenai", "the host never listed the desktop's backend")
	var cfg struct {
		Backends map[string]struct{ Socket string }
	}
	b, err := os.ReadFile(filepath.Join(h.Home, ".config/ollie/backends.desktop.json"))
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg.Backends["desktop"].Socket == "" {
		t.Fatalf("the host's desktop backend: %v\n%s", err, b)
	}
	sock := cfg.Backends["desktop"].Socket
	if strings.Contains(string(b), "key") {
		t.Errorf("the host's desktop backend names a key:\n%s", b)
	}

	// Another process dials the socket: no key, then one of its own.
	direct := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	wrong := make([]byte, 32)
	rand.Read(wrong)
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusServiceUnavailable}, {"Bearer " + hex.EncodeToString(wrong), http.StatusUnauthorized}} {
		req, _ := http.NewRequest("POST", "http://desktop/v1/chat/completions", strings.NewReader(`{"model":"desk-model","messages":[{"role":"user","content":"spend the desktop's budget"}]}`))
		req.Header.Set("Content-Type", "application/json")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := direct.Do(req)
		if err != nil {
			t.Fatalf("dialing %s: %v", sock, err)
		}
		var e struct{ Error struct{ Message string } }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.want || !strings.Contains(e.Error.Message, "only the host's olliesrv") {
			t.Errorf("a chat on %s with Authorization %q: %d %q, want %d", sock, c.auth, resp.StatusCode, e.Error.Message, c.want)
		}
	}
	if n := len(llm.Requests()); n != 0 {
		t.Errorf("%d requests reached the desktop's model from a process without the key", n)
	}
	// Status shows no usage, and the two requests without the key.
	if st := r.must("status", "h11"); !strings.Contains(st, "desktop:deskllm desk-model (0 requests, 0 tokens, 2 without olliesrv's key)") {
		t.Errorf("status after the refusals:\n%s", st)
	}

	// The daemon's agent is answered.
	llm.Respond(func(*fakellm.ChatRequest) fakellm.Response { return fakellm.Text("the desktop answers") })
	answered := func(session string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		ollie("name="+session, "rdwr", "session/new")
		ollie("name=a", "rdwr", "session/"+session+"/agent/new")
		ollie("say something", "write", "session/"+session+"/agent/a/prompt")
		awaitRead(t, within, ollie, "session/"+session+"/agent/a/log", "the desktop answers", "no answer through the desktop's model", agentStats(ollie, session))
		return time.Since(start)
	}
	answered("m", 30*time.Second)
	if st := r.must("status", "h11"); !strings.Contains(st, "desktop:deskllm desk-model (1 requests, ") {
		t.Errorf("status after the agent's turn:\n%s", st)
	}

	// A new daemon: killed, and started again.
	var pid int
	for _, l := range strings.Split(ollie("", "read", "status"), "\n") {
		if v, ok := strings.CutPrefix(l, "pid "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("no pid in the daemon's status")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, pid)
	if out, err := lab.SSH("h11", `exec "$HOME/.local/share/ollie/current/olliesrv" start`).CombinedOutput(); err != nil {
		t.Fatalf("olliesrv start: %v\n%s", err, out)
	}
	// Without the key given again it is never answered; how soon is a
	// figure, not a pass mark (a full make test's load once made it 8.8 s).
	took := answered("after", 30*time.Second)
	t.Logf("an agent of the new daemon was answered through the desktop %s after it started", took.Round(time.Millisecond))
}
