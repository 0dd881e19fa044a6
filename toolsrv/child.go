package toolsrv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"9fans.net/go/plan9"
	"9fans.net/go/plan9/client"

	"ollie/ns"
	"ollie/toolsrv/meta"
	"ollie/toolsrv/sandbox"
	"ollie/toolsrv/tool"
)

// childArg, as the first argument, makes the binary a session's toolsrv.
const childArg = "__ollie_toolsrv"

// childConfig crosses a pipe from the parent to the child at spawn: the
// secret never appears in argv or the environment.
type childConfig struct {
	Secret        string          `json:"secret"`
	Socket        string          `json:"socket"`
	Cwd           string          `json:"cwd"`
	CwdID         *sandbox.FileID `json:"cwd_id,omitempty"`
	SessionID     string          `json:"session"`
	ToolsPath     []string        `json:"tools_path"`
	Tools         []string        `json:"tools"` // to load; nil loads every available tool
	ElevateSocket string          `json:"elevate_socket"`
	Namespace     string          `json:"namespace"`
	SpillDir      string          `json:"spill_dir"` // the session's, made by Spawn
	Yolo          bool            `json:"yolo,omitempty"`
	// Where a run after a rest goes on from: the revision its tool set
	// moves on from, and the last id a background process was given.
	Revision uint64 `json:"revision,omitempty"`
	LastProc int    `json:"last_proc,omitempty"`
}

// SpawnConfig describes a session's toolsrv.
type SpawnConfig struct {
	Cwd string
	// CwdID is the directory Cwd named when the session was made (see
	// Runner.CwdID); nil takes it now.
	CwdID         *sandbox.FileID
	SessionID     string
	ToolsPath     []string // nil: ToolsPath()
	Tools         []string // to load at start; nil loads every available tool
	ElevateSocket string
	Namespace     string    // the namespace socket's directory, given to tools as OLLIE_NAMESPACE
	Stderr        io.Writer // the child's log; nil discards it
	// SpillBase is a private directory (a daemon's SpillArea) under which
	// Spawn makes the session's directory for cut tool output, removed by
	// Close; "" makes it under os.TempDir.
	SpillBase string
	// Yolo runs every call without the sandbox and without approval
	// (Runner.Yolo): for a yolo session, which only the admin may make.
	Yolo bool
	// IdleAfter stops the process once no operation has used it for
	// that long (and it runs no background process); the next operation
	// starts it again. 0 keeps it running.
	IdleAfter time.Duration
}

// A Child is a session's toolsrv: a process of this binary serving the
// session's tools, started by Spawn and, once the session has been idle
// for a while (SpawnConfig.IdleAfter), stopped and started again at its
// next use, with the tools it had loaded (see rest.go). An idle session
// then costs its host no process.
type Child struct {
	cfg   SpawnConfig // as Spawn resolved it: CwdID and SpillDir set
	spill string      // the session's directory for cut tool output: it outlives each run

	// mu guards the rest. run is the process serving now, nil while the
	// session rests; while a start or a rest is under way, moving is
	// open, and operations wait for it to close.
	mu     sync.Mutex
	run    *childRun
	moving chan struct{}
	kept   childState // what the next run starts with
	active int        // operations holding a connection
	used   time.Time  // when the last one ended
	timer  *time.Timer
	closed bool
	// idle holds connections an operation finished with, for the next:
	// a tool call then costs no dial and no attach. One in use belongs to
	// one operation, so ending that operation's context can close it
	// (interrupting the call, which kills the tool) without touching
	// another's.
	idle []*childConn
	// decls are the loaded tools as the run serving now declared them
	// when gen (the count of ctl writes) was what it is (decls.go).
	decls       declsCache
	gen         uint64
	schemaReads atomic.Int64 // for the tests

	closeOnce sync.Once
	closeErr  error
}

// A childRun is one process of a Child: its private directory and socket,
// and the secret its attaches present, all fresh for each run.
type childRun struct {
	socket string
	secret string
	dir    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{} // closed once cmd has been waited for
	err    error         // Wait's, once exited is closed
}

// childConn is one attached connection to the child.
type childConn struct {
	run  *childRun
	conn *client.Conn
	fsys *client.Fsys
}

