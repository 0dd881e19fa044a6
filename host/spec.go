// Package host is the host's namespace: the files of /, session/,
// session/S/agent/, bypass/ and their handlers, over the sessions and agents
// of package agent, the tools of toolsrv and the approval gate of broker,
// and the daemon that serves them (Start). It trusts the peer kind ns
// proved for each connection and nothing a client writes.
package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/broker"
	"ollie/broker/gate"
	"ollie/internal/paths"
	"ollie/ns"
	"ollie/toolsrv"
	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
)

// namespace is the state the root namespace serves.
type namespace struct {
	log    *slog.Logger
	logs   *sessionLogs
	tools  *toolsrv.Pool
	agents *agents
	// bmu guards backends and registry, which ctl invalidate replaces
	// when loadBackends is set.
	bmu          sync.Mutex
	backends     func(name string) (backend.Backend, error) // nil: none configured
	registry     *backend.Registry                          // may be nil
	loadBackends func() (*backend.Registry, error)
	// seenFiles is what the backends files were (size and time) when
	// they were last read: an edit is read at the next use, without ctl
	// invalidate; a bad one is logged once and the old backends kept.
	seenFiles string
	bus       *ns.Bus
	sessions  *agent.Sessions
	host      string
	kill      func() // asks the daemon to shut down
	tree      *ns.Tree
	version   string // this binary's, for status and env
	started   time.Time
	gate      *gate.Gate
	always    string // where "always" answers through bypass/pending are kept; "": not kept
}

