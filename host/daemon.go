package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"ollie/agent"
	"ollie/agent/backend"
	"ollie/broker/gate"
	"ollie/ns"
	"ollie/ns/nsdir"
	"ollie/toolsrv"
)

// maxSocketPath is the longest path a Unix socket address can hold on
// Linux (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

type Config struct {
	// Backends finds a model backend by name ("" for the default); nil
	// means Registry's, or none when Registry is nil too.
	Backends func(name string) (backend.Backend, error)
	Registry *backend.Registry // the configured backends, for the backends and models files
	// LoadBackends reads the configured backends again, for ctl
	// invalidate; nil keeps Registry for the daemon's life.
	LoadBackends func() (*backend.Registry, error)

	Dir      string // the namespace directory; the socket is Dir/ollie
	StateDir string // where session files live ("" means DefaultStateDir)
	TCP      string // optional unauthenticated TCP listener
	Log      *slog.Logger
	Trace    io.Writer
	// AlwaysFile keeps the tools approved "always" through bypass/pending
	// across restarts ("": for the daemon's life only).
	AlwaysFile string
	// Version is this binary's, shown in status and each session's env
	// ("" reads as "dev").
	Version string
}

// A Daemon is a running olliesrv: its listeners, its lock and its state.
type Daemon struct {
	Socket string
	TCP    net.Addr // nil without a TCP listener

	srv      *ns.Server
	ns       *namespace
	lock     *os.File
	unixL    *net.UnixListener
	gateL    net.Listener
	gate     *gate.Gate
	spill    *toolsrv.SpillArea // the sessions' cut tool output
	tcpL     net.Listener
	log      *slog.Logger
	killed   chan struct{}
	killOnce sync.Once
	serving  sync.WaitGroup
}

// ErrAlreadyRunning is returned when another olliesrv serves the namespace.
var ErrAlreadyRunning = errors.New("another olliesrv is already serving")

// Start serves the namespace on cfg.Dir's socket: it takes the lock, restores
// the sessions in cfg.StateDir and listens, or returns ErrAlreadyRunning.
func Start(cfg Config) (_ *Daemon, err error) {
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.StateDir == "" {
		if cfg.StateDir, err = DefaultStateDir(); err != nil {
			return nil, err
		}
	}
	d, err := listen(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.closeListeners()
			d.lock.Close()
		}
	}()
	if err := os.MkdirAll(cfg.StateDir, 0700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	// Tool output past what the model is shown: ours and private, swept of
	// what dead daemons left, removed at Shutdown.
	if d.spill, err = toolsrv.OpenSpillArea(cfg.StateDir, cfg.Log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.spill.Close()
		}
	}()
	if err := d.build(cfg); err != nil {
		return nil, err
	}
	d.serve(cfg)
	return d, nil
}

// listen takes the namespace's lock and opens its listeners: the 9P
// socket, the approval gate's socket and, if asked for, TCP. On error
// nothing is left open.
func listen(cfg Config) (_ *Daemon, err error) {
	sock := filepath.Join(cfg.Dir, nsdir.Service)
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is %d bytes, over the %d-byte limit of Unix sockets: set NAMESPACE to a shorter directory", sock, len(sock), maxSocketPath)
	}
	// It lives in /tmp, where another user could have made it first.
	if err := nsdir.Prepare(cfg.Dir); err != nil {
		return nil, err
	}
	lock, err := takeLock(sock + ".lock")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := clearStaleSocket(sock); err != nil {
		return nil, err
	}
	unixL, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sock, err)
	}
	d := &Daemon{Socket: sock, lock: lock, unixL: unixL, log: cfg.Log, killed: make(chan struct{})}
	defer func() {
		if err != nil {
			d.closeListeners()
		}
	}()
	if err := os.Chmod(sock, 0600); err != nil {
		return nil, fmt.Errorf("chmod %s: %w", sock, err)
	}
	// The approval gate: each session's toolsrv asks it (OLLIE_ELEVATE_SOCKET).
	elevate := filepath.Join(cfg.Dir, "elevate")
	os.Remove(elevate) // ours: we hold the lock
	if d.gateL, err = net.Listen("unix", elevate); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", elevate, err)
	}
	os.Chmod(elevate, 0600)
	if cfg.TCP != "" {
		if d.tcpL, err = net.Listen("tcp", cfg.TCP); err != nil {
			return nil, fmt.Errorf("listen on tcp %s: %w", cfg.TCP, err)
		}
		d.TCP = d.tcpL.Addr()
		cfg.Log.Warn("olliesrv: serving UNAUTHENTICATED 9P on TCP: anyone who can connect reads what is world-readable", "addr", d.TCP)
	}
	return d, nil
}

