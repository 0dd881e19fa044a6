// Package desk is the desktop's own namespace: the fleet as one file
// system. The keeper behind ollie-remote up serves it on a socket beside
// the hosts' ones (ollie -H fleet):
//
//	host/idx             name, state, version and round-trip time of each held host
//	host/NAME/           that host's whole namespace (mounted by tunnel/mux); the
//	                     hosts of every keeper of this user, a name two hold
//	                     as NAME~TAG (paths.QualifiedHost)
//	run/idx, run/ID/     the fleet runs this desktop keeps: status, hosts, results
//	bypass/pending/H.ID  every host's pending approvals, decided by writing, as on one host
//	session/new, idx     sessions across the hosts: new takes remote=HOST
//
// What it trusts: the hosts' answers are data. What it reads from a host
// to list or index is bounded and its names checked; a host that does not
// answer within a few seconds is shown as not connected, never waited on
// by the files of other hosts.
package desk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"ollie/ns"
	"ollie/ns/client"
	"ollie/tunnel/fleet"
)

// A Host is one host the keeper holds.
type Host struct {
	Name   string // as the person named it
	Socket string // its namespace, forwarded here
	Tunnel string // the connection's state, for people
}

// Config is what the namespace shows.
type Config struct {
	Held func() []Host // the hosts held now
	Runs fleet.Store
	Log  *slog.Logger
	// Timeout bounds each host's answer to a file that reads many hosts;
	// 0 means 3 s.
	Timeout time.Duration
}

type desk struct {
	cfg Config

	mu       sync.Mutex
	sessions map[string][]byte // host → its last session/idx, shown while it does not answer
}

// Limits on what a host's answer may be, here.
const (
	maxIdx     = 256 << 10
	maxFile    = 64 << 10
	maxPending = 1000 // entries of a host's bypass/pending
)

// spec declares the desktop's namespace.
func spec(cfg Config) (*desk, *ns.Node) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	d := &desk{cfg: cfg, sessions: map[string][]byte{}}
	hosts := ns.Listing(func(context.Context, *ns.Call) ([]Host, error) { return d.held(), nil },
		func(h Host) ns.Entry { return ns.Entry{Name: h.Name, Key: h.Name} })
	runs := ns.Listing(func(context.Context, *ns.Call) ([]*fleet.Run, error) { runs, _ := cfg.Runs.List(); return runs, nil },
		func(r *fleet.Run) ns.Entry { return ns.Entry{Name: r.ID, Key: r.ID} })
	pending := ns.Listing(d.pendingList, func(p pendingEntry) ns.Entry { return ns.Entry{Name: p.host + "." + p.id, Key: p.host + "." + p.id} })
	return d, ns.Dir("", 0555, "",
		ns.Dir("host", 0555, "The hosts this desktop holds (ollie-remote up, fleet run).",
			ns.ReadFile("idx", 0444, "Held hosts: name<TAB>state (the tunnel's)<TAB>version<TAB>round-trip time (ms; - when it does not answer).", d.hostIdx),
			ns.Dynamic("hname", 0555, "A host's whole namespace.", hosts),
		),
		ns.Dir("run", 0555, "Fleet runs this desktop keeps (ollie-remote fleet).",
			ns.ReadFile("idx", 0444, "Runs, newest first: id<TAB>state<TAB>hosts<TAB>finished<TAB>created (RFC 3339)<TAB>goal (its first line).", d.runIdx),
			ns.Dynamic("rid", 0555, "One run.", runs,
				ns.ReadFile("status", 0444, "The run: id, state, session, created, hosts, working, finished, failed, goal; one 'key value' a line.", d.runRead(runStatus)),
				ns.ReadFile("hosts", 0444, "Its hosts: host<TAB>state<TAB>result<TAB>seconds<TAB>steps<TAB>tool calls<TAB>tokens<TAB>detail.", d.runRead(runHosts)),
				ns.ReadFile("results", 0444, "One JSON object per host, as fleet run -json prints them.", d.runRead(runResults)),
			),
		),
		ns.Dir("bypass", 0555, "Approvals across the hosts.",
			ns.Dir("pending", 0555, "Every held host's pending requests, named HOST.ID.",
				ns.DynamicFile("pid", 0600, "A host's pending request: read it; write approve, always, deny [REASON] or 'password SECRET', as in the host's bypass/pending.",
					pending, &ns.Node{Read: d.pendingRead, Write: d.pendingWrite}),
			),
		),
		ns.Dir("session", 0555, "Sessions across the hosts.",
			ns.RdWrFile("new", 0666, "Create a session on a host: write 'name=X remote=HOST [cwd=DIR]'; read its name. It lives at host/HOST/session/NAME.", d.newSession),
			ns.ReadFile("idx", 0444, "Sessions of every held host, as a host's session/idx: id<TAB>name<TAB>paused<TAB>connected (the host answers now)<TAB>remote (its host)<TAB>cwd<TAB>state<TAB>yolo.", d.sessionIdx),
		),
	)
}

