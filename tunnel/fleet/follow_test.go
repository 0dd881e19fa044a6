package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ollie/agent/backend"
	"ollie/agent/fakellm"
	"ollie/agent/wire"
	"ollie/host"
	"ollie/internal/await"
	"ollie/internal/nstest"
	"ollie/ns/client"
)

// details records each detail a host shows, and every line of output.
type details struct {
	mu     sync.Mutex
	seen   []string
	output []string
}

func (d *details) Changed(h Host) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.Detail != "" && (len(d.seen) == 0 || d.seen[len(d.seen)-1] != h.Detail) {
		d.seen = append(d.seen, h.Detail)
	}
}

func (d *details) Output(_, line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.output = append(d.output, line)
}

// saw says whether a line of output held part.
func (d *details) saw(part string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.ContainsFunc(d.output, func(l string) bool { return strings.Contains(l, part) })
}

func (d *details) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.seen...)
}

// TestFollowShowsHostsOwnLine (issue 31, item 6): while a host's agent
// works on the goal, the live view's line for it is the agent's own
// latest line, never the goal's instruction the chat echoes back.
func TestFollowShowsHostsOwnLine(t *testing.T) {
	llm := fakellm.Start(t)
	release := make(chan struct{})
	llm.Respond(func(*fakellm.ChatRequest) fakellm.Response {
		<-release
		return fakellm.Text("the disks are fine: / is 40% used")
	})
	env := map[string]string{"OPENAI_BASE_URL": llm.URL + "/v1", "OPENAI_API_KEY": "k", "OPENAI_MODEL": "fake-model", "XDG_CONFIG_HOME": t.TempDir()}
	reg, err := backend.LoadEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	data, _ := filepath.Abs("../../data")
	t.Setenv("OLLIE_DATA", data)
	t.Setenv("OLLIE_TOOLS_PATH", t.TempDir())
	d, err := host.Start(host.Config{StateDir: t.TempDir(), Dir: nstest.ShortTempDir(t), Registry: reg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })

	run := &Run{ID: "r1", Session: "fleet-r1", Goal: "check disks", Hosts: []*Host{{Name: "web1"}}}
	obs := &details{}
	r := &Runner{Run: run, Obs: obs}
	c, err := client.DialAs(d.Socket, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess := "session/" + run.Session
	for _, s := range []struct{ file, req string }{{"session/new", "name=" + run.Session}, {sess + "/agent/new", wire.NewAgent(agentName, "", "")}} {
		if _, err := c.RdWr(ctx, s.file, []byte(s.req)); err != nil {
			t.Fatal(err)
		}
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.follow(fctx, run.Hosts[0], d.Socket, sess+"/agent/"+agentName+"/chat", true)
	}()
	if err := c.Write(ctx, sess+"/goal", []byte(run.Goal)); err != nil {
		t.Fatal(err)
	}
	// The model holds its answer until the follower has read the echo of
	// the prompt, to its last line.
	await.Until(t, 30*time.Second, "the follower reading the prompt's echo", func() bool { return obs.saw("Work towards it") })
	close(release)
	await.Until(t, 30*time.Second, "the host's answer becoming its line",
		func() bool { return slices.Contains(obs.all(), "the disks are fine: / is 40% used") },
		func() string { return fmt.Sprintf("lines %q", obs.all()) })
	stop()
	<-done
	for _, l := range obs.all() {
		if strings.Contains(l, "goal") || strings.Contains(l, "Work towards it") || l == run.Goal {
			t.Errorf("the host's line showed the run's instruction: %q (all: %q)", l, obs.all())
		}
	}
}
