// Package gate is the host's approval gate: olliesrv serves it on
// $NAMESPACE/elevate for the sessions' tool runners, relays each request
// to the newest desktop broker registered in bypass/broker, or parks it in
// bypass/pending/{id} for someone to answer by writing a file, or denies
// it, as bypass/policy says; and it keeps the host's own list of tools
// approved always (LoadAlways). It speaks package broker's protocol, and
// trusts as that package's documentation says: an asker only as the
// kernel describes it, each request id once, an answer and a password
// only from the desktop it relayed to or a writer of bypass/pending.
package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"ollie/broker"
	"ollie/internal/changes"
	"ollie/internal/peer"
)

// NoBroker says what a host does with a request while no desktop broker
// is connected.
type NoBroker string

const (
	Park     NoBroker = "pending" // wait in bypass/pending/{id} for someone to write a decision
	DenyNow  NoBroker = "deny"    // deny at once
	DefaultT          = 5 * time.Minute
)

// YoloPolicy says whether a host allows yolo sessions.
type YoloPolicy string

const (
	// YoloAllow lets the admin create them: a connected desktop broker is
	// asked first (its policy or its person may deny); with none, the
	// admin's word on this host is enough.
	YoloAllow YoloPolicy = "allow"
	// YoloDeny refuses them on this host, without asking anyone.
	YoloDeny YoloPolicy = "deny"
)

// HostPolicy is a host's bypass/policy.
type HostPolicy struct {
	NoBroker NoBroker
	Timeout  time.Duration // how long a request waits for an answer
	Yolo     YoloPolicy    // "" denies, as YoloDeny
}

// YoloAllowed reports whether the policy lets the admin ask for a yolo
// session; the zero value does not.
func (p HostPolicy) YoloAllowed() bool { return p.Yolo == YoloAllow }

func (p HostPolicy) String() string {
	yolo := YoloDeny
	if p.YoloAllowed() {
		yolo = YoloAllow
	}
	return fmt.Sprintf("nobroker=%s timeout=%s yolo=%s\n", p.NoBroker, p.Timeout, yolo)
}

// ParseHostPolicy reads "nobroker=pending|deny timeout=DURATION
// yolo=allow|deny" (any part may be left out; what is left out keeps its
// value in old).
func ParseHostPolicy(s string, old HostPolicy) (HostPolicy, error) {
	p := old
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return old, fmt.Errorf("bypass/policy: %q is not key=value (nobroker=pending|deny timeout=5m yolo=allow|deny)", f)
		case k == "yolo" && (v == string(YoloAllow) || v == string(YoloDeny)):
			p.Yolo = YoloPolicy(v)
		case k == "nobroker" && (v == string(Park) || v == string(DenyNow)):
			p.NoBroker = NoBroker(v)
		case k == "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return old, fmt.Errorf("bypass/policy: timeout %q is not a positive duration like 90s or 5m", v)
			}
			p.Timeout = d
		default:
			return old, fmt.Errorf("bypass/policy: unknown setting %q (nobroker=pending|deny timeout=5m yolo=allow|deny)", f)
		}
	}
	return p, nil
}

// Gate is a host's side: toolsrv children ask it, and it asks the desktop
// broker connected over SSH, or parks the request for the namespace, or
// denies, as the host's policy says.
type Gate struct {
	Log     *slog.Logger
	Publish func(topic, data string) // events: bypass.pending, bypass.decided
	// TrustExe, if set, is the only executable whose processes may ask
	// (the toolsrv children are this same binary).
	TrustExe string

	// Dir is the namespace directory, where ollie-remote forwards its
	// broker-* sockets: one nobody listens on any more is removed from it
	// (and from the registrations), since sshd leaves the file behind when
	// its connection ends. "" removes none.
	Dir string

	mu      sync.Mutex
	policy  HostPolicy
	brokers []string          // registered sockets leading to desktop brokers, newest first
	keys    map[string][]byte // a registration's key, sent with each request relayed to it; memory only
	joined  changes.Counter   // bumped under mu at each registration: parked requests go to it, and a request knows it missed one
	pending map[string]*pendingReq
	used    map[string]bool // request ids seen: each is single use
	always  map[string]bool // tool names approved "always" through the namespace
	wg      sync.WaitGroup
	lns     []net.Listener
	closing chan struct{} // closed by Shutdown
	asking  int           // conversations waiting on a desktop's answer or password
	quiet   chan struct{} // closed when asking drops to 0, while Shutdown waits
	base    context.Context
	cancel  context.CancelCauseFunc // ends every conversation when Shutdown stops waiting
}

// New returns a gate that parks requests for 5 minutes when no broker
// is connected.
func New(log *slog.Logger) *Gate {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	base, cancel := context.WithCancelCause(context.Background())
	return &Gate{Log: log, policy: HostPolicy{NoBroker: Park, Timeout: DefaultT, Yolo: YoloAllow},
		pending: map[string]*pendingReq{}, used: map[string]bool{}, always: map[string]bool{},
		closing: make(chan struct{}), base: base, cancel: cancel}
}

