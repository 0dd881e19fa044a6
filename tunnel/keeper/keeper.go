// Package keeper is the background process behind ollie-remote up: it holds one
// SSH connection per host, reconnecting after drops, and serves each host's
// namespace on a local socket through a 9P proxy that resumes reads across
// reconnects. up, down, status and deploy talk to it over a control socket
// in the same private directory.
package keeper

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"ollie/broker/desktop"
	"ollie/internal/paths"
	"ollie/tunnel/models"
)

const Command = "__keeper"

// Desk, when set, serves the desktop's own namespace (tunnel/desk) for
// as long as the keeper runs, from the hosts held (held: this keeper's
// and every other keeper's of this desktop user, each with its Name):
// ollie-remote sets it, so that this package does not depend on the
// namespace.
var Desk func(ctx context.Context, dir string, held func() []HeldInfo, log *slog.Logger) error

// ControlSocket is where the keeper whose directory is dir listens.
func ControlSocket(dir string) string { return filepath.Join(dir, "keeper.sock") }

// Of is the directory of the keeper a request is for: the one of
// its ssh configuration.
func Of(req Request) string { return paths.KeeperDir(paths.NewSSHConfig(req.Config, req.Known)) }

type keeper struct {
	broker *desktop.Broker // answers the hosts' approval requests
	dir    string          // its directory: control socket, log, a socket per host
	ssh    paths.SSHConfig // the ssh configuration its hosts are held with

	// The hosts of the keepers of other ssh configurations, asked at
	// most once a second (othersNow).
	othersMu sync.Mutex
	othersAt time.Time
	others   []otherKeeper

	mu      sync.Mutex
	hosts   map[string]*heldHost
	proxies map[string]*models.Proxy // the desktop's model, per upstream and limits
	active  int                      // control requests in progress
	log     *slog.Logger
	ln      net.Listener
	quit    chan struct{}
	once    sync.Once
}

// Main runs the keeper until a down lets its last host go, it has been
// idle ten seconds, or it gets SIGINT or SIGTERM; it returns the exit
// status.
func Main(args []string) int {
	// The keeper holds hosts of one ssh configuration, in the directory
	// ensureKeeper chose for it.
	dir, ssh, ok := parseFlags(args)
	if !ok {
		return 2
	}
	if err := paths.PreparePrivateDir(dir); err != nil {
		slog.New(slog.NewTextHandler(os.Stderr, nil)).Error("ollie-remote keeper", "err", err)
		return 1
	}
	// Standard error stays on keeper.log for a crash's trace; everything
	// logged goes through the cap, the rotation and the repeat filter.
	log, logf, err := OpenLog(filepath.Join(dir, "keeper.log"))
	if err != nil {
		slog.Error("ollie-remote keeper", "err", err)
		return 1
	}
	defer logf.Close()
	lock, err := os.OpenFile(filepath.Join(dir, "keeper.lock"), os.O_RDWR|os.O_CREATE, 0600)
	if err != nil {
		log.Error("ollie-remote keeper", "err", err)
		return 1
	}
	// Closing the file, or its finalizer once nothing refers to it,
	// would let the lock go: it stays open until the keeper returns.
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		log.Error("ollie-remote keeper: another keeper runs", "err", err)
		return 1
	}
	// What the keeper holds its hosts with, for status and ollie -H to
	// name it.
	if b, err := json.Marshal(ssh); err == nil {
		os.WriteFile(filepath.Join(dir, paths.KeeperSSHFile), append(b, '\n'), 0600)
	}
	sock := ControlSocket(dir)
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		log.Error("ollie-remote keeper", "err", err)
		return 1
	}
	log.Info("ollie-remote keeper: holding hosts", "ssh", ssh.String(), "dir", dir)
	k := &keeper{hosts: map[string]*heldHost{}, log: log, ln: ln, quit: make(chan struct{}), broker: desktop.KeeperBroker(log), dir: dir, ssh: ssh}
	go k.acceptRequests()
	stopDesk, deskDone := k.serveDesk()
	go k.quitWhenIdle()
	k.waitQuit()
	k.shutdown(sock, stopDesk, deskDone)
	return 0
}

