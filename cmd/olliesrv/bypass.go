package main

import (
	"context"
	"fmt"
	"strings"

	"ollie/broker"
	"ollie/ns"
)

// The namespace side of the approval gate: bypass/policy, bypass/broker
// and bypass/pending/{id}.

func (n *namespace) bypassPolicy(ctx context.Context, c *ns.Call) ([]byte, error) {
	return []byte(n.gate.Policy().String()), nil
}

func (n *namespace) setBypassPolicy(ctx context.Context, c *ns.Call, data []byte) error {
	p, err := broker.ParseHostPolicy(string(data), n.gate.Policy())
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
// broker's socket, -PATH removes that registration and no other.
func (n *namespace) setBypassBroker(ctx context.Context, c *ns.Call, data []byte) error {
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return fmt.Errorf("%s: write PATH to register a broker's socket, -PATH to remove it", c.Path())
	}
	for _, l := range lines {
		if p, ok := strings.CutPrefix(l, "-"); ok {
			n.gate.Unregister(p)
			continue
		}
		if err := n.gate.Register(strings.TrimPrefix(l, "+")); err != nil {
			return fmt.Errorf("%s: %w", c.Path(), err)
		}
	}
	return nil
}

func (n *namespace) listPending(ctx context.Context, c *ns.Call) ([]ns.Entry, error) {
	var ents []ns.Entry
	for _, r := range n.gate.Pending() {
		ents = append(ents, ns.Entry{Name: r.ID, Key: r.ID})
	}
	return ents, nil
}

func (n *namespace) lookupPending(ctx context.Context, c *ns.Call, name string) (ns.Entry, bool) {
	if _, ok := n.gate.PendingRequest(name); !ok {
		return ns.Entry{}, false
	}
	return ns.Entry{Name: name, Key: name}, true
}

func (n *namespace) readPending(ctx context.Context, c *ns.Call) ([]byte, error) {
	r, ok := n.gate.PendingRequest(c.Key("id"))
	if !ok {
		return nil, fmt.Errorf("%s: request %s is no longer pending", c.Path(), c.Key("id"))
	}
	return []byte(r.Prompt() + "write approve, always or deny [REASON] to this file to answer\n"), nil
}

func (n *namespace) decidePending(ctx context.Context, c *ns.Call, data []byte) error {
	return n.gate.Decide(c.Key("id"), string(data))
}