// helperPoolSize is how many sandbox helpers a session's toolsrv keeps
// waiting: a turn's parallel calls beyond it each start their own, at the
// cold path's cost.
const helperPoolSize = 2

// HelpersIdleEnv sets how long a session's helpers wait for a call before
// they are let go (a Go duration; 0 keeps them): an idle session then
// costs its host one process, its tool server, and its next call starts
// a helper itself (tens of milliseconds) while the others start behind it.
const HelpersIdleEnv = "OLLIE_HELPERS_IDLE"

// defaultHelpersIdle: a model's turns call tools seconds apart; a session
// without a call for a minute is one a person has left.
const defaultHelpersIdle = time.Minute

func helpersIdle(log *slog.Logger) time.Duration {
	return envDuration(log, HelpersIdleEnv, defaultHelpersIdle)
}

// maxIdle bounds the connections kept for reuse: as many as calls
// commonly run at once in one session.
const maxIdle = 8

// IsChild reports whether this process was spawned to be a toolsrv. The
// binary's main calls it early, as it does sandbox.IsHelper.
func IsChild() bool { return len(os.Args) > 1 && os.Args[1] == childArg }

// ChildMain runs the toolsrv child. It never returns.
func ChildMain() {
	if err := child(); err != nil {
		fmt.Fprintf(os.Stderr, "toolsrv: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Spawn starts a toolsrv for a session: a child of this binary serving its
// namespace on a Unix socket in a private directory, admitting only
// attaches that present the secret handed over here. The child ends when
// Close is called, when this process dies (its stdin closes; Pdeathsig
// too), and it kills its processes on the way out.
func Spawn(ctx context.Context, cfg SpawnConfig) (_ *Child, err error) {
	if cfg.ToolsPath == nil {
		cfg.ToolsPath = ToolsPath()
	}
	if cfg.CwdID == nil && cfg.Cwd != "" {
		id, err := sandbox.Identify(cfg.Cwd)
		if err != nil {
			return nil, fmt.Errorf("toolsrv: the session's directory: %w", err)
		}
		cfg.CwdID = &id
	}
	c := &Child{cfg: cfg, kept: childState{Tools: cfg.Tools}}
	if c.spill, err = makeSessionSpill(cfg.SpillBase); err != nil {
		return nil, err
	}
	if c.run, err = c.start(ctx, c.kept); err != nil {
		os.RemoveAll(c.spill)
		return nil, err
	}
	// One never used rests too (a session restored, then left).
	c.mu.Lock()
	c.used = time.Now()
	c.restLater()
	c.mu.Unlock()
	return c, nil
}

// start runs a process for the Child, going on from st.
func (c *Child) start(ctx context.Context, st childState) (_ *childRun, err error) {
	cfg := c.cfg
	dir, err := os.MkdirTemp("", "ollie-tools-")
	if err != nil {
		return nil, fmt.Errorf("toolsrv: spawn: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	var raw [32]byte
	rand.Read(raw[:])
	r := &childRun{socket: filepath.Join(dir, "toolsrv"), secret: hex.EncodeToString(raw[:]), dir: dir, exited: make(chan struct{})}
	conf, err := json.Marshal(childConfig{Secret: r.secret, Socket: r.socket, Cwd: cfg.Cwd, CwdID: cfg.CwdID, SessionID: cfg.SessionID,
		ToolsPath: cfg.ToolsPath, Tools: st.Tools, ElevateSocket: cfg.ElevateSocket, Namespace: cfg.Namespace, SpillDir: c.spill, Yolo: cfg.Yolo,
		Revision: st.Revision, LastProc: st.LastProc})
	if err != nil {
		return nil, err
	}
	cr, cw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("toolsrv: spawn: %w", err)
	}
	go func() {
		cw.Write(conf)
		cw.Close()
	}()
	// /proc/self/exe: this very binary, even when a deploy has since
	// replaced, or pruned, the file it was started from.
	cmd := exec.Command("/proc/self/exe", childArg)
	cmd.ExtraFiles = []*os.File{cr}
	cmd.Stderr = cfg.Stderr
	// Its own process group keeps a terminal's ^C for the parent to
	// handle; SIGTERM on the parent's death lets it kill its processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Plain pipes rather than StdinPipe/StdoutPipe: the child's stdout is
	// read while Wait runs, and its stdin stays open as long as we live.
	inR, inW, err := os.Pipe()
	if err != nil {
		cr.Close()
		return nil, fmt.Errorf("toolsrv: spawn: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cr.Close()
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("toolsrv: spawn: %w", err)
	}
	cmd.Stdin, cmd.Stdout, r.stdin = inR, outW, inW
	err = cmd.Start()
	cr.Close()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("toolsrv: spawn: %w", err)
	}
	r.cmd = cmd
	ready := make(chan error, 1)
	go func() {
		defer outR.Close()
		line, err := bufio.NewReader(outR).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected %q", line)
		}
		ready <- err
		io.Copy(io.Discard, outR)
	}()
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(30 * time.Second):
		err = errors.New("not ready after 30s")
	}
	if err != nil {
		cmd.Process.Kill()
		<-r.exited
		inW.Close()
		return nil, fmt.Errorf("toolsrv: spawn: the child did not start: %w", err)
	}
	return r, nil
}

// stop ends the run: its stdin closes, which has it kill its processes
// and exit; one that has not within 10 s is killed.
func (r *childRun) stop() error {
	r.stdin.Close()
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
	os.RemoveAll(r.dir)
	return r.err
}

// attach gives one operation a connection to the child, idle or new. The
// connection closes when ctx ends, which interrupts the request and kills
// a running call; release hands it back for reuse when the operation went
// well, and closes it otherwise.
func (c *Child) attach(ctx context.Context) (*client.Fsys, func(ok bool), error) {
	fsys, release, _, err := c.attachFrom(ctx, true)
	return fsys, release, err
}

// attachFrom is attach; idle false always dials. reused says the
// connection was an idle one.
func (c *Child) attachFrom(ctx context.Context, idle bool) (_ *client.Fsys, _ func(ok bool), reused bool, _ error) {
	cc, reused, err := c.take(ctx, idle)
	if err != nil {
		return nil, nil, false, err
	}
	stop := context.AfterFunc(ctx, func() { cc.conn.Close() })
	return cc.fsys, func(ok bool) {
		if !stop() || !ok || ctx.Err() != nil {
			cc.conn.Close()
			cc = nil
		}
		c.put(cc)
	}, reused, nil
}

// open opens path on a connection to the child for one operation, as
// attach gives one. An idle connection that turns out broken (its first
// request fails with no answer from the child) is dropped and the open
// tried once more on a new one: nothing has run on the broken one, so the
// operation is not repeated, only reconnected.
func (c *Child) open(ctx context.Context, path string, mode uint8) (*client.Fid, func(ok bool), error) {
	for idle := true; ; idle = false {
		fsys, release, reused, err := c.attachFrom(ctx, idle)
		if err != nil {
			return nil, nil, err
		}
		f, err := fsys.Open(path, mode)
		if err == nil {
			return f, release, nil
		}
		release(false)
		var answered client.Error // an Rerror: the connection works
		if !reused || ctx.Err() != nil || errors.As(err, &answered) {
			return nil, nil, ctxErr(ctx, err)
		}
	}
}

// take gives an operation a connection to the running process, starting
// it first when the session rests (or the process has died), and counts
// the operation as active until put.
func (c *Child) take(ctx context.Context, idle bool) (*childConn, bool, error) {
	run, err := c.running(ctx)
	if err != nil {
		return nil, false, err
	}
	if n := len(c.idle); idle && n > 0 {
		cc := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return cc, true, nil
	}
	c.mu.Unlock()
	cc, err := c.dial(ctx, run)
	if err != nil {
		c.put(nil)
	}
	return cc, false, err
}

// dial makes a new attached connection to run.
func (c *Child) dial(ctx context.Context, run *childRun) (*childConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", run.socket)
	if err != nil {
		return nil, fmt.Errorf("toolsrv: %w", err)
	}
	conn, err := client.NewConn(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("toolsrv: %w", err)
	}
	fsys, err := conn.Attach(nil, "agent", run.secret)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("toolsrv: %w", err)
	}
	return &childConn{run: run, conn: conn, fsys: fsys}, nil
}

// put ends an operation, keeping its connection (nil: none) for the next
// while it is of the running process.
func (c *Child) put(cc *childConn) {
	c.mu.Lock()
	c.active--
	c.used = time.Now()
	if c.active == 0 {
		c.restLater()
	}
	if cc == nil {
		c.mu.Unlock()
		return
	}
	if c.closed || cc.run != c.run || len(c.idle) >= maxIdle {
		c.mu.Unlock()
		cc.conn.Close()
		return
	}
	c.idle = append(c.idle, cc)
	c.mu.Unlock()
}

// ReadFile reads a file of the child's namespace.
func (c *Child) ReadFile(ctx context.Context, path string) ([]byte, error) {
	f, release, err := c.open(ctx, path, plan9.OREAD)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	f.Close()
	release(err == nil)
	return b, ctxErr(ctx, err)
}

// RdWr writes a request to a file of the child's namespace and reads the
// reply.
func (c *Child) RdWr(ctx context.Context, path string, req []byte) ([]byte, error) {
	if path == "ctl" {
		defer c.toolsChanged() // whatever it did, and even if it failed
	}
	f, release, err := c.open(ctx, path, plan9.ORDWR)
	if err != nil {
		return nil, err
	}
	var b []byte
	if _, err = f.Write(req); err == nil {
		b, err = io.ReadAll(f)
	}
	f.Close()
	release(err == nil)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	return b, nil
}

func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Call runs one call for the session and returns its result.
func (c *Child) Call(ctx context.Context, tool string, args json.RawMessage) (*tool.Result, error) {
	return c.CallFor(ctx, Caller{}, tool, args)
}

// CallFor runs one call for an agent and returns its result.
func (c *Child) CallFor(ctx context.Context, who Caller, name string, args json.RawMessage) (*tool.Result, error) {
	req, err := json.Marshal(CallRequest{Tool: name, Args: args, Caller: &who})
	if err != nil {
		return nil, err
	}
	b, err := c.RdWr(ctx, "call", req)
	if err != nil {
		return nil, err
	}
	var res tool.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("toolsrv: bad result: %w", err)
	}
	return &res, nil
}