// parseFlags reads the keeper's directory and the ssh configuration it
// holds its hosts with from its command line.
func parseFlags(args []string) (dir string, ssh paths.SSHConfig, ok bool) {
	fl := flag.NewFlagSet(Command, flag.ContinueOnError)
	d := fl.String("dir", paths.RemoteDir(), "")
	config := fl.String("F", "", "")
	var known []string
	fl.Func("known-hosts", "", func(s string) error { known = append(known, s); return nil })
	if err := fl.Parse(args); err != nil {
		return "", paths.SSHConfig{}, false
	}
	return *d, paths.NewSSHConfig(*config, known), true
}

// acceptRequests serves each control connection in a goroutine of its
// own, counted in active, until the listener is closed.
func (k *keeper) acceptRequests() {
	for {
		c, err := k.ln.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		k.active++
		k.mu.Unlock()
		go func() {
			k.serve(c)
			k.mu.Lock()
			k.active--
			k.mu.Unlock()
		}()
	}
}

// serveDesk serves the desktop's namespace (Desk, when set) until stop
// is called; done is closed once it has returned.
func (k *keeper) serveDesk() (stop func(), done <-chan struct{}) {
	ctx, stop := context.WithCancel(context.Background())
	deskDone := make(chan struct{})
	go func() {
		defer close(deskDone)
		if Desk == nil {
			return
		}
		if err := Desk(ctx, k.dir, k.fleet, k.log); err != nil {
			k.log.Error("ollie-remote keeper: the desktop's namespace", "err", err)
		}
	}()
	return stop, deskDone
}

// quitWhenIdle ends the keeper once it has held no host and answered
// nothing for ten seconds: such a keeper has no reason to stay (an up
// that failed everywhere leaves one behind otherwise).
func (k *keeper) quitWhenIdle() {
	idle := 0
	for range time.Tick(time.Second) {
		k.mu.Lock()
		empty := len(k.hosts) == 0 && k.active == 0
		k.mu.Unlock()
		if idle = map[bool]int{true: idle + 1, false: 0}[empty]; idle >= 10 {
			k.once.Do(func() { close(k.quit) })
			return
		}
	}
}

// waitQuit returns once the keeper is told to quit or gets SIGINT or
// SIGTERM.
func (k *keeper) waitQuit() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	select {
	case <-k.quit:
	case s := <-sigs:
		k.log.Info("ollie-remote keeper: signal", "signal", s)
	}
}

// shutdown stops taking requests, lets those in progress finish, stops
// the desktop's namespace and lets every host go.
func (k *keeper) shutdown(sock string, stopDesk func(), deskDone <-chan struct{}) {
	k.ln.Close()
	os.Remove(sock)
	// The request that emptied the keeper (the last down) still owes its
	// client an answer: let the requests in progress finish first.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		k.mu.Lock()
		active := k.active
		k.mu.Unlock()
		if active == 0 {
			break
		}
	}
	stopDesk()
	select {
	case <-deskDone:
	case <-time.After(5 * time.Second):
	}
	k.mu.Lock()
	for _, h := range k.hosts {
		h.close()
	}
	k.mu.Unlock()
}

// Ensure starts the keeper of the ssh configuration s in the
// background unless it runs: one per desktop user and configuration, in
// its own directory (paths.KeeperDir).
func Ensure(ctx context.Context, s paths.SSHConfig) error {
	dir := paths.KeeperDir(s)
	if c, err := net.Dial("unix", ControlSocket(dir)); err == nil {
		c.Close()
		return nil
	}
	if err := paths.PreparePrivateDir(dir); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "keeper.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(exe, append([]string{Command, "-dir", dir}, s.Flags()...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if c, err := net.Dial("unix", ControlSocket(dir)); err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the keeper exited at once (%v); see %s", err, logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
