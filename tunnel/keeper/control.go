package keeper

// The control socket's requests and replies: what up, down, status and
// deploy ask the keeper, and how it answers them.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"ollie/broker/desktop"
	"ollie/internal/paths"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
	"ollie/tunnel/models"
)

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

// ErrNotRunning is that no keeper answers on the control socket.
var ErrNotRunning = errors.New("ollie-remote up is not running")