// Start starts a call in the background and returns its process id.
func (c *Child) Start(ctx context.Context, tool string, args json.RawMessage) (string, error) {
	return c.StartFor(ctx, Caller{}, tool, args)
}

// StartFor starts a call in the background for an agent.
func (c *Child) StartFor(ctx context.Context, who Caller, tool string, args json.RawMessage) (string, error) {
	req, err := json.Marshal(CallRequest{Tool: tool, Args: args, Caller: &who})
	if err != nil {
		return "", err
	}
	b, err := c.RdWr(ctx, "proc/new.bg", req)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Poll returns a background process's output from offset off, without
// waiting.
func (c *Child) Poll(ctx context.Context, id string, off int64) (*tool.ProcPoll, error) {
	b, err := c.RdWr(ctx, "proc/"+id+"/poll", []byte(strconv.FormatInt(off, 10)))
	if err != nil {
		return nil, err
	}
	var p tool.ProcPoll
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("toolsrv: bad poll reply: %w", err)
	}
	return &p, nil
}

// Follow copies a streaming file of the child's namespace to w until it
// ends or ctx does.
func (c *Child) Follow(ctx context.Context, path string, w io.Writer) error {
	f, release, err := c.open(ctx, path, plan9.OREAD)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, f)
	f.Close()
	release(err == nil)
	return ctxErr(ctx, err)
}