// spec declares the namespace. Every file is one line; help is generated
// from this declaration.
func (n *namespace) spec() *ns.Node {
	sessions := ns.Listing(func(context.Context, *ns.Call) ([]*agent.Session, error) { return n.sessions.List(), nil }, sessionEntry)
	return ns.Dir("", 0555, "",
		ns.ReadFile("help", 0444, "Generated filesystem reference.", n.help),
		ns.ReadFile("status", 0444, "The daemon: version, pid, started (RFC 3339), uptime (seconds), sessions, agents, yolo (sessions whose tools run unsandboxed and without approval), damaged (session files not restored), damaged_files (their names, when any) and protection (how tools are kept from the paths that decide their power: read-only mounts per call, or refusing); one 'key value' a line.", n.status),
		ns.ReadFile("backends", 0444, "Model backends: name<TAB>type<TAB>url<TAB>default model; the default first. The ollama no one configured (no OLLAMA_HOST, not in backends.json) has a fifth field, (not configured: …), while no Ollama answers at its default address.", n.backendList),
		ns.ReadFile("models", 0444, "Models of every backend: backend<TAB>model<TAB>the context window an agent gets, e.g. ctx=32768 (num_ctx set by ollie), or ctx=? (for Ollama, from Ollama itself); a backend that does not answer is backend<TAB>(unavailable: why), and the ollama no one configured, while no Ollama answers at its default address, ollama<TAB>(not configured: …).", n.modelList),
		ns.ReadFile("agents", 0444, "Agent profiles: name<TAB>description.", n.agentProfiles),
		ns.ReadFile("tools", 0444, "Tools this host offers: name<TAB>description (variants resolved here).", n.hostTools),
		ns.ReadFile("skills", 0444, "Skills found on this host: name<TAB>offered, skipped, broken or shadowed<TAB>why (the conditions checked, the error, or the file that wins)<TAB>description.", n.hostSkillList),
		ns.ReadFile("toolerrors", 0444, "Tool declarations that failed to load, and why.", n.toolErrors),
		ns.RdWrFile("generate", 0666, `One-shot generation: write a prompt (or {"prompt", "system", "model", "backend"} as JSON); read the reply.`, n.generate),
		ns.ReadFile("aliases", 0444, "Stable ID-to-path mappings: id<TAB>path.", n.aliases),
		ns.RdWrFile("ctl", 0600, "Server controls: "+strings.Join(rootCommands, ", ")+". desktop-key PATH HEX gives the key (32 to 128 hex digits) that requests to the socket backend at PATH carry, which the desktop's model on that socket asks for (ollie-remote up -model-via desktop gives it on every connection); it is kept in this daemon's memory only.", n.ctl),
		&ns.Node{Name: "event", Mode: 0666, Subscribe: n.subscribe,
			Doc: "Server events as 'topic payload' lines: read blocks for the next events; write patterns, then read them as they come."},
		ns.Dir("bypass", 0555, "Approvals of sandbox escapes (elevated, bypass) and sudo.",
			&ns.Node{Name: "policy", Mode: 0644, Read: n.bypassPolicy, Write: n.setBypassPolicy,
				Doc: "What happens while no desktop broker is connected: nobroker=pending (wait here) or deny; timeout=DURATION for any answer; yolo=allow (default: the admin may create yolo sessions, a connected desktop asked first) or deny."},
			&ns.Node{Name: "broker", Mode: 0600, Read: n.bypassBroker, Write: n.setBypassBroker,
				Doc: "Sockets leading to desktop brokers, newest first (the gate asks the newest that answers): write PATH to register one (ollie-remote up registers one per SSH connection), -PATH to remove it."},
			ns.Dir("pending", 0555, "Requests waiting for someone while no broker is connected: a decision, or, for sudo approved here, the password.",
				ns.DynamicFile("id", 0400, "A pending request: read it (who asks for what, and what it waits for); write approve, always or deny [REASON]. A sudo request so approved stays, waiting for sudo to ask for the password: write 'password SECRET' (the rest of the line; not echoed anywhere, handed to sudo only), again if it was wrong (it says so), or deny. Only the admin writes it; the agent that asked, its owner, reads it too, and no other agent.",
					ns.Listing(func(context.Context, *ns.Call) ([]*broker.Request, error) { return n.gate.Pending(), nil }, n.pendingEntry),
					&ns.Node{Read: n.readPending, Write: n.decidePending}),
			),
		),
		ns.Dir("session", 0555, "Session collection.",
			ns.RdWrFile("new", 0666, "Create a session: write 'name=X [cwd=DIR] [yolo=true]' (quote a value with spaces as a shell does: cwd='/home/me/my project'); read the name. cwd defaults to the home directory of olliesrv's user for that user, and to the agent's own directory for an agent (whose session must lie inside it). yolo=true (the admin only, as bypass/policy and a connected desktop allow): every tool runs unsandboxed and without approval.", n.newSession),
			ns.ReadFile("idx", 0444, "Session index: id<TAB>name<TAB>paused<TAB>connected<TAB>remote<TAB>cwd<TAB>state (ok; unwritable while its file takes no writes; damaged, newer or locked for a file found at start and not served)<TAB>yolo (yolo: tools unsandboxed and without approval; else -).", n.sessionIdx),
			ns.Dynamic("sname", 0555, "A session, by name or by ID (an invisible alias).", sessions,
				ns.ReadFile("id", 0444, "Immutable session UUID.", n.sessionRead(sessionID)),
				&ns.Node{Name: "name", Mode: 0644, Read: n.sessionRead(sessionName), Write: n.renameSession,
					Doc: "Mutable display name: write to rename."},
				ns.ReadFile("env", 0444, "Session environment and runtime variables (OLLIE_YOLO=1 and OLLIE_SANDBOX=NONE for a yolo session).", n.sessionRead(n.sessionEnv)),
				ns.ReadFile("paused", 0444, "Pause state: true or false.", n.sessionRead(sessionPaused)),
				&ns.Node{Name: "goal", Mode: 0644, Read: n.sessionRead(func(s *agent.Session) string { g, _ := s.Goal(); return g }),
					Write: n.setGoal, Doc: "The session's goal: writing it sets the status to running and gives it to the session's first agent. Only the session's owner may write it: it is a prompt to an agent, which its fellow agents may not give (they write goalstatus)."},
				&ns.Node{Name: "goalstatus", Mode: 0664, Read: n.sessionRead(func(s *agent.Session) string { _, st := s.Goal(); return st + "\n" }),
					Write: n.setGoalStatus, Doc: "Goal status: " + strings.Join(agent.GoalStatuses, ", ") + "."},
				ns.WaitFile("goalwait", 0444, "Blocks until the goal status changes, then reads the new status.", n.goalWait),
				ns.RdWrFile("ctl", 0600, "Session controls: "+strings.Join(sessionCommands, ", ")+".", n.sessionCtl),
				ns.ReadFile("tools", 0444, "Tools loaded in the session's toolsrv: name<TAB>description.", n.sessionTools),
				n.agentSpec(),
			),
		),
	)
}

