package remote

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/internal/sshlab"
)

// modelHost is a lab host with ollie deployed whose agents' model is the
// scripted one, here on the desktop.
func modelHost(t testing.TB, prefix string) (*remote, *sshlab.Host, *fakellm.Server) {
	lab := sshlab.Start(t, sshlab.Config{Hosts: 1, UserPrefix: prefix})
	r := newRemote(t, lab)
	h := lab.Host(0)
	r.must("deploy", "h11")
	llm := fakellm.Start(t)
	cfgDir := filepath.Join(h.Home, ".config", "ollie")
	os.MkdirAll(cfgDir, 0700)
	os.WriteFile(filepath.Join(cfgDir, "backends.json"),
		[]byte(`{"backends": {"fake": {"type": "openai", "url": "`+llm.URL+`/v1", "model": "fake-model"}}}`), 0600)
	exec.Command("chown", "-R", fmt.Sprintf("%d:%d", h.UID, h.GID), filepath.Join(h.Home, ".config")).Run()
	return r, h, llm
}

// TestChatOverSSH: ollie chat on a host through a real "ssh -t", the
// one-line way in, and from the desktop through "ollie -H" once up holds
// the host.
func TestChatOverSSH(t *testing.T) {
	r, _, llm := modelHost(t, "orchat")

	llm.Push(fakellm.Text("hello from ", "h11"))
	chatOn(t, r.lab.SSH("-t", "h11", "ollie", "chat"), "say hello", "hello from h11")

	r.must("up", "h11")
	llm.Push(fakellm.Text("again, over the tunnel"))
	desk := exec.Command(filepath.Join(binDir, "olliesrv"), "ollie", "-H", "h11", "chat")
	desk.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "NO_COLOR=1")
	desk.Dir = t.TempDir()
	chatOn(t, desk, "once more", "again, over the tunnel")
}

// TestChatSurvivesReconnect: a reply streaming to ollie -H chat goes on
// across two cuts of the SSH connection, each line of it once, in order.
func TestChatSurvivesReconnect(t *testing.T) {
	r, h, llm := modelHost(t, "orchr")
	var chunks []string
	for i := range 200 {
		chunks = append(chunks, fmt.Sprintf("line %03d\n", i))
	}
	llm.Push(fakellm.Response{Text: chunks, Delay: 10 * time.Millisecond})
	r.must("up", "h11")

	cmd := exec.Command(filepath.Join(binDir, "olliesrv"), "ollie", "-H", "h11", "chat")
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "NO_COLOR=1")
	cmd.Dir = t.TempDir()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	scr := watchTerminal(tty)
	scr.waitFor(t, "› ")
	tty.Write([]byte("count\r"))
	for _, at := range []string{"line 050", "line 120"} {
		scr.waitFor(t, at)
		if k := h.KillConnections(); k == 0 {
			t.Errorf("no ssh connection to kill at %s", at)
		}
	}
	scr.waitFor(t, "── idle")
	var got []string
	for _, m := range lineRE.FindAllString(strings.ReplaceAll(scr.String(), "\r", ""), -1) {
		got = append(got, m)
	}
	if strings.Join(got, "") != strings.Join(chunks, "") {
		t.Errorf("after two cuts the chat showed %d numbered lines, want the 200 in order, once each:\n%s", len(got), scr)
	}
	tty.Write([]byte("/exit\r"))
	cmd.Wait()
}

// BenchmarkChatOverUp is ollie chat's time from Enter to the reply's
// first characters (enter-to-char-ms) from the desktop, through the
// tunnel "up" holds to a lab host whose agent's model is the scripted one
// on the desktop, beside that model's own time to its first token as the
// openai-go client on the desktop sees it (model-ttft-ms). added-ms is
// what the chat, the tunnel, the daemon and the namespace add.
func BenchmarkChatOverUp(b *testing.B) {
	r, _, llm := modelHost(b, "orchb")
	r.must("up", "h11")

	cmd := exec.Command(filepath.Join(binDir, "olliesrv"), "ollie", "-H", "h11", "chat")
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "NO_COLOR=1")
	cmd.Dir = b.TempDir()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { tty.Write([]byte("/exit\r")); cmd.Wait(); tty.Close() }()
	seen := make(chan time.Time, 1)
	var mu sync.Mutex
	var screen bytes.Buffer
	want := "› "
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			if want != "" && bytes.Contains(screen.Bytes(), []byte(want)) {
				seen <- time.Now()
				want = ""
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	expect := func(w string) { mu.Lock(); screen.Reset(); want = w; mu.Unlock() }
	<-seen

	be, err := backend.NewOpenAI(backend.Config{Name: "peer", Type: backend.TypeOpenAI, URL: llm.URL + "/v1", Model: "fake-model"}, "")
	if err != nil {
		b.Fatal(err)
	}
	var model, chat time.Duration
	b.ResetTimer()
	for i := range b.N {
		word := fmt.Sprintf("reply%dx", i)
		llm.Push(fakellm.Text(word, " and the rest"))
		start := time.Now()
		first := make(chan time.Duration, 1)
		if _, err := be.Chat(context.Background(), []backend.Message{{Role: backend.RoleUser, Content: "hi"}}, nil, backend.Params{}, func(d backend.Delta) {
			if d.Text != "" {
				select {
				case first <- time.Since(start):
				default:
				}
			}
		}); err != nil {
			b.Fatal(err)
		}
		model += <-first

		llm.Push(fakellm.Text(word, " and the rest"))
		expect(word)
		start = time.Now()
		tty.Write([]byte("say it\r"))
		select {
		case at := <-seen:
			chat += at.Sub(start)
		case <-time.After(30 * time.Second):
			b.Fatalf("the reply never showed")
		}
		expect("› ")
		<-seen
	}
	b.StopTimer()
	n := time.Duration(b.N)
	b.ReportMetric(float64(chat/n)/1e6, "enter-to-char-ms")
	b.ReportMetric(float64(model/n)/1e6, "model-ttft-ms")
	b.ReportMetric(float64((chat-model)/n)/1e6, "added-ms")
}

// chatOn runs a chat command on a terminal, sends one prompt, waits for
// the reply and the turn's end, and leaves with /exit.
func chatOn(t *testing.T, cmd *exec.Cmd, prompt, reply string) {
	t.Helper()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	scr := watchTerminal(tty)
	scr.waitFor(t, "› ")
	tty.Write([]byte(prompt + "\r"))
	scr.waitFor(t, reply)
	scr.waitFor(t, "── idle")
	tty.Write([]byte("/exit\r"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited: %v\n%s", cmd, err, scr)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Errorf("%s did not exit after /exit:\n%s", cmd, scr)
	}
}
