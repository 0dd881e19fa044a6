package keeper

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
)

// A StatusRow is one host's line of ollie-remote status. Version,
// sessions, agents and the namespace's errors are the host's words.
type StatusRow struct {
	Host, Version, Uptime, Sessions, Agents, Approvals, Models, Tunnel string
}

// Statuses asks each host, at once, how it is: through its keeper's
// socket for those held (its status file, its approval channel checked
// against the host), "down" for the others.
func Statuses(ctx context.Context, hosts []string, held map[string]HeldInfo) []StatusRow {
	rows := make([]StatusRow, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			r := StatusRow{Host: h, Version: "-", Uptime: "-", Sessions: "-", Agents: "-", Approvals: "-", Models: "-", Tunnel: "down"}
			if info, ok := held[h]; ok {
				r = heldStatus(ctx, r, info)
			}
			rows[i] = r
		})
	}
	wg.Wait()
	return rows
}

func heldStatus(ctx context.Context, r StatusRow, info HeldInfo) StatusRow {
	r.Tunnel = info.Tunnel
	r.Models = modelsCell(info)
	if info.Proxy != "" && info.Proxy != "connected" {
		r.Tunnel += "; " + info.Proxy
	}
	st, err := readStatus(ctx, info.Socket)
	if err != nil {
		r.Tunnel += "; namespace: " + err.Error()
	} else {
		r.Version, r.Sessions, r.Agents = st["version"], st["sessions"], st["agents"]
		if s, err := strconv.Atoi(st["uptime"]); err == nil {
			r.Uptime = (time.Duration(s) * time.Second).String()
		}
	}
	// A connected tunnel never hides a missing approval channel: the
	// word here, the reason after the tunnel's.
	state := approvalsState(ctx, info, err == nil)
	word, why, _ := strings.Cut(state, ": ")
	r.Approvals = cmp.Or(word, "-")
	if why != "" {
		r.Tunnel += "; approvals: " + why
	}
	return r
}

// WriteStatus writes the status table, every host's word made safe.
func WriteStatus(w io.Writer, rows []StatusRow) {
	const maxMessage = deploy.MaxHostMessage
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tVERSION\tUPTIME\tSESSIONS\tAGENTS\tAPPROVALS\tMODEL\tTUNNEL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Line(r.Host), termsafe.Cell(r.Version), r.Uptime,
			termsafe.Cell(r.Sessions), termsafe.Cell(r.Agents),
			termsafe.Line(r.Approvals), termsafe.Field(r.Models, maxMessage), termsafe.Field(r.Tunnel, maxMessage))
	}
	tw.Flush()
}

// approvalsState is the approval channel's state as the keeper keeps it
// (ok, registering, missing: why), checked against the host: an ok whose
// socket the host's bypass/broker does not list is missing.
func approvalsState(ctx context.Context, info HeldInfo, reachable bool) string {
	if info.Approvals != ApprovalsOK || info.Broker == "" || !reachable {
		return info.Approvals
	}
	b, err := readHostFile(ctx, info.Socket, "bypass/broker")
	if err == nil && !Listed(b, info.Broker) {
		return ApprovalsMissing + ": the host does not list this desktop's broker socket"
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

// modelsCell is the MODEL column of status: the host's own backends, or
// the desktop's model it was given, its channel's state and what it used.
func modelsCell(info HeldInfo) string {
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