func (d *desk) held() []Host {
	hs := d.cfg.Held()
	sort.Slice(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })
	return hs
}

func (d *desk) host(name string) (Host, bool) {
	for _, h := range d.cfg.Held() {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// each runs f on every held host at once, each within the timeout, and
// returns the results in the hosts' order.
func each[T any](ctx context.Context, d *desk, f func(ctx context.Context, h Host, c *client.Conn) (T, error)) ([]Host, []T, []error) {
	hs := d.held()
	out := make([]T, len(hs))
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
			defer cancel()
			type result struct {
				v   T
				err error
			}
			// A host that answers after the timeout answers no one.
			done := make(chan result, 1)
			go func() {
				c, err := client.DialTimeout(h.Socket, "", d.cfg.Timeout)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer c.Close()
				v, err := f(hctx, h, c)
				done <- result{v, err}
			}()
			select {
			case r := <-done:
				out[i], errs[i] = r.v, r.err
			case <-hctx.Done():
				errs[i] = fmt.Errorf("%s: no answer within %s", h.Name, d.cfg.Timeout)
			}
		}()
	}
	wg.Wait()
	return hs, out, errs
}

func (d *desk) hostIdx(ctx context.Context, c *ns.Call) ([]byte, error) {
	type info struct {
		version string
		rtt     time.Duration
	}
	hs, infos, errs := each(ctx, d, func(ctx context.Context, h Host, c *client.Conn) (info, error) {
		start := time.Now()
		if _, err := c.Stat(ctx, "/"); err != nil {
			return info{}, err
		}
		rtt := time.Since(start)
		st, err := c.ReadLimit(ctx, "status", maxFile)
		if err != nil {
			return info{}, err
		}
		v := "-"
		for _, line := range strings.Split(string(st), "\n") {
			if s, ok := strings.CutPrefix(line, "version "); ok {
				v = field(s)
			}
		}
		return info{version: v, rtt: rtt}, nil
	})
	var b strings.Builder
	for i, h := range hs {
		version, rtt := "-", "-"
		if errs[i] == nil {
			version, rtt = infos[i].version, fmt.Sprintf("%.1f", float64(infos[i].rtt.Microseconds())/1000)
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", h.Name, field(h.Tunnel), version, rtt)
	}
	return []byte(b.String()), nil
}

var plainField = regexp.MustCompile(`^[[:graph:]]{1,128}$`)

// field is one column of a host's words: printable, no tabs or spaces
// (a column is one word), bounded; else "?".
func field(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "-"
	}
	s = strings.Join(strings.Fields(s), "_")
	if !plainField.MatchString(s) {
		return "?"
	}
	return s
}

func (d *desk) runIdx(ctx context.Context, c *ns.Call) ([]byte, error) {
	runs, _ := d.cfg.Runs.List()
	var b strings.Builder
	for _, r := range runs {
		finished := 0
		for _, h := range r.Hosts {
			if h.Finished() {
				finished++
			}
		}
		fmt.Fprintf(&b, "%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.State, len(r.Hosts), finished, r.Created.Format(time.RFC3339), firstLine(r.Goal))
	}
	return []byte(b.String()), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.ReplaceAll(line, "\t", " ")
}

func (d *desk) runRead(f func(*fleet.Run) []byte) func(context.Context, *ns.Call) ([]byte, error) {
	return func(ctx context.Context, c *ns.Call) ([]byte, error) {
		r, err := d.cfg.Runs.Load(c.Key("rid"))
		if err != nil {
			return nil, err
		}
		return f(r), nil
	}
}

func runStatus(r *fleet.Run) []byte {
	working, results := r.Counts()
	finished, failed := 0, 0
	for k, n := range results {
		if k == "complete" || k == "blocked" || k == "done" {
			finished += n
		} else {
			failed += n
		}
	}
	return fmt.Appendf(nil, "id %s\nstate %s\nsession %s\ncreated %s\nhosts %d\nworking %d\nfinished %d\nfailed %d\ngoal %s\n",
		r.ID, r.State, r.Session, r.Created.Format(time.RFC3339), len(r.Hosts), working, finished, failed, firstLine(r.Goal))
}

func runHosts(r *fleet.Run) []byte {
	var b strings.Builder
	now := time.Now()
	for _, h := range r.Hosts {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%.1f\t%d\t%d\t%d\t%s\n", h.Name, strings.ReplaceAll(h.State, "\t", " "), orDash(h.Result), h.Took(now).Seconds(),
			h.Steps, h.ToolCalls, h.Tokens, firstLine(h.Detail))
	}
	return []byte(b.String())
}