func (n *namespace) status(ctx context.Context, c *ns.Call) ([]byte, error) {
	agents, yolo := 0, 0
	sessions := n.sessions.List()
	for _, s := range sessions {
		agents += len(n.agents.of(s.ID))
		if s.Yolo {
			yolo++
		}
	}
	out := fmt.Appendf(nil, "version %s\npid %d\nstarted %s\nuptime %d\nsessions %d\nagents %d\nyolo %d\n",
		n.version, os.Getpid(), n.started.UTC().Format(time.RFC3339Nano), int64(time.Since(n.started).Seconds()), len(sessions), agents, yolo)
	// A session file that could not be restored is otherwise only in the
	// log, and its session silently missing.
	var names []string
	for _, d := range n.logs.damagedFiles() {
		names = append(names, filepath.Base(d.Path))
	}
	out = fmt.Appendf(out, "damaged %d\n", len(names))
	if len(names) > 0 {
		out = fmt.Appendf(out, "damaged_files %s\n", strings.Join(names, " "))
	}
	// How tools are kept from what decides their power (docs/security.md).
	out = fmt.Appendf(out, "protection %s\n", sandbox.HostProtection())
	return out, nil
}

func (n *namespace) help(ctx context.Context, c *ns.Call) ([]byte, error) {
	return []byte(n.tree.Help()), nil
}

func (n *namespace) aliases(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, s := range n.sessions.List() {
		fmt.Fprintf(&b, "%s\tsession/%s\n", s.ID, s.Name())
	}
	return []byte(b.String()), nil
}

var rootCommands = []string{"help", "invalidate", "kill", "desktop-key"}

func (n *namespace) ctl(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	cmd, rest := command(req)
	switch cmd {
	case "help":
		return []byte(strings.Join(rootCommands, "\n") + "\n"), nil
	case "invalidate":
		if n.loadBackends != nil {
			// A bad edit of backends.json is reported now, not at the
			// next start, which it would stop.
			reg, err := n.loadBackends()
			if err != nil {
				return nil, fmt.Errorf("ctl: invalidate: %w (olliesrv keeps the backends it had)", err)
			}
			n.bmu.Lock()
			n.registry, n.backends, n.seenFiles = reg, lookupIn(reg), backendFiles(reg)
			n.bmu.Unlock()
		}
		n.bus.Publish("server.invalidate", c.User)
		return []byte("ok\n"), nil
	case "kill":
		n.bus.Publish("server.kill", c.User)
		// Stop once the reply has been read; a client that never closes
		// the file only delays the stop a little.
		c.OnClunk(n.kill)
		time.AfterFunc(2*time.Second, n.kill)
		return []byte("shutting down\n"), nil
	case "desktop-key":
		if err := setDesktopKey(rest); err != nil {
			return nil, fmt.Errorf("ctl: desktop-key: %w", err)
		}
		return []byte("ok\n"), nil
	}
	return nil, unknownCommand("ctl", cmd, rootCommands)
}

// setDesktopKey reads "PATH HEX" and stores the key for the socket backend
// at PATH (backend.SetSocketKey). The file is the owner's (0600): a tool,
// which can connect to the socket, can neither give a key nor read one.
// Errors never quote the key.
func setDesktopKey(arg string) error {
	i := strings.LastIndexByte(arg, ' ')
	if i < 0 {
		return errors.New("want PATH HEX: the socket's path and its key in hex")
	}
	path, h := strings.TrimSpace(arg[:i]), arg[i+1:]
	if !filepath.IsAbs(path) {
		return fmt.Errorf("the socket's path %q is not absolute", path)
	}
	key, err := hex.DecodeString(h)
	if err != nil || len(h) < 32 || len(h) > 128 {
		return fmt.Errorf("the key for %s is not 32 to 128 hex digits (an even number of them)", path)
	}
	backend.SetSocketKey(path, key)
	return nil
}

// command splits a control request into its verb and the rest.
func command(req []byte) (string, string) {
	line := strings.TrimSpace(string(req))
	verb, rest, _ := strings.Cut(line, " ")
	return verb, strings.TrimSpace(rest)
}

func unknownCommand(file, cmd string, valid []string) error {
	if cmd == "" {
		return fmt.Errorf("%s: empty command (valid: %s)", file, strings.Join(valid, ", "))
	}
	return fmt.Errorf("%s: unknown command %q (valid: %s)", file, cmd, strings.Join(valid, ", "))
}