// Procs lists the background processes: id<TAB>tool<TAB>status.
func (c *Child) Procs(ctx context.Context) ([]byte, error) {
	dir, release, err := c.open(ctx, "proc", plan9.OREAD)
	if err != nil {
		return nil, err
	}
	ents, err := dir.Dirreadall()
	dir.Close()
	release(err == nil)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	var b strings.Builder
	for _, e := range ents {
		if e.Name == "new.bg" {
			continue
		}
		tool, _ := c.ReadFile(ctx, "proc/"+e.Name+"/tool")
		status, _ := c.ReadFile(ctx, "proc/"+e.Name+"/status")
		fmt.Fprintf(&b, "%s\t%s\t%s\n", e.Name, strings.TrimSpace(string(tool)), strings.TrimSpace(string(status)))
	}
	return []byte(b.String()), nil
}

// Close stops the child, which kills its processes, and waits for it.
// A second Close returns the first's error.
func (c *Child) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Child) close() error {
	c.mu.Lock()
	c.closed = true
	for c.moving != nil {
		moving := c.moving
		c.mu.Unlock()
		<-moving
		c.mu.Lock()
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	idle, run := c.idle, c.run
	c.idle, c.run = nil, nil
	c.mu.Unlock()
	for _, cc := range idle {
		cc.conn.Close()
	}
	var err error
	if run != nil {
		err = run.stop()
	}
	os.RemoveAll(c.spill)
	return err
}

func child() error {
	// First: SIGTERM comes from Pdeathsig when the parent dies, which it
	// may do while this child starts. Unhandled, it would end the child
	// at once, leaving its directory in /tmp and its processes running.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	f := os.NewFile(3, "toolsrv-config")
	if f == nil {
		return errors.New("no configuration pipe: toolsrv is started by olliesrv")
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return fmt.Errorf("reading configuration: %w", err)
	}
	var cfg childConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("bad configuration: %w", err)
	}
	if dir := filepath.Dir(cfg.Socket); strings.HasPrefix(filepath.Base(dir), "ollie-tools-") {
		// Spawn's private directory: gone with this process, even when
		// the parent died without Close.
		defer os.RemoveAll(dir)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("session", cfg.SessionID)

	reg := Load(cfg.ToolsPath, meta.LocalHost{})
	for _, err := range reg.Errors() {
		log.Warn("toolsrv: tool not loaded", "err", err)
	}
	session := NewSession(reg)
	names := cfg.Tools
	if names == nil {
		for _, t := range reg.Tools() {
			names = append(names, t.Name)
		}
	}
	for _, name := range names {
		if err := session.Load(name); err != nil {
			log.Warn("toolsrv: cannot load", "tool", name, "err", err)
		}
	}
	if cfg.Revision > 0 {
		session.MovePast(cfg.Revision)
	}
	runner := &Runner{Tools: session, Cwd: cfg.Cwd, CwdID: cfg.CwdID, Profiles: sandbox.DefaultProfiles(), ToolsPath: cfg.ToolsPath,
		ElevateSocket: cfg.ElevateSocket, Namespace: cfg.Namespace, SessionID: cfg.SessionID, SpillDir: cfg.SpillDir, Yolo: cfg.Yolo}
	if cfg.ElevateSocket != "" {
		runner.Approver = GateApprover{Socket: cfg.ElevateSocket}
	}
	if !cfg.Yolo {
		// Sandboxed calls go to helpers started ahead of them. The pool
		// is this process's: its helpers die with it (Pdeathsig, and
		// their sockets close), and Close below ends the idle ones.
		runner.Helpers = sandbox.NewPool(helperPoolSize)
		runner.Helpers.IdleAfter(helpersIdle(log))
		defer runner.Helpers.Close()
	}
	defer runner.Close()
	runner.spilled = spilledIn(cfg.SpillDir)
	procs := &Procs{Runner: runner, next: cfg.LastProc}
	srv := &Server{Runner: runner, Procs: procs, Registry: func() string {
		var b strings.Builder
		for _, e := range session.Registry().Explain() {
			b.WriteString(e.String() + "\n")
		}
		return b.String()
	}}
	tree, err := srv.Tree()
	if err != nil {
		return err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
	if err != nil {
		return err
	}
	if err := os.Chmod(cfg.Socket, 0600); err != nil {
		return err
	}
	// Every attach must hold the secret. The parent is the owner, unless
	// olliesrv itself runs with no_new_privs (a systemd unit's
	// NoNewPrivileges=yes, say): then the secret is what says it is the agent.
	check := CheckSecret(cfg.Secret)
	identify := func(uname, aname string) string {
		if check(uname, aname) != nil {
			return ""
		}
		return "agent"
	}
	nsrv := &ns.Server{Tree: tree, CheckAttach: check, Identify: identify, Log: log}
	go nsrv.ServeUnix(l)
	fmt.Println("ready")

	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin) // returns when the parent closes it or dies
		close(stop)
	}()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-stop:
			running = false
		case <-sig:
			running = false
		case <-tick.C:
			procs.Collect()
		}
	}
	procs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nsrv.Shutdown(ctx)
	return nil
}