func runResults(r *fleet.Run) []byte {
	var b bytes.Buffer
	fleet.WriteJSON(&b, r)
	return b.Bytes()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// A pending request of a host, as bypass/pending/HOST.ID names it.
type pendingEntry struct{ host, id string }

var pendingID = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

func (d *desk) pendingList(ctx context.Context, c *ns.Call) ([]pendingEntry, error) {
	hs, lists, _ := each(ctx, d, func(ctx context.Context, h Host, c *client.Conn) ([]string, error) {
		// Past maxPending entries the host's listing is cut short; the
		// ones read are still shown.
		dirs, err := c.LsLimit(ctx, "bypass/pending", maxPending)
		if err != nil && !errors.Is(err, client.ErrTooLong) {
			return nil, err
		}
		var ids []string
		for _, e := range dirs {
			// A host names its requests; only IDs of the gate's form
			// are shown, so that a name cannot walk elsewhere.
			if pendingID.MatchString(e.Name) && len(ids) < 1000 {
				ids = append(ids, e.Name)
			}
		}
		return ids, nil
	})
	var out []pendingEntry
	for i, h := range hs {
		for _, id := range lists[i] {
			out = append(out, pendingEntry{host: h.Name, id: id})
		}
	}
	return out, nil
}

// pendingFile splits HOST.ID: host names may hold dots, IDs do not.
func (d *desk) pendingFile(c *ns.Call) (Host, string, error) {
	key := c.Key("pid")
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return Host{}, "", fmt.Errorf("%s: not HOST.ID", key)
	}
	h, ok := d.host(key[:i])
	if !ok {
		return Host{}, "", fmt.Errorf("%s: no host %s is held", key, key[:i])
	}
	return h, path.Join("bypass/pending", key[i+1:]), nil
}

func (d *desk) pendingRead(ctx context.Context, c *ns.Call) ([]byte, error) {
	h, name, err := d.pendingFile(c)
	if err != nil {
		return nil, err
	}
	return d.onHost(ctx, h, func(ctx context.Context, hc *client.Conn) ([]byte, error) { return hc.ReadLimit(ctx, name, maxFile) })
}

func (d *desk) pendingWrite(ctx context.Context, c *ns.Call, data []byte) error {
	h, name, err := d.pendingFile(c)
	if err != nil {
		return err
	}
	_, err = d.onHost(ctx, h, func(ctx context.Context, hc *client.Conn) ([]byte, error) { return nil, hc.Write(ctx, name, data) })
	return err
}

// onHost runs f on one host's namespace, within the timeout.
func (d *desk) onHost(ctx context.Context, h Host, f func(ctx context.Context, c *client.Conn) ([]byte, error)) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*d.cfg.Timeout)
	defer cancel()
	c, err := client.DialTimeout(h.Socket, "", d.cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.Name, err)
	}
	defer c.Close()
	b, err := f(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.Name, err)
	}
	return b, nil
}

// newSession creates a session on the host remote= names, passing the
// other keys on as they were written.
func (d *desk) newSession(ctx context.Context, c *ns.Call, req []byte) ([]byte, error) {
	var rest []string
	remote := ""
	for _, w := range strings.Fields(string(req)) {
		if v, ok := strings.CutPrefix(w, "remote="); ok {
			remote = v
			continue
		}
		rest = append(rest, w)
	}
	if remote == "" {
		return nil, fmt.Errorf("session/new: remote=HOST is needed here: the desktop runs no sessions of its own (held: %s)", d.names())
	}
	h, ok := d.host(remote)
	if !ok {
		return nil, fmt.Errorf("session/new: remote=%s: that host is not held (held: %s; ollie-remote up %s)", remote, d.names(), remote)
	}
	b, err := d.onHost(ctx, h, func(ctx context.Context, hc *client.Conn) ([]byte, error) {
		return hc.RdWrLimit(ctx, "session/new", []byte(strings.Join(rest, " ")), maxFile)
	})
	if err != nil {
		return nil, fmt.Errorf("session/new: %w", err)
	}
	return b, nil
}

func (d *desk) names() string {
	var names []string
	for _, h := range d.held() {
		names = append(names, h.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// sessionIdx is every host's session index with the truth in its
// connected and remote columns: a host that does not answer now shows the
// sessions it listed last, not connected.
func (d *desk) sessionIdx(ctx context.Context, c *ns.Call) ([]byte, error) {
	hs, idxs, errs := each(ctx, d, func(ctx context.Context, h Host, c *client.Conn) ([]byte, error) {
		return c.ReadLimit(ctx, "session/idx", maxIdx)
	})
	var b strings.Builder
	for i, h := range hs {
		idx, connected := idxs[i], errs[i] == nil
		d.mu.Lock()
		if connected {
			d.sessions[h.Name] = idx
		} else {
			idx = d.sessions[h.Name]
		}
		d.mu.Unlock()
		for _, line := range strings.Split(string(idx), "\n") {
			f := strings.Split(line, "\t")
			if len(f) < 8 {
				continue
			}
			f[3], f[4] = fmt.Sprint(connected), h.Name
			b.WriteString(strings.Join(f, "\t") + "\n")
		}
	}
	return []byte(b.String()), nil
}