// subscribe serves event: the filter is whitespace-separated topic
// patterns; none means every event.
func (n *namespace) subscribe(ctx context.Context, c *ns.Call, filter []byte) (ns.Source, error) {
	patterns := strings.Fields(string(filter))
	for _, p := range patterns {
		if strings.Contains(p, "..") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") {
			return nil, fmt.Errorf("event: bad pattern %q: use dotted topics such as session.* or *", p)
		}
	}
	return n.bus.Subscribe(patterns...), nil
}

func sessionEntry(s *agent.Session) ns.Entry {
	// The session's ID is its group: its agents are the members.
	return ns.Entry{Name: s.Name(), Key: s.ID, Owner: s.Owner, Group: s.ID}
}

// session returns the session the call is under.
func (n *namespace) session(c *ns.Call) (*agent.Session, error) {
	id := c.Key("sname")
	s, ok := n.sessions.Lookup(id)
	if !ok {
		return nil, fmt.Errorf("%s: session %s no longer exists", c.Path(), id)
	}
	return s, nil
}

// toolsOf is the toolsrv of the session c names, started if it is not
// running.
func (n *namespace) toolsOf(ctx context.Context, c *ns.Call) (*agent.Session, *toolsrv.Child, error) {
	s, err := n.session(c)
	if err != nil {
		return nil, nil, err
	}
	child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo)
	return s, child, err
}

var sessionKeys = []string{"name", "cwd", "yolo", "resume"}

func (n *namespace) newSession(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	creator, err := n.creator(c, nil)
	if err != nil {
		return nil, err
	}
	opt := agent.SessionOptions{Owner: c.User}
	words, err := keyValues(string(req), sessionKeys)
	if err != nil {
		return nil, fmt.Errorf("session/new: %w", err)
	}
	for _, kv := range words {
		k, v := kv.key, kv.value
		switch k {
		case "name":
			opt.Name = v
		case "cwd":
			if !strings.HasPrefix(v, "/") {
				return nil, fmt.Errorf("session/new: cwd %q is not an absolute path", v)
			}
			if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("session/new: cwd %q is not a directory on this host", v)
			}
			opt.Cwd = v
		case "remote":
			return nil, fmt.Errorf("session/new: remote=%s: a host runs its own sessions; remote= is for the desktop's namespace, which makes the session on that host: ollie -H fleet rdwr session/new 'name=X remote=HOST'", v)
		case "resume":
			switch v {
			case "auto":
				opt.ResumeManual = false
			case "manual":
				opt.ResumeManual = true
			default:
				return nil, fmt.Errorf("session/new: resume %q is not auto (a turn cut by a restart of olliesrv goes on by itself) or manual (it waits for a person)", v)
			}
		case "yolo":
			switch v {
			case "true":
				opt.Yolo = true
			case "false":
				opt.Yolo = false
			default:
				return nil, fmt.Errorf("session/new: yolo %q is not true or false", v)
			}
		default:
			return nil, fmt.Errorf("session/new: unknown key %q (keys: %s)", k, strings.Join(sessionKeys, ", "))
		}
	}
	switch {
	case creator != nil:
		// Work an agent's tool asks for is never wider than the agent.
		if opt.Cwd == "" {
			opt.Cwd = creator.Cwd()
		}
		real, err := paths.Within(opt.Cwd, creator.Cwd())
		if err != nil {
			return nil, fmt.Errorf("session/new: cwd: %w: a session made by agent %s lies inside its directory", err, creator.Name())
		}
		opt.Cwd = real
	case opt.Cwd == "":
		opt.Cwd, _ = paths.Home()
	}
	// The directory is resolved once, here, and held: its tools run in it
	// only while this path, with no symbolic link in it, still names it.
	if real, err := filepath.EvalSymlinks(opt.Cwd); err == nil {
		opt.Cwd = real
	}
	if opt.Yolo {
		if creator != nil {
			return nil, fmt.Errorf("session/new: yolo: %w (agent %s asked)", errYoloNotAdmin, creator.Name())
		}
		if _, taken := n.sessions.Lookup(opt.Name); opt.Name != "" && taken {
			return nil, fmt.Errorf("session/new: %w: %q", agent.ErrNameTaken, opt.Name)
		}
		if err := n.allowYolo(ctx, c, opt.Name, opt.Cwd); err != nil {
			return nil, fmt.Errorf("session/new: yolo: %w", err)
		}
	}
	s, err := n.sessions.Create(opt)
	if err != nil {
		return nil, fmt.Errorf("session/new: %w", err)
	}
	if err := n.tools.Hold(s.ID, s.Cwd()); err != nil {
		n.sessions.Kill(s.ID)
		return nil, fmt.Errorf("session/new: cwd %s: %w", s.Cwd(), err)
	}
	// The session exists only once its file does: nothing is served that a
	// restart would lose.
	l, err := agent.CreateSessionLog(n.logs.dir, s)
	if err != nil {
		n.sessions.Kill(s.ID)
		return nil, fmt.Errorf("session/new: %w", err)
	}
	n.logs.put(s.ID, l)
	if s.Yolo {
		n.log.Warn("olliesrv: a yolo session: its tools run unsandboxed and without approval", "session", s.Name(), "id", s.ID, "cwd", s.Cwd(), "by", c.User)
	}
	return []byte(s.Name() + "\n"), nil
}

