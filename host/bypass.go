package host

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"ollie/broker"
	"ollie/broker/gate"
	"ollie/ns"
)

// The namespace side of the approval gate: bypass/policy, bypass/broker
// and bypass/pending/{id}.

func (n *namespace) bypassPolicy(ctx context.Context, c *ns.Call) ([]byte, error) {
	return []byte(n.gate.Policy().String()), nil
}

// policyKeys are bypass/policy's settings (gate.ParseHostPolicy).
var policyKeys = []string{"nobroker", "timeout", "yolo"}

func (n *namespace) setBypassPolicy(ctx context.Context, c *ns.Call, data []byte) error {
	// The request's form, a key once, is checked as every request's is;
	// its settings are the broker's to read.
	if _, err := keyValues(string(data), policyKeys); err != nil {
		return fmt.Errorf("%s: %w", c.Path(), err)
	}
	p, err := gate.ParseHostPolicy(string(data), n.gate.Policy())
	if err != nil {
		return err
	}
	n.gate.SetPolicy(p)
	n.bus.Publish("bypass.policy", strings.TrimSpace(p.String()))
	return nil
}

// bypassBroker lists the registered brokers, newest first: the gate asks
// them in that order.
func (n *namespace) bypassBroker(ctx context.Context, c *ns.Call) ([]byte, error) {
	var b strings.Builder
	for _, p := range n.gate.Brokers() {
		b.WriteString(p + "\n")
	}
	return []byte(b.String()), nil
}

// setBypassBroker takes a line per change: PATH (or +PATH) registers a
// broker's socket, -PATH removes that registration and no other. "PATH
// key=HEX" registers it with the key its broker expects with every
// request; the key is kept in memory only, and never shown or quoted.
func (n *namespace) setBypassBroker(ctx context.Context, c *ns.Call, data []byte) error {
	defer broker.Zero(data)
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return fmt.Errorf("%s: write PATH to register a broker's socket (PATH key=HEX with its key), -PATH to remove it", c.Path())
	}
	for _, l := range lines {
		if p, ok := strings.CutPrefix(l, "-"); ok {
			n.gate.Unregister(p)
			continue
		}
		path, key, err := brokerKey(strings.TrimPrefix(l, "+"))
		if err != nil {
			return fmt.Errorf("%s: %w", c.Path(), err)
		}
		err = n.gate.RegisterKeyed(path, key)
		broker.Zero(key)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Path(), err)
		}
	}
	return nil
}

// brokerKey splits "PATH key=HEX" into the path and the key's bytes. An
// error names the path, never the key.
func brokerKey(l string) (path string, key []byte, err error) {
	i := strings.LastIndex(l, " key=")
	if i < 0 {
		return l, nil, nil
	}
	path, h := strings.TrimSpace(l[:i]), l[i+len(" key="):]
	if len(h) < 32 || len(h) > 128 || len(h)%2 != 0 {
		return "", nil, fmt.Errorf("the key of %s is not 32 to 128 hex digits", path)
	}
	key = make([]byte, len(h)/2)
	if _, err := hex.Decode(key, []byte(h)); err != nil {
		broker.Zero(key)
		return "", nil, fmt.Errorf("the key of %s is not hex", path)
	}
	return path, key, nil
}

// pendingEntry is a parked request's file: owned by the live agent that
// asked, so that its tools may read what they wait on (mode 0400: the
// owner reads, only the admin answers), and by the admin when none did
// (a yolo session's request, or its agent gone). Another agent's tools
// learn nothing of what it runs or with which arguments.
func (n *namespace) pendingEntry(r *broker.Request) ns.Entry {
	owner := ""
	if r.Agent != "" && n.agents.get(r.Agent) != nil {
		owner = r.Agent
	}
	return ns.Entry{Name: r.ID, Key: r.ID, Owner: owner}
}

func (n *namespace) readPending(ctx context.Context, c *ns.Call) ([]byte, error) {
	text, ok := n.gate.PendingText(c.Key("id"))
	if !ok {
		return nil, fmt.Errorf("%s: request %s is no longer pending", c.Path(), c.Key("id"))
	}
	return []byte(text), nil
}

// decidePending answers a parked request: a decision, or, for a sudo
// request approved here, its password. An "always" is kept in the host's
// always file too, as the desktop keeps one in its policy file, so that
// it outlasts the daemon.
func (n *namespace) decidePending(ctx context.Context, c *ns.Call, data []byte) error {
	id := c.Key("id")
	if pw, ok := gate.CutPassword(data); ok {
		// data is this handler's own copy (ns clones what it is given):
		// the gate zeroes the password once handed on, this the rest.
		defer broker.Zero(data)
		if err := n.gate.Password(ctx, id, pw); err != nil {
			return fmt.Errorf("%s: %w", c.Path(), err)
		}
		return nil
	}
	req, _ := n.gate.PendingRequest(id)
	if err := n.gate.Decide(id, string(data)); err != nil {
		return err
	}
	if req == nil || n.always == "" || !n.gate.AlwaysAllowed(req.Tool) {
		return nil
	}
	if err := gate.SaveAlways(n.always, req.Tool, req.ID); err != nil {
		// The answer is given; only keeping it failed.
		n.log.Warn("olliesrv: an always answer holds until the daemon stops: it could not be kept", "tool", req.Tool, "err", err)
		return fmt.Errorf("%s: approved always until olliesrv stops, but not kept in %s: %w", c.Path(), n.always, err)
	}
	return nil
}

// loadAlways approves the tools the host's always file names, kept from
// "always" answers given before the daemon started.
func (n *namespace) loadAlways() {
	if n.always == "" {
		return
	}
	tools, err := gate.LoadAlways(n.always)
	if err != nil {
		n.log.Error("olliesrv: the always file cannot be read; no tool is approved always until it is fixed", "err", err)
		return
	}
	n.gate.AllowAlways(tools...)
}
