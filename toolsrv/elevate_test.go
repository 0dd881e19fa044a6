package toolsrv

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ollie/broker/gate"
)

// TestApprovalNamesAgentAtGate: a call's approval request, as the host's
// gate receives it and as bypass/pending/{id} shows it, names the agent
// the call runs for, by name and ID, and its session likewise, in the
// foreground and in the background; a call for no agent names none.
func TestApprovalNamesAgentAtGate(t *testing.T) {
	r, cwd := runner(t, map[string][2]string{
		"priv": {`{"description": "Needs elevation.", "elevated": true}`, "#!/bin/sh\necho ran\n"},
	})
	g := gate.New(nil)
	parked := make(chan string, 8) // Publish runs under the gate's lock
	g.Publish = func(topic, data string) {
		if topic == "bypass.pending" {
			id, _, _ := strings.Cut(data, " ")
			parked <- id
		}
	}
	dir, err := os.MkdirTemp("", "gate") // short: a socket's path has 108 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "elevate")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(func() { g.Shutdown(context.Background()) })
	r.Approver, r.SessionID = GateApprover{Socket: sock}, "sess-1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// next waits for the next parked request and checks who it names.
	next := func(how, agent, agentName, line string) string {
		t.Helper()
		var id string
		select {
		case id = <-parked:
		case <-ctx.Done():
			t.Fatalf("%s: no request was parked at the gate", how)
		}
		req, ok := g.PendingRequest(id)
		if !ok {
			t.Fatalf("%s: request %s is not pending", how, id)
		}
		if req.Session != "sess-1" || req.SessionName != "web" || req.Agent != agent || req.AgentName != agentName || req.Tool != "priv" || req.Cwd != cwd {
			t.Errorf("%s: the gate got %+v, want session web (sess-1), agent %q (%q), tool priv in %s", how, req, agentName, agent, cwd)
		}
		if p := req.Prompt(); !strings.Contains(p, "\n    session:  "+line+"\n") {
			t.Errorf("%s: bypass/pending/%s does not say %q:\n%s", how, id, line, p)
		}
		return id
	}

	ran := make(chan string, 1)
	go func() {
		res := r.RunFor(ctx, Caller{Agent: "agent-7", SessionName: "web", AgentName: "fixer"}, "priv", nil)
		ran <- res.Output
	}()
	id := next("RunFor", "agent-7", "fixer", `"web" ("sess-1"), agent "fixer" ("agent-7")`)
	if err := g.Decide(id, "approve"); err != nil {
		t.Fatal(err)
	}
	if out := <-ran; out != "ran\n" {
		t.Errorf("RunFor after approve: %q", out)
	}

	ps := &Procs{Runner: r}
	defer ps.Close()
	started := make(chan error, 1)
	go func() {
		_, err := ps.StartFor(ctx, Caller{Agent: "agent-8", SessionName: "web", AgentName: "scout"}, "priv", nil)
		started <- err
	}()
	id = next("StartFor", "agent-8", "scout", `"web" ("sess-1"), agent "scout" ("agent-8")`)
	if err := g.Decide(id, "deny not now"); err != nil {
		t.Fatal(err)
	}
	if err := <-started; !errors.Is(err, ErrNotApproved) || !strings.Contains(err.Error(), "priv was denied: not now") {
		t.Errorf("StartFor after deny: %v", err)
	}

	// A call for no agent: the session's, as olliesrv's own are.
	go func() {
		res := r.RunFor(ctx, Caller{SessionName: "web"}, "priv", nil)
		ran <- res.Output
	}()
	id = next("no agent", "", "", `"web" ("sess-1"), no agent: called through the session's tools`)
	g.Decide(id, "deny")
	<-ran
}