func (n *namespace) sessionIdx(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, s := range n.sessions.List() {
		// Every session is local until ollie-remote attaches remote ones.
		fmt.Fprintf(&b, "%s\t%s\t%t\t%t\t%s\t%s\t%s\t%s\n", s.ID, s.Name(), s.Paused(), true, "-", s.Cwd(), n.logs.state(s.ID), yoloColumn(s))
	}
	// Files that could not be restored are listed by their file's name (the
	// session's ID), so that a missing session shows why.
	for _, d := range n.logs.damagedFiles() {
		fmt.Fprintf(&b, "%s\t-\t-\t%t\t-\t-\t%s\t-\n", strings.TrimSuffix(filepath.Base(d.Path), ".jsonl"), false, d.State())
	}
	return []byte(b.String()), nil
}

// sessionRead declares a read handler from a function of the session.
func (n *namespace) sessionRead(f func(*agent.Session) string) func(context.Context, *ns.Call) ([]byte, error) {
	return func(ctx context.Context, c *ns.Call) ([]byte, error) {
		s, err := n.session(c)
		if err != nil {
			return nil, err
		}
		return []byte(f(s)), nil
	}
}

func sessionID(s *agent.Session) string     { return s.ID + "\n" }
func sessionName(s *agent.Session) string   { return s.Name() + "\n" }
func sessionPaused(s *agent.Session) string { return fmt.Sprintln(s.Paused()) }

func (n *namespace) sessionEnv(s *agent.Session) string {
	sandbox, yolo := sandbox.Describe(s.Cwd()), 0
	if s.Yolo {
		sandbox, yolo = "NONE: a yolo session: tools run unsandboxed and without approval (sudo still asks)", 1
	}
	return fmt.Sprintf("OLLIE_SESSION_ID=%s\nOLLIE_SESSION_NAME=%s\nOLLIE_SESSION_OWNER=%s\nOLLIE_CWD=%s\nOLLIE_HOST=%s\nOLLIE_VERSION=%s\nOLLIE_CREATED=%s\nOLLIE_SANDBOX=%s\nOLLIE_YOLO=%d\n",
		s.ID, s.Name(), s.Owner, s.Cwd(), n.host, n.version, s.Created.UTC().Format(time.RFC3339), sandbox, yolo)
}

// yoloColumn is session/idx's last column: "yolo" for a yolo session.
func yoloColumn(s *agent.Session) string {
	if s.Yolo {
		return "yolo"
	}
	return "-"
}

