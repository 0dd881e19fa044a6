package keeper

// The hosts the keeper holds: bringing one up, reaching its namespace,
// deploying to it and letting it go.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/internal/paths"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
	"ollie/tunnel/models"
	"ollie/tunnel/resume"
)

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
	held := k.hosts[req.Host]
	k.mu.Unlock()
	if held != nil {
		return k.upAgain(ctx, held, req, progress)
	}

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

// upAgain is up for a host already held: it gives the host the desktop's
// model and deploys the bundle, when asked to, over the connection held.
func (k *keeper) upAgain(ctx context.Context, h *heldHost, req Request, progress func(string)) (string, *deploy.Result, error) {
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
