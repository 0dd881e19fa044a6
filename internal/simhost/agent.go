package simhost

// A simulated agent: it takes prompts in turn and answers each at once
// (Options.Answer), keeping what the real agent's files show of a turn:
// its chat stream (the prompt echoed, then the reply), its log (one JSON
// message a line), its state and its stats. It has no model and runs no
// tools, so it counts one step and no tokens a turn.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"ollie/agent/wire"
	"ollie/internal/changes"
	"ollie/ns"
	"ollie/ns/stream"
)

// What an agent keeps is bounded, whoever writes its prompts.
const (
	maxQueued  = 64
	chatRetain = 64 << 10
	maxLog     = 64 << 10
)

type agent struct {
	id, name string
	d        *daemon
	s        *session
	chat     *stream.Stream
	changed  changes.Counter // bumped at each change of state

	mu    sync.Mutex
	state string
	queue []string
	stats wire.Stats
	log   []byte // JSON lines, the oldest cut past maxLog
}

func newAgent(d *daemon, s *session, name string) *agent {
	a := &agent{id: newID(), name: name, d: d, s: s, chat: stream.NewStream(chatRetain), state: wire.StateIdle}
	if a.name == "" {
		a.name = a.id[:8]
	}
	return a
}

// newID is a fresh 128-bit ID in hex, as immutable as the real UUIDs.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// agentSpec declares an agent's files.
func (d *daemon) agentSpec() []*ns.Node {
	read := func(f func(a *agent) string) func(context.Context, *ns.Call) ([]byte, error) {
		return func(ctx context.Context, c *ns.Call) ([]byte, error) {
			a, err := d.agentOf(c)
			if err != nil {
				return nil, err
			}
			return []byte(f(a)), nil
		}
	}
	return []*ns.Node{
		ns.WriteFile("prompt", 0220, "Queue a user turn: each write is one prompt.", func(ctx context.Context, c *ns.Call, data []byte) error {
			a, err := d.agentOf(c)
			if err != nil {
				return err
			}
			return a.submit(string(data))
		}),
		ns.StreamFile("chat", 0440, "The conversation as it happens: prompts and replies.", func(ctx context.Context, c *ns.Call) (*stream.Stream, error) {
			a, err := d.agentOf(c)
			if err != nil {
				return nil, err
			}
			return a.chat, nil
		}),
		ns.ReadFile("state", 0444, "idle, thinking or closed.", read(func(a *agent) string { return a.stateNow() + "\n" })),
		ns.WaitFile("statewait", 0444, "Blocks until the state changes, then reads the new state.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
			a, err := d.agentOf(c)
			if err != nil {
				return nil, err
			}
			if _, err := a.changed.Wait(ctx, a.changed.Load()); err != nil {
				return nil, err
			}
			return []byte(a.stateNow() + "\n"), nil
		}),
		ns.ReadFile("log", 0440, "The conversation so far, one JSON message per line.", read(func(a *agent) string {
			a.mu.Lock()
			defer a.mu.Unlock()
			return string(a.log)
		})),
		ns.ReadFile("stats", 0444, "Turns, steps and state, as JSON (agent/wire.Stats).", read((*agent).statsJSON)),
		ns.RdWrFile("ctl", 0660, "Agent controls: stop.", func(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
			a, err := d.agentOf(c)
			if err != nil {
				return nil, err
			}
			if cmd := strings.TrimSpace(string(req)); cmd != "stop" {
				return nil, fmt.Errorf("%s: unknown command %q (valid: stop)", c.Path(), cmd)
			}
			a.mu.Lock()
			a.queue = nil
			a.mu.Unlock()
			return []byte("ok\n"), nil
		}),
	}
}

func (a *agent) stateNow() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// changedTo tells statewait that the state changed to st, and publishes
// it, as the real agent does.
func (a *agent) changedTo(st string) {
	a.changed.Bump()
	a.d.bus.Publish("session."+a.s.id+".agent."+a.id+".state", st)
}

// submit queues a prompt; an idle agent starts on it at once.
func (a *agent) submit(prompt string) error {
	a.mu.Lock()
	if len(a.queue) >= maxQueued {
		a.mu.Unlock()
		return errQueueFull
	}
	a.queue = append(a.queue, prompt)
	start := a.state == wire.StateIdle
	if start {
		a.state = wire.StateThinking
	}
	a.mu.Unlock()
	if start {
		a.changedTo(wire.StateThinking)
		go a.work()
	}
	return nil
}

// work runs the queued prompts in turn, then goes idle.
func (a *agent) work() {
	for {
		a.mu.Lock()
		if len(a.queue) == 0 {
			a.state = wire.StateIdle
			a.mu.Unlock()
			a.changedTo(wire.StateIdle)
			return
		}
		prompt := a.queue[0]
		a.queue = a.queue[1:]
		a.mu.Unlock()
		a.turn(prompt)
	}
}

// turn answers one prompt.
func (a *agent) turn(prompt string) {
	answer := a.d.h.Name + ": all is well"
	if f := a.d.h.f.opts.Answer; f != nil {
		answer = f(a.d.h.Name, prompt)
	}
	a.chat.Write([]byte(prompt + "\n"))
	a.chat.Write([]byte(answer + "\n"))
	var lines []byte
	for _, m := range []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}{{"user", prompt}, {"assistant", answer}} {
		b, _ := json.Marshal(m)
		lines = append(append(lines, b...), '\n')
	}
	a.mu.Lock()
	a.log = append(a.log, lines...)
	if over := len(a.log) - maxLog; over > 0 {
		// Whole lines only: cut past the first newline after over.
		if i := strings.IndexByte(string(a.log[over:]), '\n'); i >= 0 {
			a.log = append([]byte(nil), a.log[over+i+1:]...)
		} else {
			a.log = nil
		}
	}
	a.stats.Turns++
	a.stats.Steps++
	a.stats.Messages += 2
	a.mu.Unlock()
}
