package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"ollie/internal/termsafe"
	"ollie/tunnel/deploy"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

func (c *common) request(op, host string) keeper.Request {
	r := keeper.Request{Op: op, Host: host, Config: c.config, AcceptNew: c.acceptNew, Stop: c.stop, Keep: c.keep, Deadlines: c.deadlines}
	if c.knownHost != "" {
		r.Known = []string{c.knownHost}
	}
	return r
}

// upMain has the keeper bring each host up, a few at once, and says where
// each namespace is.
func upMain(ctx context.Context, c *common, hosts []string, stdout, stderr io.Writer) int {
	rules, err := models.LoadRules(models.RulesFile())
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote: %s\n", termsafe.Line(err.Error()))
		return 2
	}
	hostRoutes := map[string]*keeper.ModelsRoute{}
	rs := routes{}
	for _, h := range hosts {
		if hostRoutes[h], err = rs.get(c.choose(h, nil, nil, rules)); err != nil {
			fmt.Fprintf(stderr, "ollie-remote: %s: %s\n", termsafe.Line(h), termsafe.Line(err.Error()))
			return 2
		}
	}
	if err := keeper.Ensure(ctx, c.ssh()); err != nil {
		fmt.Fprintf(stderr, "ollie-remote: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	say := hostLines(stdout)
	var failed atomic.Int32
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			req := c.request("up", h)
			route := hostRoutes[h]
			req.Models = route
			r, err := keeper.Call(ctx, req, func(r keeper.Reply) { say(h, r.Msg) })
			if err == nil && r.Err != "" {
				err = fmt.Errorf("%s", r.Err)
			}
			if err != nil {
				say(h, "FAILED: "+err.Error())
				failed.Add(1)
				return
			}
			say(h, fmt.Sprintf("up: ollie -H %s (socket %s)", h, r.Socket))
			if route != nil {
				say(h, "its agents may use this desktop's model: backend "+keeper.DesktopBackend+" ("+route.Describe()+")")
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		return 1
	}
	return 0
}

func downMain(ctx context.Context, c *common, hosts []string, stdout, stderr io.Writer) int {
	if c.all {
		r, err := keeper.Call(ctx, c.request("list", ""), nil)
		if err != nil {
			fmt.Fprintln(stdout, "nothing is up")
			return 0
		}
		for _, h := range r.Held {
			hosts = append(hosts, h.Host)
		}
	}
	status := 0
	for _, h := range hosts {
		r, err := keeper.Call(ctx, c.request("down", h), nil)
		if err == nil && r.Err != "" {
			err = fmt.Errorf("%s", r.Err)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s\n", termsafe.Line(h), termsafe.Field(err.Error(), maxHostMessage))
			status = 1
			continue
		}
		if c.stop {
			fmt.Fprintf(stdout, "%s: down, olliesrv stopped\n", termsafe.Line(h))
		} else {
			fmt.Fprintf(stdout, "%s: down (olliesrv keeps running on the host)\n", termsafe.Line(h))
		}
		if r.Msg != "" {
			fmt.Fprintf(stdout, "%s: %s\n", termsafe.Line(h), termsafe.Field(r.Msg, maxHostMessage))
		}
	}
	return status
}

// statusMain prints a table of the hosts named, or of every host held.
func statusMain(ctx context.Context, c *common, hosts []string, stdout, stderr io.Writer) int {
	held := map[string]keeper.HeldInfo{}
	everyHost := len(hosts) == 0 || c.all
	policy := ""
	if r, err := keeper.Call(ctx, c.request("list", ""), nil); err == nil {
		policy = r.Policy
		for _, h := range r.Held {
			held[h.Host] = h
			if everyHost {
				hosts = append(hosts, h.Host)
			}
		}
	}
	// Below the table: what else is up, then the policy's state.
	notes := keeper.Others(ctx, c.ssh())
	if policy != "" {
		// The desktop's own file, but its text may quote anything.
		notes = append(notes, "broker policy: "+termsafe.Field(policy, maxHostMessage))
	}
	// What the keeper did for each host's daemon: restarts, a crash loop,
	// or why it leaves the daemon alone. The cause quotes the host's log.
	for _, h := range hosts {
		if info, ok := held[h]; ok && info.Daemon != "" {
			notes = append(notes, termsafe.Line(h)+": "+termsafe.Field(info.Daemon, maxHostMessage))
		}
	}
	defer func() {
		for _, n := range notes {
			fmt.Fprintf(stdout, "\n%s\n", n)
		}
	}()
	if len(hosts) == 0 {
		fmt.Fprintln(stdout, "nothing is up: ollie-remote up HOST...")
		return 0
	}
	keeper.WriteStatus(stdout, keeper.Statuses(ctx, hosts, held))
	return 0
}

// deployThroughKeeper deploys over the connection up holds, if the keeper
// of deploy's ssh configuration holds the host.
func deployThroughKeeper(ctx context.Context, c *common, host string, b *deploy.Bundle, progress func(string)) (deploy.Result, bool) {
	req := c.request("deploy", host)
	req.Bundle = b
	r, err := keeper.Call(ctx, req, func(r keeper.Reply) { progress(r.Msg) })
	if err == nil && r.OtherSSH {
		// Honour deploy's own -F and known_hosts.
		progress(fmt.Sprintf("%s; deploying with %s over a new connection", r.Err, c.ssh()))
	}
	if err != nil || r.Result == nil {
		return deploy.Result{}, false
	}
	return *r.Result, true
}
