package keeper

// The keepers of other ssh configurations, whose hosts the fleet and the
// approvals' names take into account.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

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