func (n *namespace) renameSession(ctx context.Context, c *ns.Call, data []byte) error {
	s, err := n.session(c)
	if err != nil {
		return err
	}
	name := strings.TrimSpace(string(data))
	record := func() error { return n.logs.record(s.ID, agent.SessionRenamed{Name: name}) }
	if err := n.sessions.RenameRecorded(s.ID, name, record); err != nil {
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	return nil
}

var sessionCommands = []string{"help", "kill", "pause", "resume", "save", "invalidate"}

func (n *namespace) sessionCtl(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	s, err := n.session(c)
	if err != nil {
		return nil, err
	}
	cmd, _ := command(req)
	switch cmd {
	case "help":
		return []byte(strings.Join(sessionCommands, "\n") + "\n"), nil
	case "kill":
		err = n.sessions.Kill(s.ID)
		n.agents.killSession(s.ID)
		n.tools.Stop(s.ID)
		n.logs.retire(s.ID)
	case "save":
		// Every change is written before it takes effect, so saving only
		// proves that the file takes writes now (and puts it back after a
		// failed write); an error says why it does not.
		path, err := n.logs.save(s.ID)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Path(), err)
		}
		return []byte("saved: " + path + "\n"), nil
	case "invalidate":
		child, err := n.tools.Get(ctx, s.ID, s.Cwd(), s.Yolo)
		if err != nil {
			return nil, err
		}
		if _, err := child.RdWr(ctx, "ctl", []byte("reload")); err != nil {
			return nil, err
		}
		return []byte("ok: tools reloaded\n"), nil
	case "pause", "resume":
		paused := cmd == "pause"
		if err = n.logs.record(s.ID, agent.SessionPaused{Paused: paused}); err == nil {
			err = n.sessions.SetPaused(s.ID, paused)
		}
	default:
		return nil, unknownCommand(c.Path(), cmd, sessionCommands)
	}
	if errors.Is(err, agent.ErrNoSession) {
		return nil, fmt.Errorf("%s: session %s no longer exists", c.Path(), s.ID)
	}
	if err != nil {
		return nil, err
	}
	return []byte("ok\n"), nil
}

func (n *namespace) sessionTools(ctx context.Context, c *ns.Call) ([]byte, error) {
	_, child, err := n.toolsOf(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path(), err)
	}
	return child.ReadFile(ctx, "tools")
}

func (n *namespace) hostTools(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, t := range toolsrv.Load(toolsrv.ToolsPath(), meta.LocalHost{}).Tools() {
		fmt.Fprintf(&b, "%s\t%s\n", t.Name, t.Description)
	}
	return []byte(b.String()), nil
}

func (n *namespace) toolErrors(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	reg := toolsrv.Load(toolsrv.ToolsPath(), meta.LocalHost{})
	for _, err := range append(reg.Errors(), reg.Warnings()...) {
		fmt.Fprintf(&b, "%v\n", err)
	}
	return []byte(b.String()), nil
}

func (n *namespace) agentProfiles(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, name := range agent.ProfileNames() {
		p, err := agent.LoadProfile(name)
		if err != nil {
			fmt.Fprintf(&b, "%s\t(broken: %v)\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "%s\t%s\n", name, p.Description)
	}
	return []byte(b.String()), nil
}

// currentRegistry is the configured backends, as ctl invalidate last read
// them.
func (n *namespace) currentRegistry() *backend.Registry {
	n.reloadEdited()
	n.bmu.Lock()
	defer n.bmu.Unlock()
	return n.registry
}

// backendFiles describes the backends files as they are now: the
// person's backends.json and the desktop's beside it.
func backendFiles(reg *backend.Registry) string {
	if reg == nil || reg.Path() == "" {
		return ""
	}
	var b strings.Builder
	for _, f := range []string{reg.Path(), filepath.Join(filepath.Dir(reg.Path()), backend.DesktopFile)} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%s %d %d;", f, fi.Size(), fi.ModTime().UnixNano())
		} else {
			fmt.Fprintf(&b, "%s -;", f)
		}
	}
	return b.String()
}

// reloadEdited reads the backends again when a backends file changed
// since they were read, as ctl invalidate does.
func (n *namespace) reloadEdited() {
	if n.loadBackends == nil {
		return
	}
	n.bmu.Lock()
	reg, seen := n.registry, n.seenFiles
	n.bmu.Unlock()
	now := backendFiles(reg)
	if now == "" || now == seen {
		return
	}
	n.bmu.Lock()
	n.seenFiles = now
	n.bmu.Unlock()
	fresh, err := n.loadBackends()
	if err != nil {
		n.log.Error("olliesrv: the backends file changed and cannot be read; the backends it had stay", "err", err)
		return
	}
	n.bmu.Lock()
	n.registry, n.backends = fresh, lookupIn(fresh)
	n.bmu.Unlock()
	n.log.Info("olliesrv: the backends file changed: read again", "file", fresh.Path())
}

func (n *namespace) backendList(ctx context.Context, c *ns.Call) ([]byte, error) {
	reg := n.currentRegistry()
	if reg == nil {
		return nil, nil
	}
	names := reg.Names()
	sort.SliceStable(names, func(i, j int) bool { return names[i] == reg.DefaultName() && names[j] != names[i] })
	var b strings.Builder
	for _, name := range names {
		cfg, _ := reg.Config(name)
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s", name, cfg.Type, cfg.URL, cfg.Model)
		if be, err := reg.Get(name); err == nil && notConfigured(ctx, be, cfg) {
			b.WriteString("\t" + notConfiguredNote(cfg))
		}
		b.WriteString("\n")
	}
	return []byte(b.String()), nil
}

