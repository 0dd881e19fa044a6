package keeper

// The model channel: for as long as it holds a host that was given the
// desktop's model, the keeper forwards a socket on the host to the
// desktop's model proxy (tunnel/models), over each SSH connection, and
// keeps the host's backend configuration pointing at it.
//
// Any process of the host's user can connect to that socket, a sandboxed
// tool included, so the proxy serves only requests carrying a key: a fresh
// one per SSH connection, which the keeper gives the host's olliesrv over
// 9P (ctl desktop-key, the owner's file) and to no one else, and gives
// again to a daemon that restarted (giveModelsKey, once the approval
// channel sees the new daemon). It is never written to a file.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"sync"
	"time"

	"ollie/ns/client"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
	"ollie/tunnel/models"
)

// ModelsRoute gives a host the desktop's model. It comes over the
// keeper's private control socket with the upstream's key, which stays in
// the keeper's memory.
type ModelsRoute struct {
	Upstream models.Upstream `json:"upstream"`
	Model    string          `json:"model,omitempty"` // the host's default model through it
	Limits   models.Limits   `json:"limits"`

	// live is the key of the SSH connection carrying the route now;
	// startModels sets it. It is the route's, not the host's, because
	// heldHost's fields are keeper.go's.
	live *hostKey
}

// hostKey is the key that the host's olliesrv must send on the models
// socket of the current SSH connection.
type hostKey struct {
	// mu is held while the key is given, so that of two givings at once
	// (carryModels on a new connection, giveModelsKey on a new daemon)
	// the last one gives the current key.
	mu   sync.Mutex
	sock string
	key  []byte // nil between connections
}

// set makes key the current one (nil: none) and, if c is set, gives it to
// the host's daemon over c.
func (k *hostKey) set(ctx context.Context, h *heldHost, c *tunnel.Client, sock string, key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sock, k.key = sock, key
	if c == nil || key == nil {
		return nil
	}
	nc, err := h.nsConn(ctx, c)
	if err != nil {
		return err
	}
	defer nc.Close()
	return k.giveLocked(ctx, nc)
}

// give gives the current key, if any, to the daemon on nc.
func (k *hostKey) give(ctx context.Context, nc *client.Conn) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.giveLocked(ctx, nc)
}

// maxCtlReply is the most the keeper reads of the host's answer to a
// ctl request: the host writes it, and it is a line.
const maxCtlReply = 4 << 10

func (k *hostKey) giveLocked(ctx context.Context, nc *client.Conn) error {
	if k.key == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := nc.RdWrLimit(ctx, "ctl", []byte("desktop-key "+k.sock+" "+hex.EncodeToString(k.key)), maxCtlReply)
	if client.IsServerError(err) {
		// The error is the daemon's, which never quotes the key.
		return fmt.Errorf("olliesrv did not take the desktop model's key (an olliesrv older than this ollie-remote? ollie-remote deploy updates it): %w", err)
	}
	if err != nil {
		return fmt.Errorf("giving olliesrv the desktop model's key: %w", err)
	}
	return nil
}

// giveModelsKey gives the daemon on nc the key of the host's models
// socket: the approval channel calls it once it has registered with a
// daemon, new ones included (restarted, crashed, upgraded by deploy),
// which have forgotten the key. It does nothing when the host has no
// models route.
func (h *heldHost) giveModelsKey(ctx context.Context, nc *client.Conn, log *slog.Logger) {
	h.mu.Lock()
	route, carried := h.route, h.stopModels != nil
	h.mu.Unlock()
	if route == nil || route.live == nil || !carried {
		return
	}
	err := route.live.give(ctx, nc)
	switch {
	case err == nil || ctx.Err() != nil:
	case client.IsServerError(err):
		// The daemon refused it (an older olliesrv): the model is
		// missing until the host is deployed again.
		log.Warn("ollie-remote: the host's olliesrv cannot use the desktop's model", "err", err)
		h.setModels("missing: " + err.Error())
	default:
		// The daemon went again: the approval channel calls again once
		// the next one answers.
		log.Info("ollie-remote: giving olliesrv the desktop model's key", "err", err)
	}
}

// Describe names the route for people, without its key.
func (r *ModelsRoute) Describe() string {
	if r == nil {
		return ""
	}
	s := "desktop:" + r.Upstream.Name
	if r.Model != "" {
		s += " " + r.Model
	}
	return s
}

// DesktopBackend is the name the host's namespace gives the desktop's
// model (ollie read backends).
const DesktopBackend = "desktop"