// build makes the approval gate, the namespace with the sessions restored
// from cfg.StateDir, and the 9P server of it.
func (d *Daemon) build(cfg Config) error {
	host, _ := os.Hostname()
	bus := &ns.Bus{}
	if cfg.Backends == nil && cfg.Registry != nil {
		cfg.Backends = lookupIn(cfg.Registry)
	}
	gate := gate.New(cfg.Log)
	gate.Publish = bus.Publish
	if exe, err := os.Executable(); err == nil {
		gate.TrustExe = exe
	}
	// ollie-remote forwards its broker sockets beside ours; those of
	// connections gone (before a crash, say) are removed.
	gate.Dir = cfg.Dir
	gate.Sweep()
	d.gate = gate
	d.ns = &namespace{bus: bus, sessions: agent.NewSessions(bus), host: host, kill: d.kill,
		tools: &toolsrv.Pool{Elevate: filepath.Join(cfg.Dir, "elevate"), Namespace: cfg.Dir, Spill: d.spill.Dir, IdleAfter: toolsrv.ToolsrvIdle(cfg.Log)}, gate: gate,
		agents: &agents{}, started: time.Now(), version: cfg.Version, backends: cfg.Backends, registry: cfg.Registry,
		seenFiles: backendFiles(cfg.Registry), loadBackends: cfg.LoadBackends, log: cfg.Log, logs: &sessionLogs{dir: cfg.StateDir}}
	tree, err := ns.NewTree(d.ns.spec(), "admin", "admin")
	if err != nil {
		return err
	}
	d.ns.tree = tree
	d.ns.always = cfg.AlwaysFile
	d.ns.loadAlways()
	d.ns.restore(context.Background())
	// Who a sandboxed tool is comes from its agent's capability; an agent
	// is a member of its session's group and of the group of the agents
	// it made, no other.
	d.srv = &ns.Server{Tree: tree, Log: cfg.Log, Trace: cfg.Trace, Identify: d.ns.agents.identify, InGroup: d.ns.agents.member}
	return nil
}

// serve starts answering on every listener; a listener that fails ends
// the daemon.
func (d *Daemon) serve(cfg Config) {
	go d.gate.Serve(d.gateL)
	d.serving.Add(1)
	go func() {
		defer d.serving.Done()
		if err := d.srv.ServeUnix(d.unixL); !errors.Is(err, ns.ErrServerClosed) {
			cfg.Log.Error("olliesrv: unix listener failed", "err", err)
			d.kill()
		}
	}()
	if d.tcpL != nil {
		d.serving.Add(1)
		go func() {
			defer d.serving.Done()
			if err := d.srv.Serve(d.tcpL); !errors.Is(err, ns.ErrServerClosed) {
				cfg.Log.Error("olliesrv: tcp listener failed", "err", err)
				d.kill()
			}
		}()
	}
	cfg.Log.Info("olliesrv: serving", "socket", d.Socket, "version", cfg.Version, "pid", os.Getpid())
}

// lookupIn finds backends in reg, the default one by "".
func lookupIn(reg *backend.Registry) func(string) (backend.Backend, error) {
	return func(name string) (backend.Backend, error) {
		if name == "" {
			return reg.Default(), nil
		}
		return reg.Get(name)
	}
}

func (d *Daemon) kill() { d.killOnce.Do(func() { close(d.killed) }) }

// Killed is closed when a client writes kill to the root ctl: the caller
// shuts the daemon down, as it would on a signal.
func (d *Daemon) Killed() <-chan struct{} { return d.killed }

func (d *Daemon) closeListeners() {
	d.unixL.Close()
	if d.gateL != nil {
		d.gateL.Close()
	}
	if d.tcpL != nil {
		d.tcpL.Close()
	}
}

// Shutdown stops accepting, interrupts blocked requests, waits for work in
// flight, removes the socket and releases the lock.
func (d *Daemon) Shutdown(ctx context.Context) error {
	err := d.srv.Shutdown(ctx)
	// Approvals in flight are answered, or denied saying the daemon
	// stopped, before the agents whose tools asked are stopped.
	if gerr := d.gate.Shutdown(ctx); gerr != nil {
		d.log.Warn("olliesrv: approvals still in flight were denied", "err", gerr)
		err = errors.Join(err, gerr)
	}
	d.ns.agents.closeAll()
	d.ns.tools.Close()
	d.spill.Close()
	d.ns.logs.closeAll()
	d.closeListeners() // removes the socket file
	d.serving.Wait()
	d.lock.Close()
	return err
}

// takeLock holds an exclusive lock for the life of the daemon, so that two
// servers never share a socket, and records the holder's pid.
func takeLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(pid))
			if _, err := strconv.Atoi(holder); err == nil {
				return nil, fmt.Errorf("%w %s (pid %s); stop it first (echo kill | ollie rdwr ctl)", ErrAlreadyRunning, strings.TrimSuffix(path, ".lock"), holder)
			}
			return nil, fmt.Errorf("%w %s", ErrAlreadyRunning, strings.TrimSuffix(path, ".lock"))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// clearStaleSocket removes a socket left by a dead server. The caller holds
// the lock, so no olliesrv is serving it; a socket that still answers
// belongs to some other program and is left alone.
func clearStaleSocket(sock string) error {
	fi, err := os.Lstat(sock)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: remove it or set NAMESPACE elsewhere", sock)
	}
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%w %s: a process that holds no olliesrv lock answers there", ErrAlreadyRunning, sock)
	}
	if err := os.Remove(sock); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	return nil
}
