package ansible

// ollie_goal: a session per play run, its goal set and waited for.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ollie/agent/wire"
	"ollie/ns/client"
)

// What the module reads from the daemon is bounded, as fleet's watch.
const (
	maxSmall  = 64 << 10
	maxLog    = 8 << 20
	maxAnswer = 16 << 10
)

// agentName is the run's one agent, as in ollie-remote fleet run.
const agentName = wire.GoalAgent

// GoalResult is ollie_goal's result, the module's JSON.
type GoalResult struct {
	Changed   bool       `json:"changed"`
	Failed    bool       `json:"failed"`
	Msg       string     `json:"msg"`
	Session   string     `json:"session,omitempty"`
	Status    string     `json:"status,omitempty"` // complete, blocked, error, done, timeout
	Answer    string     `json:"answer"`
	Steps     int        `json:"steps"`
	ToolCalls int        `json:"tool_calls"`
	Tokens    int        `json:"tokens"`
	Approvals []Approval `json:"approvals"`
	// Denied are the reasons of the requests the policy denied.
	Denied []string `json:"denied"`
	// Warnings are shown by Ansible after the task.
	Warnings []string `json:"warnings,omitempty"`
}

// RunGoal runs a.Goal in a new session on the daemon c reaches, whose
// namespace directory is nsDir, answering the session's approval
// requests by a.Policy, and waits for it within a.Timeout.
func RunGoal(ctx context.Context, c *client.Conn, nsDir string, a GoalArgs) (res GoalResult) {
	res = GoalResult{Approvals: []Approval{}, Denied: []string{}}
	defer clear(a.BecomePassword)
	if a.CheckMode {
		res.Msg = "check mode: the goal was not run"
		return res
	}
	timeout := time.Duration(a.Timeout) * time.Second
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name := a.RunID
	if name == "" {
		name = "ansible-" + time.Now().UTC().Format("20060102-150405") + "-" + randomHex(3)
	}
	res.Session = name
	fail := func(format string, args ...any) GoalResult {
		res.Failed, res.Msg = true, fmt.Sprintf(format, args...)
		return res
	}
	dir := "session/" + name + "/"
	agentDir := dir + "agent/" + agentName + "/"
	if _, err := c.RdWr(ctx, "session/new", []byte("name="+name)); err != nil {
		return fail("ollie_goal: making session %s: %v", name, err)
	}
	res.Changed = true
	id, err := c.ReadLimit(ctx, dir+"id", maxSmall)
	if err != nil {
		return fail("ollie_goal: session %s: %v", name, err)
	}

	ap := &Broker{Policy: a.Policy, Session: strings.TrimSpace(string(id)), Password: a.BecomePassword}
	unregister, err := register(ctx, c, nsDir, ap)
	if err != nil {
		return fail("ollie_goal: serving approvals: %v", err)
	}
	defer func() {
		unregister()
		res.Approvals = ap.Approvals()
		for _, x := range res.Approvals {
			if x.Decision == "deny" {
				res.Denied = append(res.Denied, x.Reason)
			}
		}
	}()

	if _, err := c.RdWr(ctx, dir+"agent/new", []byte(wire.NewAgent(agentName, a.Profile, a.Model))); err != nil {
		return fail("ollie_goal: making its agent: %v", err)
	}
	if err := c.Write(ctx, dir+"goal", []byte(a.Goal)); err != nil {
		return fail("ollie_goal: setting the goal: %v", err)
	}
	status, st, err := wait(ctx, c, dir, agentDir)
	res.Status = status
	res.Steps, res.ToolCalls, res.Tokens = st.Steps, st.ToolCalls, st.PromptTokens+st.CompletionTokens
	if err != nil {
		if ctx.Err() != nil {
			res.Status = "timeout"
			// Stop the agent: a play's goal does not outlive its task.
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			c.RdWr(sctx, agentDir+"ctl", []byte("stop"))
			scancel()
			return fail("ollie_goal: the goal did not end within %s; its agent was stopped", timeout)
		}
		return fail("ollie_goal: watching the agent: %v", err)
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	res.Answer = lastAnswer(actx, c, agentDir+"log")
	acancel()
	switch status {
	case "error":
		msg := "the goal ended in an error"
		if st.LastError != "" {
			msg += ": " + st.LastError
		}
		return fail("ollie_goal: %s", msg)
	case "blocked":
		return fail("ollie_goal: the agent reports the goal blocked: %s", res.Answer)
	}
	res.Msg = "goal " + status
	return res
}

// wait follows the agent until its goal is complete, blocked or failed,
// or it went idle after working (done, or error with a last error).
func wait(ctx context.Context, c *client.Conn, dir, agentDir string) (string, wire.Stats, error) {
	busy := false
	var st wire.Stats
	for {
		b, err := c.ReadLimit(ctx, agentDir+"stats", maxSmall)
		if err != nil {
			return "", st, err
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return "", st, fmt.Errorf("%sstats: %w", agentDir, err)
		}
		g, err := c.ReadLimit(ctx, dir+"goalstatus", maxSmall)
		if err != nil {
			return "", st, err
		}
		goal := strings.TrimSpace(string(g))
		working := st.State == wire.StateThinking || st.State == wire.StateCalling || st.Queued > 0
		busy = busy || working || st.Turns > 0
		switch {
		case goal == "complete" || goal == "blocked" || goal == "error":
			return goal, st, nil
		case busy && !working && st.State != wire.StatePaused:
			if st.LastError != "" {
				return "error", st, nil
			}
			return "done", st, nil
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		c.ReadLimit(wctx, agentDir+"statewait", maxSmall)
		wcancel()
		if ctx.Err() != nil {
			return "", st, ctx.Err()
		}
	}
}

// register listens on a fresh broker-* socket in the namespace directory
// (where the gate sweeps one nobody listens on) and registers it in
// bypass/broker. The returned func unregisters it and stops serving.
func register(ctx context.Context, c *client.Conn, nsDir string, ap *Broker) (func(), error) {
	path := filepath.Join(nsDir, "broker-"+randomHex(8))
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	os.Chmod(path, 0600)
	ap.Key = make([]byte, 32)
	rand.Read(ap.Key)
	go ap.Serve(l)
	if err := c.Write(ctx, "bypass/broker", []byte(path+" key="+hex.EncodeToString(ap.Key))); err != nil {
		l.Close()
		os.Remove(path)
		return nil, fmt.Errorf("registering %s: %w", path, err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.Write(uctx, "bypass/broker", []byte("-"+path))
		cancel()
		l.Close()
		ap.Close()
		os.Remove(path)
	}, nil
}

// lastAnswer is the agent's last message with text, from its log.
func lastAnswer(ctx context.Context, c *client.Conn, name string) string {
	b, err := c.ReadLimit(ctx, name, maxLog)
	if err != nil {
		return ""
	}
	return wire.LastAnswer(b, maxAnswer)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