// DesktopBackendsFile is the host's backend configuration the keeper
// writes, beside the host's own backends.json, which wins on a name.
const DesktopBackendsFile = "backends.desktop.json"

// modelsSocket is where, on the host, the desktop's model is reached:
// beside the namespace's socket.
func (h *heldHost) modelsSocket() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return path.Join(path.Dir(h.remoteSock), "models.sock")
}

// proxyFor is the keeper's proxy to an upstream, one per upstream and
// limits, so that a run's usage adds up across its hosts.
func (k *keeper) proxyFor(r *ModelsRoute) *models.Proxy {
	key := fmt.Sprintf("%s\x00%s\x00%d\x00%d", r.Upstream.Name, r.Upstream.URL, r.Limits.Concurrent, r.Limits.RunTokens)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proxies == nil {
		k.proxies = map[string]*models.Proxy{}
	}
	p := k.proxies[key]
	if p == nil {
		p = &models.Proxy{Upstream: r.Upstream, Limits: r.Limits, Log: k.log}
		k.proxies[key] = p
	}
	// A key given again (rotated) is used from now on.
	p.SetKey(r.Upstream.Key)
	return p
}

// carryModels forwards, for every SSH connection to the host, the host's
// models socket to p, and writes the host's desktop backend configuration
// once per connection, until the host is let go or the route changes.
func (h *heldHost) carryModels(ctx context.Context, route *ModelsRoute, p *models.Proxy, ready func(), log *slog.Logger) {
	defer route.live.set(ctx, h, nil, "", nil)
	for delay := 250 * time.Millisecond; ctx.Err() == nil; {
		c, err := h.th.Client(ctx)
		if err != nil {
			if ctx.Err() != nil || tunnel.Permanent(err) {
				return
			}
			h.setModels("missing: no SSH connection: " + err.Error())
			sleepCtx(ctx, delay)
			continue
		}
		sock := h.modelsSocket()
		// A socket left by an earlier connection would make sshd refuse
		// the forward: this desktop's route replaces it.
		if c.Appliance() {
			// The listener replaces a stale socket itself.
		} else if sc, err := c.SFTP(); err == nil {
			sc.Remove(sock)
		}
		// The daemon has the connection's key before the socket exists:
		// a request it makes with the previous connection's key finds no
		// socket and is retried, where the new one would refuse it for
		// good.
		key := make([]byte, 32)
		rand.Read(key)
		err = route.live.set(ctx, h, c, sock, key)
		var ln net.Listener
		if err == nil {
			ln, err = c.ListenUnix(sock)
		}
		if err == nil {
			err = h.writeDesktopBackend(ctx, c, route, sock)
		}
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			log.Warn("ollie-remote: the desktop's model cannot reach this host", "err", err)
			h.setModels("missing: " + err.Error())
			delay = backOff(c.Done(), ctx.Done(), delay)
			continue
		}
		delay = 250 * time.Millisecond
		h.setModels("ok: " + route.Describe())
		ready()
		served := make(chan struct{})
		sctx, stop := context.WithCancel(ctx)
		go func() {
			defer close(served)
			p.Serve(sctx, h.name, ln, key)
		}()
		select {
		case <-c.Done():
		case <-ctx.Done():
		}
		stop()
		ln.Close()
		<-served
		route.live.set(ctx, h, nil, "", nil) // the connection's key is spent
	}
}

// writeDesktopBackend writes the host's desktop backend configuration and
// has the daemon read its backends again.
func (h *heldHost) writeDesktopBackend(ctx context.Context, c *tunnel.Client, route *ModelsRoute, sock string) error {
	b, _ := json.MarshalIndent(map[string]any{
		"backends": map[string]any{DesktopBackend: map[string]any{
			"type": "openai", "url": "http://desktop/v1", "socket": sock, "model": route.Model,
		}},
	}, "", "  ")
	if c.Appliance() {
		if _, err := c.RunLimit(ctx, "olliesrv install backends desktop", bytes.NewReader(append(b, '\n')), deploy.MaxSmallReply); err != nil {
			return deploy.RemoteError("writing the desktop's backend on the host", err)
		}
		return h.invalidateBackends(ctx, c)
	}
	sc, err := c.SFTP()
	if err != nil {
		return err
	}
	home, err := sc.Getwd()
	if err != nil {
		return err
	}
	dir := path.Join(home, ".config", "ollie")
	sc.MkdirAll(dir)
	tmp := path.Join(dir, "."+DesktopBackendsFile+".tmp")
	f, err := sc.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("writing %s on the host: %w", path.Join(dir, DesktopBackendsFile), err)
	}
	_, werr := f.Write(append(b, '\n'))
	f.Chmod(0600)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = sc.PosixRename(tmp, path.Join(dir, DesktopBackendsFile))
	}
	if werr != nil {
		sc.Remove(tmp)
		return fmt.Errorf("writing %s on the host: %w", path.Join(dir, DesktopBackendsFile), werr)
	}
	return h.invalidateBackends(ctx, c)
}

