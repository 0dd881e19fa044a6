package simhost

// The simulated daemon: a namespace with the files ollie-remote reads and
// writes (status, event, bypass/broker, session/new, a session's goal and
// its agents' files), in the real daemon's words and formats (agent/wire),
// served by the real 9P server. Its approval gate is the real one
// (broker/gate); its agents answer each prompt at once, without a model
// or tools. Nothing is kept on disk: a stop forgets the sessions.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"ollie/agent/wire"
	"ollie/broker/gate"
	"ollie/ns"
	"ollie/ns/words"
)

// What one client can make a host hold is bounded.
const (
	maxSessions = 64
	maxAgents   = 8 // per session
)

// daemon is the namespace of a host whose olliesrv runs.
type daemon struct {
	h       *Host
	started time.Time
	bus     *ns.Bus
	gate    *gate.Gate
	srv     *ns.Server

	mu       sync.Mutex
	sessions []*session
}

// startDaemon starts the host's namespace unless it runs, and reports
// whether it started one.
func (h *Host) startDaemon() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.daemon != nil || h.closing {
		return false
	}
	d := &daemon{h: h, started: time.Now(), bus: &ns.Bus{}}
	d.gate = gate.New(slog.New(slog.DiscardHandler))
	d.gate.Publish = d.bus.Publish
	// Dir stays "": the real daemon's gate sweeps dead broker sockets
	// from its directory by reading /proc/net/unix at each registration,
	// which here would read every simulated host's sockets, a thousand
	// times over, where a real host reads its own.
	tree, err := ns.NewTree(d.spec(), "admin", "admin")
	if err != nil {
		// The tree is declared here: a bad one is this package's bug.
		panic("simhost: " + err.Error())
	}
	d.srv = &ns.Server{Tree: tree, Log: slog.New(slog.DiscardHandler)}
	h.daemon = d
	return true
}

// shutdown ends every connection and the gate.
func (d *daemon) shutdown(ctx context.Context) {
	d.srv.Shutdown(ctx)
	d.gate.Shutdown(ctx)
}

// spec declares the namespace, a subset of the real one (package host).
func (d *daemon) spec() *ns.Node {
	sessions := ns.Listing(func(context.Context, *ns.Call) ([]*session, error) { return d.list(), nil },
		func(s *session) ns.Entry { return ns.Entry{Name: s.name, Key: s.id} })
	agents := ns.Listing(d.agentsOf, func(a *agent) ns.Entry { return ns.Entry{Name: a.name, Key: a.id} })
	return ns.Dir("", 0555, "",
		ns.ReadFile("status", 0444, "The daemon: version, pid, started, uptime, sessions, agents; one 'key value' a line.", d.status),
		&ns.Node{Name: "event", Mode: 0666, Subscribe: d.subscribe, Doc: "Server events as 'topic payload' lines."},
		ns.Dir("bypass", 0555, "Approvals of sandbox escapes and sudo.",
			&ns.Node{Name: "broker", Mode: 0600, Read: d.brokers, Write: d.setBrokers,
				Doc: "Sockets leading to desktop brokers, newest first: write PATH [key=HEX] to register one, -PATH to remove it."}),
		ns.Dir("session", 0555, "Session collection.",
			ns.RdWrFile("new", 0666, "Create a session: write 'name=X'; read the name.", d.newSession),
			ns.Dynamic("sname", 0555, "A session, by name or by ID.", sessions,
				&ns.Node{Name: "goal", Mode: 0644, Read: d.inSession(func(s *session) string { g, _ := s.goalNow(); return g }),
					Write: d.setGoal, Doc: "The session's goal: writing it gives it to the session's first agent."},
				ns.ReadFile("goalstatus", 0444, "Goal status.", d.inSession(func(s *session) string { _, st := s.goalNow(); return st + "\n" })),
				ns.Dir("agent", 0555, "Agents in the session.",
					ns.RdWrFile("new", 0666, "Create an agent: write 'name=X [profile=P] [model=M]'; read its name.", d.newAgent),
					ns.Dynamic("aname", 0555, "An agent, by name or by ID.", agents, d.agentSpec()...)))))
}

func (d *daemon) status(ctx context.Context, c *ns.Call) ([]byte, error) {
	sessions := d.list()
	agents := 0
	for _, s := range sessions {
		agents += len(s.agentList())
	}
	return fmt.Appendf(nil, "version %s\npid %d\nstarted %s\nuptime %d\nsessions %d\nagents %d\nyolo 0\ndamaged 0\nprotection none: a simulated host runs no tools\n",
		d.h.f.version, os.Getpid(), d.started.UTC().Format(time.RFC3339Nano), int64(time.Since(d.started).Seconds()), len(sessions), agents), nil
}

// subscribe serves event: the filter is whitespace-separated topic
// patterns; none means every event.
func (d *daemon) subscribe(ctx context.Context, c *ns.Call, filter []byte) (ns.Source, error) {
	patterns := strings.Fields(string(filter))
	for _, p := range patterns {
		if strings.Contains(p, "..") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") {
			return nil, fmt.Errorf("event: bad pattern %q: use dotted topics such as session.* or *", p)
		}
	}
	return d.bus.Subscribe(patterns...), nil
}

func (d *daemon) brokers(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, p := range d.gate.Brokers() {
		b.WriteString(p + "\n")
	}
	return []byte(b.String()), nil
}

