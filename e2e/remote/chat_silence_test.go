package remote

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"ollie/agent/fakellm"
	"ollie/internal/await"
	"ollie/internal/nstest"
)

// TestChatOutlastsSilence (issue 30): through the keeper's tunnel, ollie
// chat and ollie read of the agent's chat stay attached through a
// silence many times OLLIE_TIMEOUT (here 1 s; the reply's text comes
// after 4 s and its end 8 s later, as a long tool call's result would)
// and show what comes after it: the
// time-out bounds what a person waits on, never a stream followed.
func TestChatOutlastsSilence(t *testing.T) {
	t.Parallel() // its own lab users, keeper and model: it waits more than it works
	r, _, llm := modelHost(t, "orquiet")
	r.must("up", "h11")
	ollie := filepath.Join(binDir, "olliesrv")
	env := append(os.Environ(), "OLLIE_REMOTE_DIR="+r.dir, "NO_COLOR=1", "OLLIE_TIMEOUT=1s")
	dir := filepath.Join(t.TempDir(), "quiet") // the chat's session is named after it
	os.Mkdir(dir, 0755)

	desk := exec.Command(ollie, "ollie", "-H", "h11", "chat")
	desk.Env, desk.Dir = env, dir
	tty, err := pty.StartWithSize(desk, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close(); desk.Process.Kill(); desk.Wait() })
	scr := watchTerminal(tty)
	scr.waitFor(t, "› ")

	read := exec.Command(ollie, "ollie", "-H", "h11", "read", "session/quiet/agent/chat/chat")
	read.Env = env
	var readOut nstest.SyncBuffer
	read.Stdout, read.Stderr = &readOut, &readOut
	if err := read.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { read.Process.Kill(); read.Wait() })

	llm.Push(fakellm.Response{Text: []string{"after the silence"}, Delay: 4 * time.Second}) // before each chunk: the text, the end, the usage
	tty.Write([]byte("take your time\r"))
	scr.waitFor(t, "take your time")
	scr.waitFor(t, "after the silence")
	scr.waitFor(t, "── idle")
	await.Until(t, 10*time.Second, "ollie read of the chat did not outlast the silence", func() bool {
		return strings.Contains(readOut.String(), "after the silence")
	}, readOut.String)
	if s := scr.String() + readOut.String(); strings.Contains(s, "no answer from") {
		t.Errorf("a time-out cut a stream short:\n%s", s)
	}
}