// probeWait bounds how long backends waits for the Ollama no one
// configured to answer at its default address: a refused connection is
// at once, and nothing else there should hold the read up.
const probeWait = 2 * time.Second

// notConfigured reports whether the backend is the implicit ollama
// (backend.Config.Implicit) and nothing answers at its address: a backend
// the person never set up, shown as notConfiguredNote rather than as a
// broken one. An Ollama that is there and answers with an error is
// broken, and its error is news.
func notConfigured(ctx context.Context, be backend.Backend, cfg backend.Config) bool {
	if !cfg.Implicit() {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	_, err := be.Models(pctx)
	return err != nil && backend.Unanswered(err)
}

// notConfiguredNote is what backends and models show for the implicit
// ollama when no Ollama answers at its address.
func notConfiguredNote(cfg backend.Config) string {
	return "(not configured: no Ollama at " + cfg.URL + "; OLLAMA_HOST or backends.json names a model server)"
}

// modelList asks every backend for its models and the context window
// each gets; one that does not answer is listed with the reason rather
// than failing the whole read, and the implicit ollama, when nothing
// answers at its address, as not configured rather than unavailable.
func (n *namespace) modelList(ctx context.Context, c *ns.Call) ([]byte, error) {
	reg := n.currentRegistry()
	if reg == nil {
		return nil, nil
	}
	var b strings.Builder
	for _, name := range reg.Names() {
		be, err := reg.Get(name)
		if err != nil {
			fmt.Fprintf(&b, "%s\t(unavailable: %v)\n", name, err)
			continue
		}
		if cfg, _ := reg.Config(name); notConfigured(ctx, be, cfg) {
			fmt.Fprintf(&b, "%s\t%s\n", name, notConfiguredNote(cfg))
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		models, err := backend.ListModels(mctx, be)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "%s\t(unavailable: %v)\n", name, err)
			continue
		}
		for _, m := range models {
			window := "ctx=?"
			if m.Context > 0 {
				window = fmt.Sprintf("ctx=%d (%s)", m.Context, m.Source)
			}
			fmt.Fprintf(&b, "%s\t%s\t%s\n", name, m.Name, window)
		}
	}
	return []byte(b.String()), nil
}

func (n *namespace) setGoal(ctx context.Context, c *ns.Call, data []byte) error {
	s, err := n.session(c)
	if err != nil {
		return err
	}
	goal := strings.TrimSpace(string(data))
	if goal == "" {
		return fmt.Errorf("%s: empty goal", c.Path())
	}
	status := "running"
	agents := n.agents.of(s.ID)
	if len(agents) == 0 {
		status = "blocked"
	}
	if err := n.logs.record(s.ID, agent.GoalSet{Goal: &goal, Status: status}); err != nil {
		return err
	}
	s.SetGoal(&goal, status)
	n.bus.Publish("session."+s.ID+".goalstatus", status)
	if len(agents) == 0 {
		return fmt.Errorf("%s: the goal is recorded but blocked: the session has no agent to work on it (create one with agent/new)", c.Path())
	}
	return agents[0].Submit(ctx, agent.GoalPrompt(goal, s.Name()))
}

func (n *namespace) setGoalStatus(ctx context.Context, c *ns.Call, data []byte) error {
	s, err := n.session(c)
	if err != nil {
		return err
	}
	status := strings.TrimSpace(string(data))
	if !contains(agent.GoalStatuses, status) {
		return fmt.Errorf("%s: unknown status %q (valid: %s)", c.Path(), status, strings.Join(agent.GoalStatuses, ", "))
	}
	if err := n.logs.record(s.ID, agent.GoalSet{Status: status}); err != nil {
		return err
	}
	s.SetGoal(nil, status)
	n.bus.Publish("session."+s.ID+".goalstatus", status)
	return nil
}

func (n *namespace) goalWait(ctx context.Context, c *ns.Call) ([]byte, error) {
	s, err := n.session(c)
	if err != nil {
		return nil, err
	}
	_, current := s.Goal()
	st, err := s.WaitGoal(ctx, current)
	if err != nil {
		return nil, err
	}
	return []byte(st + "\n"), nil
}