// setBrokers takes a line per change, as the real bypass/broker does:
// PATH [key=HEX] registers a socket with the gate, -PATH removes it.
func (d *daemon) setBrokers(ctx context.Context, c *ns.Call, data []byte) error {
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if p, ok := strings.CutPrefix(l, "-"); ok {
			d.gate.Unregister(p)
			continue
		}
		path, h, _ := strings.Cut(strings.TrimPrefix(l, "+"), " key=")
		key, err := hex.DecodeString(h)
		if err != nil || h != "" && (len(h) < 32 || len(h) > 128) {
			return fmt.Errorf("%s: the key of %s is not 32 to 128 hex digits", c.Path(), path)
		}
		if err := d.gate.RegisterKeyed(path, key); err != nil {
			return fmt.Errorf("%s: %w", c.Path(), err)
		}
	}
	return nil
}

// session is one session: its goal and its agents.
type session struct {
	id, name string

	mu     sync.Mutex
	goal   string
	status string // the goal's: none, running, complete, blocked
	agents []*agent
}

func (s *session) goalNow() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.goal, s.status
}

func (s *session) agentList() []*agent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*agent(nil), s.agents...)
}

func (d *daemon) list() []*session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*session(nil), d.sessions...)
}

// sessionOf is the session the call is under.
func (d *daemon) sessionOf(c *ns.Call) (*session, error) {
	id := c.Key("sname")
	for _, s := range d.list() {
		if s.id == id {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s: session %s no longer exists", c.Path(), id)
}

func (d *daemon) inSession(f func(*session) string) func(context.Context, *ns.Call) ([]byte, error) {
	return func(ctx context.Context, c *ns.Call) ([]byte, error) {
		s, err := d.sessionOf(c)
		if err != nil {
			return nil, err
		}
		return []byte(f(s)), nil
	}
}

// keyValues reads a request of key=value words, the keys among keys.
func keyValues(req string, keys ...string) (map[string]string, error) {
	ws, err := words.Split(req)
	if err != nil {
		return nil, err
	}
	kv := map[string]string{}
	for _, w := range ws {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !contains(keys, k) {
			return nil, fmt.Errorf("%q is not KEY=VALUE with a key a simulated host takes (%s)", w, strings.Join(keys, ", "))
		}
		kv[k] = v
	}
	return kv, nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func (d *daemon) newSession(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	kv, err := keyValues(string(req), "name")
	if err != nil {
		return nil, fmt.Errorf("session/new: %w", err)
	}
	s := &session{id: newID(), name: kv["name"], status: "none"}
	if s.name == "" {
		s.name = s.id[:8]
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.sessions) >= maxSessions {
		return nil, fmt.Errorf("session/new: a simulated host holds %d sessions at most", maxSessions)
	}
	for _, o := range d.sessions {
		if o.name == s.name {
			return nil, fmt.Errorf("session/new: the name %q is taken", s.name)
		}
	}
	d.sessions = append(d.sessions, s)
	return []byte(s.name + "\n"), nil
}

func (d *daemon) newAgent(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	s, err := d.sessionOf(c)
	if err != nil {
		return nil, err
	}
	kv, err := keyValues(string(req), "name", "profile", "model")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path(), err)
	}
	a := newAgent(d, s, kv["name"])
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.agents) >= maxAgents {
		return nil, fmt.Errorf("%s: a simulated session holds %d agents at most", c.Path(), maxAgents)
	}
	for _, o := range s.agents {
		if o.name == a.name {
			return nil, fmt.Errorf("%s: the name %q is taken", c.Path(), a.name)
		}
	}
	s.agents = append(s.agents, a)
	return []byte(a.name + "\n"), nil
}

// setGoal records the goal and gives it to the session's first agent, as
// the real session's goal file does.
func (d *daemon) setGoal(ctx context.Context, c *ns.Call, data []byte) error {
	s, err := d.sessionOf(c)
	if err != nil {
		return err
	}
	goal := strings.TrimSpace(string(data))
	if goal == "" {
		return fmt.Errorf("%s: empty goal", c.Path())
	}
	agents := s.agentList()
	s.mu.Lock()
	s.goal, s.status = goal, "running"
	if len(agents) == 0 {
		s.status = "blocked"
	}
	status := s.status
	s.mu.Unlock()
	d.bus.Publish("session."+s.id+".goalstatus", status)
	if len(agents) == 0 {
		return fmt.Errorf("%s: the goal is recorded but blocked: the session has no agent to work on it (create one with agent/new)", c.Path())
	}
	return agents[0].submit(wire.GoalPrompt(goal, s.name))
}

// agentsOf lists the agents of the session the call is under.
func (d *daemon) agentsOf(ctx context.Context, c *ns.Call) ([]*agent, error) {
	s, err := d.sessionOf(c)
	if err != nil {
		return nil, err
	}
	return s.agentList(), nil
}

// agentOf is the agent the call is under.
func (d *daemon) agentOf(c *ns.Call) (*agent, error) {
	s, err := d.sessionOf(c)
	if err != nil {
		return nil, err
	}
	id := c.Key("aname")
	for _, a := range s.agentList() {
		if a.id == id {
			return a, nil
		}
	}
	return nil, fmt.Errorf("%s: agent %s no longer exists", c.Path(), id)
}

// stats is the agent's stats file, as JSON.
func (a *agent) statsJSON() string {
	a.mu.Lock()
	st := a.stats
	st.State, st.Queued = a.state, len(a.queue)
	a.mu.Unlock()
	b, _ := json.Marshal(st)
	return string(b) + "\n"
}

// errQueueFull refuses a prompt past maxQueued.
var errQueueFull = errors.New("the agent's queue is full")
