package inventory

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"ollie/internal/termsafe"
	"ollie/tunnel"
)

// Host is one host of a fleet.
type Host struct {
	// Name is the alias to dial (tunnel.Dial, keeper.Request.Host): a
	// name as typed (user@host:port too), or an inventory's or the ssh
	// config's host name.
	Name string
	// Override is what the inventory says about reaching the host, for
	// tunnel.Options.Override; nil when it says nothing.
	Override *tunnel.Override
	// Groups are the inventory groups the host is in, directly or through
	// children, sorted, without "all": Ansible's group_names.
	Groups []string
	// Vars are the host's variables named ollie_* with a string value
	// (group vars included, as Ansible resolves them): ollie's own
	// settings for the host, such as ollie_model_via.
	Vars map[string]string
}

// Errors a TargetError carries, for errors.Is.
var (
	ErrNoMatch      = errors.New("matches no host")
	ErrEmptyGroup   = errors.New("group has no hosts")
	ErrUnknownGroup = errors.New("no such group or file")
	ErrNoTargets    = errors.New("no hosts given")
)

// TargetError is a target that names no host, or a bad one.
type TargetError struct {
	Target string // as typed: "web*", "@db", "@hosts.txt"
	Msg    string // what was wrong, for people
	Err    error  // one of the Err values above, or the cause
}

func (e *TargetError) Error() string {
	return termsafe.Line(fmt.Sprintf("inventory: %s: %s", e.Target, e.Msg))
}

func (e *TargetError) Unwrap() error { return e.Err }

// SyntaxError is an inventory (or a file of names) that cannot be read.
type SyntaxError struct {
	File string
	Line int // 0 when not known
	Msg  string
}

func (e *SyntaxError) Error() string {
	if e.Line > 0 {
		return termsafe.Line(fmt.Sprintf("inventory: %s:%d: %s", e.File, e.Line, e.Msg))
	}
	return termsafe.Line(fmt.Sprintf("inventory: %s: %s", e.File, e.Msg))
}

// inventory is an inventory as read, either way: its groups and each
// host's vars with its groups' vars applied.
type inventory struct {
	name   string // the file or directory, as given
	source string // how it was read, for Resolve's answer
	groups map[string]*group
	vars   map[string]map[string]any

	memberOf map[string][]string // host → group_names; built on first use
}

type group struct {
	hosts    []string
	children []string
}

func (inv *inventory) hasGroup(name string) bool { return inv.groups[name] != nil }

func (inv *inventory) hasHost(name string) bool {
	_, ok := inv.vars[name]
	return ok
}

// groupHosts lists a group's hosts and its children's, level by level:
// its own first, then its children's in order, then theirs.
func (inv *inventory) groupHosts(name string) []string {
	var hosts []string
	seenHost := map[string]bool{}
	seenGroup := map[string]bool{name: true}
	level := []string{name}
	for len(level) > 0 {
		var next []string
		for _, g := range level {
			gr := inv.groups[g]
			if gr == nil {
				continue
			}
			for _, h := range gr.hosts {
				if !seenHost[h] {
					seenHost[h] = true
					hosts = append(hosts, h)
				}
			}
			for _, c := range gr.children {
				if !seenGroup[c] {
					seenGroup[c] = true
					next = append(next, c)
				}
			}
		}
		level = next
	}
	return hosts
}

// allHosts is every host: those under "all", then any the groups do not
// reach (an inventory script's _meta may hold such), sorted.
func (inv *inventory) allHosts() []string {
	hosts := inv.groupHosts("all")
	seen := map[string]bool{}
	for _, h := range hosts {
		seen[h] = true
	}
	var rest []string
	for h := range inv.vars {
		if !seen[h] {
			rest = append(rest, h)
		}
	}
	sort.Strings(rest)
	return append(hosts, rest...)
}

func (inv *inventory) groupNames(host string) []string {
	if inv.memberOf == nil {
		inv.memberOf = map[string][]string{}
		names := make([]string, 0, len(inv.groups))
		for g := range inv.groups {
			names = append(names, g)
		}
		sort.Strings(names)
		for _, g := range names {
			if g == "all" {
				continue
			}
			for _, h := range inv.groupHosts(g) {
				inv.memberOf[h] = append(inv.memberOf[h], g)
			}
		}
	}
	return slices.Clone(inv.memberOf[host])
}