// invalidateBackends has the host's daemon read its backends again.
func (h *heldHost) invalidateBackends(ctx context.Context, c *tunnel.Client) error {
	nc, err := h.nsConn(ctx, c)
	if err != nil {
		return err
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := nc.RdWrLimit(cctx, "ctl", []byte("invalidate"), maxCtlReply); err != nil {
		return fmt.Errorf("olliesrv did not take the desktop's backend: %w", err)
	}
	return nil
}

func (h *heldHost) setModels(s string) {
	h.mu.Lock()
	h.models = s
	h.mu.Unlock()
}

// startModels carries route to the host from now on, in place of any
// route it had. The channel it returns is closed once the host's daemon
// has the desktop's backend, so that agents made after up use it.
func (k *keeper) startModels(h *heldHost, route *ModelsRoute) <-chan struct{} {
	p := k.proxyFor(route)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.mu.Lock()
	old, oldDone := h.stopModels, h.modelsDone
	route.live = &hostKey{}
	h.stopModels, h.modelsDone, h.route, h.modelProxy = cancel, done, route, p
	h.mu.Unlock()
	if old != nil {
		old()
		<-oldDone
	}
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		h.carryModels(ctx, route, p, func() { once.Do(func() { close(ready) }) }, k.log.With("host", h.name))
	}()
	return ready
}

// waitModels waits for the host's daemon to have the desktop's backend, at
// most a minute; after that the route is said to be missing, and status
// says why.
func (h *heldHost) waitModels(ctx context.Context, ready <-chan struct{}, progress func(string)) error {
	progress("giving the host this desktop's model")
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		h.mu.Lock()
		state := h.models
		h.mu.Unlock()
		return fmt.Errorf("the desktop's model did not reach the host within a minute (%s)", state)
	}
}

// endModels stops carrying the host's route.
// withdrawModels, for down, stops carrying the desktop's model to the host
// and takes its backend away there (the file the keeper wrote, and the
// daemon reads its backends again), so that the host's agents go back to
// its own backends instead of failing on a model that is no longer
// connected. It says what it did, for the person; "" when the host had
// no route.
func (h *heldHost) withdrawModels(ctx context.Context) string {
	h.mu.Lock()
	had := h.stopModels != nil
	h.mu.Unlock()
	if !had {
		return ""
	}
	h.endModels()
	fail := func(err error) string {
		return "the desktop's model stays configured on the host (" + err.Error() + "): its agents' turns fail with \"the desktop's model is not connected\" until ollie-remote up -model-via desktop " + h.name +
			", or until ~/.config/ollie/" + DesktopBackendsFile + " is removed there and ollie rdwr ctl <<< invalidate is run"
	}
	c, err := h.th.Client(ctx)
	if err != nil {
		return fail(err)
	}
	if c.Appliance() {
		return fail(fmt.Errorf("an appliance host keeps its backends file"))
	}
	sc, err := c.SFTP()
	if err != nil {
		return fail(err)
	}
	home, err := sc.Getwd()
	if err != nil {
		return fail(err)
	}
	if err := sc.Remove(path.Join(home, ".config", "ollie", DesktopBackendsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	if err := h.invalidateBackends(ctx, c); err != nil {
		return fail(err)
	}
	return "its agents no longer use this desktop's model: they use the host's own backends again (ollie-remote up -model-via desktop " + h.name + " gives it back)"
}

func (h *heldHost) endModels() {
	h.mu.Lock()
	stop, done := h.stopModels, h.modelsDone
	h.stopModels = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
}

// RunUsage is the model usage of every run through the desktop, from every
// proxy of the keeper.
func (k *keeper) runUsage() map[string]models.Usage {
	k.mu.Lock()
	var ps []*models.Proxy
	for _, p := range k.proxies {
		ps = append(ps, p)
	}
	k.mu.Unlock()
	out := map[string]models.Usage{}
	for _, p := range ps {
		for run, u := range p.Runs() {
			t := out[run]
			t.Requests += u.Requests
			t.Refused += u.Refused
			t.Failed += u.Failed
			t.PromptTokens += u.PromptTokens
			t.CompletionTokens += u.CompletionTokens
			out[run] = t
		}
	}
	return out
}