// ErrShutdown ends the conversations still in flight when Shutdown stops
// waiting for them.
var ErrShutdown = errors.New("broker: olliesrv on this host stopped before the request was answered; ask again once it is back")

func (g *Gate) Policy() HostPolicy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

func (g *Gate) SetPolicy(p HostPolicy) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.policy = p
}

func (g *Gate) publish(topic, data string) {
	if g.Publish != nil {
		g.Publish(topic, data)
	}
}

// Serve answers the toolsrv children connecting on l until l closes or
// Shutdown closes it.
func (g *Gate) Serve(l net.Listener) error {
	g.mu.Lock()
	select {
	case <-g.closing:
		g.mu.Unlock()
		l.Close()
		return net.ErrClosed
	default:
	}
	g.lns = append(g.lns, l)
	g.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		g.mu.Lock()
		select {
		case <-g.closing:
			g.mu.Unlock()
			c.Close()
			return net.ErrClosed
		default:
		}
		g.wg.Add(1)
		g.mu.Unlock()
		go func() {
			defer g.wg.Done()
			g.ServeConn(c)
		}()
	}
}

// ServeConn handles one request from a toolsrv child.
func (g *Gate) ServeConn(c net.Conn) {
	defer c.Close()
	if err := g.checkPeer(c); err != nil {
		g.Log.Warn("broker gate: refused a peer", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(g.base, 30*time.Second)
	in, err := broker.Receive(ctx, c)
	cancel()
	if err != nil {
		g.Log.Warn("broker gate: bad request", "err", err)
		return
	}
	req := in.Req
	req.Host = "" // the desktop says which host this is, from the connection
	g.mu.Lock()
	if g.used[req.ID] {
		g.mu.Unlock()
		in.Answer(broker.Answer{Decision: broker.Deny, Reason: "request id " + req.ID + " was already used"})
		return
	}
	g.used[req.ID] = true
	q := &asking{g: g, policy: g.policy, always: g.always[req.Tool] && !req.Bypass}
	g.mu.Unlock()
	defer g.dropPassword(req.ID)
	ctx, cancel = context.WithTimeoutCause(g.base, q.policy.Timeout, fmt.Errorf("nobody answered within %v", q.policy.Timeout))
	defer cancel()
	var bad *broker.AttemptError
	if err := broker.Converse(ctx, in, q, 0); errors.As(err, &bad) {
		g.Log.Warn("broker gate: a password ask refused; the request is denied", "id", req.ID, "attempt", bad.Attempt, "reason", bad.Reason())
	}
}

// checkPeer admits only this user's processes that are not sandboxed (a
// Landlock-confined tool runs with no_new_privs) and, when TrustExe is
// set, only that executable.
func (g *Gate) checkPeer(c net.Conn) error {
	cred, err := peer.Cred(c)
	if err != nil {
		return err
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("pid %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	if nnp, err := peer.NoNewPrivs(int(cred.Pid)); err != nil {
		return err
	} else if nnp {
		return fmt.Errorf("pid %d is sandboxed (no_new_privs): a tool cannot ask for its own elevation", cred.Pid)
	}
	if g.TrustExe != "" {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cred.Pid))
		if err != nil {
			return err
		}
		want, _ := filepath.EvalSymlinks(g.TrustExe)
		if !slices.Contains([]string{g.TrustExe, want}, strings.TrimSuffix(exe, " (deleted)")) {
			return fmt.Errorf("pid %d runs %s, not ollie's toolsrv", cred.Pid, exe)
		}
	}
	return nil
}

// waitingOnDesktop counts the conversations waiting on a desktop's answer
// or password, which Shutdown waits for.
func (g *Gate) waitingOnDesktop(delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.asking += delta; g.asking == 0 && g.quiet != nil {
		close(g.quiet)
		g.quiet = nil
	}
}

// Shutdown stops the gate: it closes the listeners Serve was given and
// denies the parked requests at once, saying why (no one could answer
// them before the daemon is gone). It waits, until ctx ends, for the
// requests a desktop is being asked (its answer, or a sudo password), so
// that an answer given is passed on; then it ends every conversation:
// those still waiting on a desktop are denied with ErrShutdown's reason
// and their connections to the desktop closed, so no request is left
// half-answered, and Shutdown returns ctx's error. It does not wait for
// tools that were approved and are running.
func (g *Gate) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	select {
	case <-g.closing:
	default:
		close(g.closing)
	}
	lns := g.lns
	g.lns = nil
	var quiet chan struct{}
	if g.asking > 0 {
		quiet = make(chan struct{})
		g.quiet = quiet
	}
	g.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	var err error
	if quiet != nil {
		select {
		case <-quiet:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	g.cancel(ErrShutdown)
	g.wg.Wait()
	return err
}
