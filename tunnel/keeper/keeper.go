// Package keeper is the background process behind ollie-remote up: it holds one
// SSH connection per host, reconnecting after drops, and serves each host's
// namespace on a local socket through a 9P proxy that resumes reads across
// reconnects. up, down, status and deploy talk to it over a control socket
// in the same private directory.
package keeper

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"ollie/broker/desktop"
	"ollie/internal/paths"
	"ollie/internal/termsafe"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
	"ollie/tunnel/models"
	"ollie/tunnel/resume"
)

const Command = "__keeper"

// Request is one control request; replies are JSON lines of Reply.
type Request struct {
	Op        string           `json:"op"` // up, down, list, deploy (up with a Bundle deploys it first, on the connection it holds)
	Host      string           `json:"host,omitempty"`
	Config    string           `json:"config,omitempty"`
	Known     []string         `json:"known,omitempty"`
	AcceptNew bool             `json:"accept_new,omitempty"`
	Stop      bool             `json:"stop,omitempty"`
	Bundle    *deploy.Bundle   `json:"bundle,omitempty"`
	Keep      int              `json:"keep,omitempty"`
	Deadlines deploy.Deadlines `json:"deadlines,omitempty"`
	// Models, for up, gives the host the desktop's model from now on.
	Models *ModelsRoute `json:"models,omitempty"`
	// ConnectTimeout bounds up's connecting (retries included); 0 means
	// 2 minutes.
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`
	// Override, for up, is the host's own settings (an inventory's
	// host vars), winning over the ssh config for this host alone.
	Override *tunnel.Override `json:"override,omitempty"`
}

type Reply struct {
	Host   string         `json:"host,omitempty"`
	Msg    string         `json:"msg,omitempty"`
	Done   bool           `json:"done,omitempty"`
	Err    string         `json:"err,omitempty"`
	Socket string         `json:"socket,omitempty"`
	Result *deploy.Result `json:"result,omitempty"`
	Held   []HeldInfo     `json:"held,omitempty"`
	// Policy, for list, says why the broker policy file is not in force
	// and what is instead; "" when it is.
	Policy string `json:"policy,omitempty"`
	// OtherSSH, for deploy, is that the keeper holds the host with
	// another ssh configuration than deploy's.
	OtherSSH bool `json:"other_ssh,omitempty"`
	// Unreachable, for up, is that the host could not be connected to
	// at all (as opposed to a step after the connection failing).
	Unreachable bool `json:"unreachable,omitempty"`
	// Runs, for list, is each run's model usage through the desktop.
	Runs map[string]models.Usage `json:"runs,omitempty"`
}

// sameSSH checks that req was given the ssh configuration the keeper
// holds its hosts with: the same host name may be another machine in
// another one.
func (k *keeper) sameSSH(req Request) error {
	if s := paths.NewSSHConfig(req.Config, req.Known); !s.Equal(k.ssh) {
		return fmt.Errorf("the keeper in %s holds its hosts with %s, not %s: give the same -F and -known-hosts, or set OLLIE_REMOTE_DIR to another directory for a keeper of this configuration", k.dir, k.ssh, s)
	}
	return nil
}

type HeldInfo struct {
	Host string `json:"host"`
	// Name, in the fleet (Fleet), is the host's name among the hosts of
	// every keeper of this desktop user: Host, or Host~TAG
	// (paths.QualifiedHost) while a keeper of another ssh configuration
	// holds a host named Host too.
	Name   string    `json:"name,omitempty"`
	Socket string    `json:"socket"`
	Tunnel string    `json:"tunnel"`
	Proxy  string    `json:"proxy"`
	Since  time.Time `json:"since"`
	// Approvals is the approval channel's state (ok, registering,
	// missing: why); Broker the host-side socket registered for it.
	Approvals string `json:"approvals,omitempty"`
	Broker    string `json:"broker,omitempty"`
	// Keyless counts the requests that came to this host's broker socket
	// without the key its olliesrv was given: another process on the host
	// (a tool) asking in olliesrv's name. Each was closed unanswered.
	Keyless int `json:"keyless,omitempty"`
	// Models is the desktop's model channel (ok: ROUTE, missing: why),
	// "" when the host was not given the desktop's model; ModelUsage what
	// the host used through it.
	Models     string       `json:"models,omitempty"`
	ModelUsage models.Usage `json:"model_usage,omitzero"`
	// Restarts counts the daemons the keeper started in place of one that
	// died; Daemon says what it did last and why, or why it leaves the
	// daemon alone (systemd restarts it, it was stopped on purpose); ""
	// when there is nothing to say.
	Restarts int    `json:"restarts,omitempty"`
	Daemon   string `json:"daemon,omitempty"`
}

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

type heldHost struct {
	name       string
	named      func(string) string // the name an approval shows: keeper.approvalName
	th         *tunnel.Host
	proxy      *resume.Proxy
	ln         net.Listener
	sock       string
	remoteSock string
	since      time.Time
	log        *slog.Logger // the keeper's, with the host's name
	deadlines  deploy.Deadlines
	deployMu   sync.Mutex
	startMu    sync.Mutex // one olliesrv start at a time after up: dial's and revive's

	stop          chan struct{} // closed by close: ends carryApprovals
	stopOnce      sync.Once
	approvalsDone chan struct{} // closed when carryApprovals has let the host go

	mu         sync.Mutex
	shownAs    string // the name approvals were last shown under, when not name
	proxyState string
	approvals  string         // the approval channel's state: ok, registering, missing: why
	brokerSock string         // the host-side socket forwarded to our broker now
	lastClient *tunnel.Client // the connection dial last ran olliesrv start on
	daemon     daemonState    // restarts of the host's daemon (restart.go)

	models     string        // the model channel's state, for status
	route      *ModelsRoute  // the desktop's model given to the host; nil when none
	modelProxy *models.Proxy // the proxy carrying it
	stopModels func()        // ends carryModels
	modelsDone chan struct{}
}

func Main(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// The keeper holds hosts of one ssh configuration, in the directory
	// ensureKeeper chose for it.
	fl := flag.NewFlagSet(Command, flag.ContinueOnError)
	dir := fl.String("dir", paths.RemoteDir(), "")
	config := fl.String("F", "", "")
	var known []string
	fl.Func("known-hosts", "", func(s string) error { known = append(known, s); return nil })
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if err := paths.PreparePrivateDir(*dir); err != nil {
		log.Error("ollie-remote keeper", "err", err)
		return 1
	}
	// Standard error stays on keeper.log for a crash's trace; everything
	// logged goes through the cap, the rotation and the repeat filter.
	log, logf, err := OpenLog(filepath.Join(*dir, "keeper.log"))
	if err != nil {
		slog.Error("ollie-remote keeper", "err", err)
		return 1
	}
	defer logf.Close()
	lock, err := os.OpenFile(filepath.Join(*dir, "keeper.lock"), os.O_RDWR|os.O_CREATE, 0600)
	if err != nil {
		log.Error("ollie-remote keeper", "err", err)
		return 1
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		log.Error("ollie-remote keeper: another keeper runs", "err", err)
		return 1
	}
	ssh := paths.NewSSHConfig(*config, known)
	// What the keeper holds its hosts with, for status and ollie -H to
	// name it.
	if b, err := json.Marshal(ssh); err == nil {
		os.WriteFile(filepath.Join(*dir, paths.KeeperSSHFile), append(b, '\n'), 0600)
	}
	sock := ControlSocket(*dir)
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		log.Error("ollie-remote keeper", "err", err)
		return 1
	}
	log.Info("ollie-remote keeper: holding hosts", "ssh", ssh.String(), "dir", *dir)
	k := &keeper{hosts: map[string]*heldHost{}, log: log, ln: ln, quit: make(chan struct{}), broker: desktop.KeeperBroker(log), dir: *dir, ssh: ssh}
	go func() {
		for {
			c, err := ln.Accept()
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
	}()
	dctx, stopDesk := context.WithCancel(context.Background())
	deskDone := make(chan struct{})
	go func() {
		defer close(deskDone)
		if Desk == nil {
			return
		}
		if err := Desk(dctx, *dir, k.fleet, log); err != nil {
			log.Error("ollie-remote keeper: the desktop's namespace", "err", err)
		}
	}()
	// A keeper holding no host and answering nothing has no reason to stay
	// (an up that failed everywhere leaves one behind otherwise).
	go func() {
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
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	select {
	case <-k.quit:
	case s := <-sigs:
		log.Info("ollie-remote keeper: signal", "signal", s)
	}
	ln.Close()
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
	return 0
}

func (k *keeper) serve(c net.Conn) {
	defer c.Close()
	var req Request
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		return
	}
	enc := json.NewEncoder(c)
	var emu sync.Mutex
	send := func(r Reply) {
		emu.Lock()
		defer emu.Unlock()
		enc.Encode(r)
	}
	// A client that goes away cancels its request.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		io.Copy(io.Discard, c)
		cancel()
	}()
	switch req.Op {
	case "up":
		sock, dr, err := k.up(ctx, req, func(msg string) { send(Reply{Host: req.Host, Msg: msg}) })
		var unreachable *connectError
		send(Reply{Host: req.Host, Done: true, Socket: sock, Err: errString(err), Result: dr, Unreachable: errors.As(err, &unreachable) && (!tunnel.Permanent(err) || errors.As(err, new(*net.DNSError)))})
	case "down":
		note, err := k.down(ctx, req.Host, req.Stop)
		send(Reply{Host: req.Host, Done: true, Err: errString(err), Msg: note})
	case "list":
		send(Reply{Done: true, Held: k.list(), Policy: desktop.PolicyState(k.broker), Runs: k.runUsage()})
	case "deploy":
		k.mu.Lock()
		h := k.hosts[req.Host]
		k.mu.Unlock()
		if h == nil || req.Bundle == nil {
			send(Reply{Host: req.Host, Done: true, Err: ErrNotRunning.Error()})
			return
		}
		// The host's name may mean another machine in deploy's ssh
		// configuration: deploy then connects as that one says.
		if s := paths.NewSSHConfig(req.Config, req.Known); !s.Equal(k.ssh) {
			send(Reply{Host: req.Host, Done: true, Err: "ollie-remote up holds it with " + k.ssh.String(), OtherSSH: true})
			return
		}
		r := h.deploy(ctx, req.Bundle, req.Keep, req.Deadlines, func(msg string) { send(Reply{Host: req.Host, Msg: msg}) })
		send(Reply{Host: req.Host, Done: true, Result: &r})
	default:
		send(Reply{Done: true, Err: fmt.Sprintf("unknown request %q", req.Op)})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// startScript starts the host's olliesrv, or finds the running one, and
// prints "running|started SOCKET pid N".
const startScript = `r="$HOME/.local/share/ollie"
if [ ! -x "$r/current/olliesrv" ]; then echo "ollie is not deployed on this host: run ollie-remote deploy first" >&2; exit 3; fi
exec "$r/current/olliesrv" start`

func startRemote(ctx context.Context, c *tunnel.Client, dl deploy.Deadlines) (string, error) {
	ctx, cancel := deploy.Within(ctx, dl.ForStep())
	defer cancel()
	cmd := deploy.Sh(startScript)
	if c.Appliance() {
		cmd = "olliesrv start"
	}
	out, err := c.RunLimit(ctx, cmd, nil, deploy.MaxSmallReply)
	if err != nil {
		return "", deploy.RemoteError("olliesrv start", err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || (f[0] != "running" && f[0] != "started") {
		return "", fmt.Errorf("olliesrv start said %q", out)
	}
	return f[1], nil
}

// connectError is an up that never reached the host.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// up holds the host; with a bundle it deploys it first, over the
// connection it then keeps (a deploy that changes nothing costs one probe),
// and returns the deploy's result.
func (k *keeper) up(ctx context.Context, req Request, progress func(string)) (string, *deploy.Result, error) {
	if err := k.sameSSH(req); err != nil {
		return "", nil, err
	}
	k.mu.Lock()
	if h := k.hosts[req.Host]; h != nil {
		k.mu.Unlock()
		progress("already up")
		if req.Models != nil {
			if err := h.waitModels(ctx, k.startModels(h, req.Models), progress); err != nil {
				return h.sock, nil, err
			}
		}
		if req.Bundle == nil {
			return h.sock, nil, nil
		}
		r := h.deploy(ctx, req.Bundle, req.Keep, req.Deadlines, progress)
		if r.Err != "" {
			return h.sock, &r, errors.New(r.Err)
		}
		return h.sock, &r, nil
	}
	k.mu.Unlock()

	opts := tunnel.Options{ConfigFile: req.Config, KnownHosts: req.Known, AcceptNew: req.AcceptNew, Override: req.Override, Log: k.log.With("host", req.Host)}
	th := tunnel.NewHost(req.Host, opts)
	progress("connecting")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dctx, dcancel := context.WithTimeout(cctx, cmp.Or(req.ConnectTimeout, 2*time.Minute))
	c, err := th.Client(dctx)
	dcancel()
	if err != nil {
		th.Close()
		return "", nil, &connectError{err}
	}
	var dr *deploy.Result
	if req.Bundle != nil {
		r := deploy.Push(ctx, c, req.Bundle, req.Keep, req.Deadlines, progress)
		r.Host = req.Host
		dr = &r
		if r.Err != "" {
			th.Close()
			return "", dr, errors.New(r.Err)
		}
	}
	remote, err := startRemote(cctx, c, req.Deadlines)
	if err != nil {
		th.Close()
		return "", dr, err
	}
	progress("olliesrv serves " + remote)
	h := &heldHost{name: req.Host, named: k.approvalName, th: th, deadlines: req.Deadlines, remoteSock: remote, sock: paths.RemoteSocketIn(k.dir, req.Host), since: time.Now(), proxyState: "connected", lastClient: c, log: k.log.With("host", req.Host)}
	if err := removeStaleSocket(h.sock); err != nil {
		th.Close()
		return "", dr, err
	}
	ln, err := net.Listen("unix", h.sock)
	if err != nil {
		th.Close()
		return "", dr, err
	}
	h.ln = ln
	h.proxy = &resume.Proxy{Dial: h.dial, Log: k.log.With("host", req.Host), OnState: h.setProxyState}
	go h.proxy.Serve(ln)
	h.stop, h.approvalsDone = make(chan struct{}), make(chan struct{})
	go h.carryApprovals(k.broker, k.log.With("host", req.Host))
	k.mu.Lock()
	if other := k.hosts[req.Host]; other != nil {
		k.mu.Unlock()
		h.close()
		return other.sock, dr, nil
	}
	k.hosts[req.Host] = h
	k.mu.Unlock()
	if req.Models != nil {
		if err := h.waitModels(ctx, k.startModels(h, req.Models), progress); err != nil {
			return h.sock, dr, err
		}
	}
	return h.sock, dr, nil
}

// dial reaches the host's namespace over the current connection. On a
// connection it has not used before it runs olliesrv start first: that
// finds the daemon (or starts it again if it died), and only a session
// makes sshd turn on TCP_NODELAY for the connection; without one, a stream
// through a reconnected tunnel ran ten times slower.
func (h *heldHost) dial(ctx context.Context) (net.Conn, error) {
	c, err := h.th.Client(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	fresh := h.lastClient != c
	h.mu.Unlock()
	if fresh {
		remote, err := startRemote(ctx, c, h.deadlines)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		h.remoteSock, h.lastClient = remote, c
		h.mu.Unlock()
	}
	h.mu.Lock()
	sock := h.remoteSock
	h.mu.Unlock()
	conn, err := c.DialUnix(sock)
	if err == nil {
		return conn, nil
	}
	// A daemon that died is started again as revive does (counted, with
	// its backoff); one systemd runs is its to start.
	h.revive(ctx, c, h.log)
	h.mu.Lock()
	sock, supervisor := h.remoteSock, h.daemon.supervisor
	h.mu.Unlock()
	if conn, err2 := c.DialUnix(sock); err2 == nil {
		return conn, nil
	}
	if supervisor != "" {
		return nil, fmt.Errorf("%v (systemd's %s starts olliesrv here)", err, supervisor)
	}
	// Stopped on purpose, or in a crash loop's wait: a client wants
	// it, as ollie -H would.
	h.startMu.Lock()
	remote, serr := startRemote(ctx, c, h.deadlines)
	h.startMu.Unlock()
	if serr != nil {
		return nil, fmt.Errorf("%v; starting olliesrv again: %w", err, serr)
	}
	h.mu.Lock()
	h.remoteSock = remote
	h.mu.Unlock()
	return c.DialUnix(remote)
}

func (h *heldHost) setProxyState(s string) {
	h.mu.Lock()
	h.proxyState = s
	h.mu.Unlock()
}

// letApprovalsGo ends carryApprovals, which removes this desktop's
// registration from the host (and no other's), and waits for it.
func (h *heldHost) letApprovalsGo() {
	if h.stop == nil {
		return
	}
	h.stopOnce.Do(func() { close(h.stop) })
	select {
	case <-h.approvalsDone:
	case <-time.After(10 * time.Second):
	}
}

func (h *heldHost) close() {
	h.endModels()
	h.letApprovalsGo()
	if h.proxy != nil {
		h.proxy.Close()
	}
	if h.ln != nil {
		h.ln.Close()
	}
	os.Remove(h.sock)
	h.th.Close()
}

func (h *heldHost) deploy(ctx context.Context, b *deploy.Bundle, keep int, dl deploy.Deadlines, progress func(string)) deploy.Result {
	h.deployMu.Lock()
	defer h.deployMu.Unlock()
	start := time.Now()
	// The connection may be down and reconnecting: wait for it no longer
	// than four steps.
	cctx, cancel := deploy.Within(ctx, 4*dl.ForStep())
	c, err := h.th.Client(cctx)
	cancel()
	if err != nil {
		return deploy.Result{Host: h.name, Err: err.Error(), Took: time.Since(start)}
	}
	r := deploy.Push(ctx, c, b, keep, dl, progress)
	r.Host = h.name
	r.Took = time.Since(start)
	return r
}

func (k *keeper) down(ctx context.Context, host string, stop bool) (note string, err error) {
	k.mu.Lock()
	h := k.hosts[host]
	delete(k.hosts, host)
	left := len(k.hosts)
	k.mu.Unlock()
	if h == nil {
		return "", fmt.Errorf("%s is not up", host)
	}
	// First the registration, while the daemon is there to remove it.
	h.letApprovalsGo()
	// And the desktop's model, which the host's agents would go on
	// asking for.
	mctx, mcancel := deploy.Within(ctx, 2*h.deadlines.ForStep())
	note = h.withdrawModels(mctx)
	mcancel()
	if stop {
		// Then the proxy, so that no client's redial starts the
		// daemon again once it stops.
		if h.proxy != nil {
			h.proxy.Close()
		}
		sctx, cancel := deploy.Within(ctx, 2*h.deadlines.ForStep())
		defer cancel()
		if c, cerr := h.th.Client(sctx); cerr == nil && c.Appliance() {
			err = fmt.Errorf("olliesrv on %s is its SSH listener too: it keeps running (stop its service on the host)", host)
		} else if cerr == nil {
			if _, rerr := c.RunLimit(sctx, deploy.Sh(`r="$HOME/.local/share/ollie"; exec "$r/current/olliesrv" stop`), nil, deploy.MaxSmallReply); rerr != nil {
				err = deploy.RemoteError("olliesrv stop", rerr)
			}
		} else {
			err = cerr
		}
	}
	h.close()
	if left == 0 {
		k.once.Do(func() { close(k.quit) })
	}
	return note, err
}

func (k *keeper) list() []HeldInfo {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []HeldInfo
	for _, h := range k.hosts {
		h.mu.Lock()
		keyless := k.broker.Refused(h.name).Keyless
		if h.shownAs != "" {
			keyless += k.broker.Refused(h.shownAs).Keyless
		}
		hi := HeldInfo{Host: h.name, Socket: h.sock, Tunnel: h.th.State(), Proxy: h.proxyState, Since: h.since,
			Approvals: h.approvals, Broker: h.brokerSock, Models: h.models, Keyless: keyless,
			Restarts: h.daemon.restarts, Daemon: h.restartsNote()}
		if h.modelProxy != nil {
			hi.ModelUsage = h.modelProxy.UsageOf(h.name)
		}
		out = append(out, hi)
		h.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// removeStaleSocket removes a socket file nobody answers on, so that a
// leftover never blocks the listener.
func removeStaleSocket(sock string) error {
	if _, err := os.Lstat(sock); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process", sock)
	}
	return os.Remove(sock)
}

// Call sends a request to the keeper and hands each reply to on
// until the final one, which it returns.
func Call(ctx context.Context, req Request, on func(Reply)) (Reply, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", ControlSocket(Of(req)))
	if err != nil {
		return Reply{}, ErrNotRunning
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return Reply{}, err
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r Reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return Reply{}, err
		}
		if r.Done {
			return r, nil
		}
		if on != nil {
			on(r)
		}
	}
	if ctx.Err() != nil {
		return Reply{}, ctx.Err()
	}
	return Reply{}, fmt.Errorf("the keeper closed the connection (see %s)", filepath.Join(Of(req), "keeper.log"))
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

// Others says which hosts the keepers of other ssh configurations
// than s hold, a line per keeper, with the flags that reach it.
func Others(ctx context.Context, s paths.SSHConfig) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var out []string
	for _, o := range otherKeepers(ctx, s) {
		var hosts []string
		for _, h := range o.held {
			hosts = append(hosts, termsafe.Line(h.Host))
		}
		out = append(out, fmt.Sprintf("also up with %s: %s (ollie-remote %s)", o.ssh, strings.Join(hosts, " "),
			strings.Join(append(o.ssh.Flags(), "status"), " ")))
	}
	return out
}

// otherKeeper is a running keeper of another ssh configuration, with the
// hosts it holds.
type otherKeeper struct {
	dir  string
	ssh  paths.SSHConfig
	held []HeldInfo
}

// otherKeepers asks the keepers of other ssh configurations than s which
// hosts they hold; those holding none, or not answering within ctx, are
// left out.
func otherKeepers(ctx context.Context, s paths.SSHConfig) []otherKeeper {
	var out []otherKeeper
	for _, dir := range paths.KeeperDirs() {
		o, err := paths.KeeperSSH(dir)
		if err != nil || o.Equal(s) || dir == paths.KeeperDir(s) || paths.KeeperDir(o) != dir {
			continue
		}
		r, err := Call(ctx, Request{Op: "list", Config: o.Config, Known: o.Known}, nil)
		if err != nil || len(r.Held) == 0 {
			continue
		}
		out = append(out, otherKeeper{dir: dir, ssh: o, held: r.Held})
	}
	return out
}

// othersNow is otherKeepers for this keeper, asked again when the last
// answer is more than a second old. A keeper's list never asks others,
// so two keepers asking each other at once do not wait on each other.
func (k *keeper) othersNow() []otherKeeper {
	k.othersMu.Lock()
	defer k.othersMu.Unlock()
	if time.Since(k.othersAt) > time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		k.others = otherKeepers(ctx, k.ssh)
		cancel()
		k.othersAt = time.Now()
	}
	return k.others
}

// fleet is the hosts of every keeper of this desktop user, this one's
// first, each with the Name the fleet namespace shows: the fleet is one
// whichever keeper serves it, and a name two keepers hold is told apart
// by their tags rather than hiding one of the hosts.
func (k *keeper) fleet() []HeldInfo {
	own := k.list()
	others := k.othersNow()
	if len(others) == 0 {
		for i := range own {
			own[i].Name = own[i].Host
		}
		return own
	}
	count := map[string]int{}
	for _, h := range own {
		count[h.Host]++
	}
	for _, o := range others {
		for _, h := range o.held {
			count[h.Host]++
		}
	}
	tags := paths.KeeperTags(paths.KeeperDirs())
	name := func(dir, host string) string {
		if count[host] > 1 {
			return paths.QualifiedHost(host, tags[dir])
		}
		return host
	}
	out := own
	for i := range out {
		out[i].Name = name(k.dir, out[i].Host)
	}
	for _, o := range others {
		for _, h := range o.held {
			h.Name = name(o.dir, h.Host)
			out = append(out, h)
		}
	}
	return out
}

// approvalName is the name under which a request from host (as this
// keeper holds it) is shown and matched against the policy: host, or
// host~TAG while a keeper of another ssh configuration holds a host of
// that name too, which may be another machine.
func (k *keeper) approvalName(host string) string {
	for _, o := range k.othersNow() {
		for _, h := range o.held {
			if h.Host == host {
				return paths.QualifiedHost(host, paths.KeeperTags(paths.KeeperDirs())[k.dir])
			}
		}
	}
	return host
}

// ErrNotRunning is that no keeper answers on the control socket.
var ErrNotRunning = errors.New("ollie-remote up is not running")
