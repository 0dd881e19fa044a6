package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"ollie/internal/termsafe"
	"ollie/ns/client"
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
	var mu sync.Mutex
	// msg may carry the host's words (its socket's path, its errors): one
	// line, made safe.
	say := func(host, msg string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, "%s: %s\n", termsafe.Line(host), termsafe.Field(msg, maxHostMessage))
	}
	failed := 0
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
				mu.Lock()
				failed++
				mu.Unlock()
				return
			}
			say(h, fmt.Sprintf("up: ollie -H %s (socket %s)", h, r.Socket))
			if route != nil {
				say(h, "its agents may use this desktop's model: backend "+keeper.DesktopBackend+" ("+route.Describe()+")")
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
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
	type row struct{ host, version, uptime, sessions, agents, approvals, models, tunnel string }
	rows := make([]row, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := row{host: h, version: "-", uptime: "-", sessions: "-", agents: "-", approvals: "-", models: "-", tunnel: "down"}
			if info, ok := held[h]; ok {
				r.tunnel = info.Tunnel
				r.models = modelsCell(info)
				if info.Proxy != "" && info.Proxy != "connected" {
					r.tunnel += "; " + info.Proxy
				}
				st, err := readStatus(ctx, info.Socket)
				if err != nil {
					r.tunnel += "; namespace: " + err.Error()
				} else {
					r.version, r.sessions, r.agents = st["version"], st["sessions"], st["agents"]
					if s, err := strconv.Atoi(st["uptime"]); err == nil {
						r.uptime = (time.Duration(s) * time.Second).String()
					}
				}
				// A connected tunnel never hides a missing approval
				// channel: the word here, the reason after the tunnel's.
				state := approvalsState(ctx, info, err == nil)
				word, why, _ := strings.Cut(state, ": ")
				r.approvals = cmp.Or(word, "-")
				if why != "" {
					r.tunnel += "; approvals: " + why
				}
			}
			rows[i] = r
		}()
	}
	wg.Wait()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tVERSION\tUPTIME\tSESSIONS\tAGENTS\tAPPROVALS\tMODEL\tTUNNEL")
	// Version, sessions, agents and the namespace's errors are the
	// host's words.
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Line(r.host), cell(r.version), r.uptime, cell(r.sessions), cell(r.agents),
			termsafe.Line(r.approvals), termsafe.Field(r.models, maxHostMessage), termsafe.Field(r.tunnel, maxHostMessage))
	}
	tw.Flush()
	return 0
}

// approvalsState is the approval channel's state as the keeper keeps it
// (ok, registering, missing: why), checked against the host: an ok whose
// socket the host's bypass/broker does not list is missing.
func approvalsState(ctx context.Context, info keeper.HeldInfo, reachable bool) string {
	if info.Approvals != keeper.ApprovalsOK || info.Broker == "" || !reachable {
		return info.Approvals
	}
	b, err := readHostFile(ctx, info.Socket, "bypass/broker")
	if err == nil && !keeper.Listed(b, info.Broker) {
		return keeper.ApprovalsMissing + ": the host does not list this desktop's broker socket"
	}
	if info.Keyless > 0 {
		// Worth a look: something on the host asked in olliesrv's name.
		return fmt.Sprintf("%s (%d refused without olliesrv's key)", info.Approvals, info.Keyless)
	}
	return info.Approvals
}

// readStatus reads a host's status file through its forwarded socket.
func readStatus(ctx context.Context, sock string) (map[string]string, error) {
	b, err := readHostFile(ctx, sock, "status")
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			st[k] = v
		}
	}
	return st, nil
}

// readHostFile reads a file of a host's namespace through its forwarded
// socket, within 10 s.
func readHostFile(ctx context.Context, sock, name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := client.DialAs(sock, "")
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer c.Close()
		// The host writes the file: read no more than a status can hold.
		b, err := c.ReadLimit(ctx, name, 64<<10)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer within 10s")
	}
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

// modelsCell is the MODEL column of status: the host's own backends, or
// the desktop's model it was given, its channel's state and what it used.
func modelsCell(info keeper.HeldInfo) string {
	if info.Models == "" {
		return "host's own"
	}
	s := strings.TrimPrefix(info.Models, "ok: ")
	if u := info.ModelUsage; u.Requests > 0 || u.Refused > 0 || u.Denied > 0 {
		s += fmt.Sprintf(" (%d requests, %d tokens", u.Requests, u.Tokens())
		if u.Refused > 0 {
			s += fmt.Sprintf(", %d refused", u.Refused)
		}
		if u.Denied > 0 {
			// A daemon just started asks before it is given the key; more
			// than a few is another process on the host trying the socket.
			s += fmt.Sprintf(", %d without olliesrv's key", u.Denied)
		}
		s += ")"
	}
	return strings.ReplaceAll(s, "\t", " ")
}
