package keeper

// Keeping the host's daemon running: when the olliesrv of a held host
// dies, the keeper starts it again, the way up started it.

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"ollie/internal/termsafe"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
)

// How the keeper restarts a daemon that died: at once the first
// loopStarts times within loopWindow, then after a wait that doubles from
// 2 s to maxBackoff; while one does not answer it looks again every
// checkEvery.
const (
	loopStarts = 3
	loopWindow = time.Minute
	maxBackoff = 30 * time.Second
	checkEvery = 2 * time.Second
	maxCause   = 300
)

// daemonState is what the keeper knows of the host's daemon, for
// restarts and status. Guarded by heldHost.mu.
type daemonState struct {
	restarts  int       // daemons the keeper started in place of one that died
	cause     string    // why it last started one (or failed to)
	at        time.Time // when
	tries     []time.Time
	failed    int // starts that failed since the last that did not
	backoff   time.Duration
	notBefore time.Time // no start before, in a crash loop
	loop      bool      // the crash loop was logged
	checked   time.Time // the last look since the daemon last answered

	// supervisor is the systemd unit that runs the daemon, which
	// restarts it itself; "" when none does.
	supervisor string
	// stopped is that the daemon shut down cleanly (ctl kill, olliesrv
	// stop, SIGTERM): on purpose, so it is not started until one answers
	// again.
	stopped bool
}

// reviveScript looks at the daemon that does not answer on $1, its
// socket. A socket file with no daemon holding the lock is one that died
// without shutting down (a clean shutdown removes it): startScript starts
// it again, or reports the one running. Before that it prints the pid the
// lock names and the dead daemon's last log lines, for the cause. No
// socket file is a daemon stopped on purpose: "stopped".
const reviveScript = `sock="$1"
if [ ! -S "$sock" ]; then echo stopped; exit 0; fi
echo "pid $(head -c 32 "$sock.lock" 2>/dev/null | tr -dc 0-9)"
log="${XDG_STATE_HOME:-$HOME/.local/state}/ollie/olliesrv.log"
if [ -f "$log" ]; then
	tail -n 100 "$log" | grep -E '^(panic|fatal error): ' | tail -n 1 | cut -c1-300 | sed 's/^/panic /'
	tail -n 1 "$log" | cut -c1-300 | sed 's/^/log /'
fi
` + startScript

// supervisorScript prints the cgroup of the daemon that holds the lock of
// $1, its socket, when systemd started it (INVOCATION_ID in its
// environment): a daemon started over ssh has neither.
const supervisorScript = `p=$(head -c 32 "$1.lock" 2>/dev/null | tr -dc 0-9)
[ -n "$p" ] || exit 0
tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -q '^INVOCATION_ID=' || exit 0
tail -n 1 "/proc/$p/cgroup" 2>/dev/null`

// SystemdUnit is the systemd service a daemon runs in, from the last line
// of its /proc/PID/cgroup ("0::/user.slice/…/olliesrv-ssh.service"), or
// "" when it is not in one of its own: a login session's scope, or the
// user manager itself.
func SystemdUnit(cgroup string) string {
	f := strings.SplitN(strings.TrimSpace(cgroup), ":", 3) // ID:CONTROLLERS:PATH
	if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
		return ""
	}
	unit := path.Base(f[2])
	if !strings.HasSuffix(unit, ".service") || strings.HasPrefix(unit, "user@") || len(unit) > 256 {
		return ""
	}
	return termsafe.Line(unit)
}

// daemonAnswers records that a daemon answers on the host, once per
// watch: the next time it does not answer is looked at at once, and
// whether systemd runs this one is asked in the background.
func (h *heldHost) daemonAnswers(c *tunnel.Client, log *slog.Logger) {
	h.mu.Lock()
	h.daemon.checked, h.daemon.stopped = time.Time{}, false
	h.mu.Unlock()
	if !c.Appliance() {
		go h.probeSupervisor(c, log)
	}
}

// probeSupervisor finds whether systemd runs the daemon (and so restarts
// it): then the keeper leaves restarts to it.
func (h *heldHost) probeSupervisor(c *tunnel.Client, log *slog.Logger) {
	h.mu.Lock()
	sock := h.remoteSock
	h.mu.Unlock()
	ctx, cancel := deploy.Within(context.Background(), h.deadlines.ForStep())
	defer cancel()
	out, err := c.RunLimit(ctx, deploy.Sh(supervisorScript, sock), nil, deploy.MaxSmallReply)
	if err != nil {
		return
	}
	unit := SystemdUnit(string(out))
	h.mu.Lock()
	was := h.daemon.supervisor
	h.daemon.supervisor = unit
	h.mu.Unlock()
	if unit != "" && unit != was {
		log.Info("ollie-remote: olliesrv on the host runs under systemd, which restarts it; the keeper does not", "unit", unit)
	}
}

// revive looks at the host's daemon, which does not answer on c, and
// starts it again if it died: at once the first times, then with a
// backoff. It leaves alone a daemon that is slow (it holds its lock), one
// stopped on purpose, one systemd runs, and an appliance (the daemon is
// the SSH server: with it gone, so is c). It reports whether it started
// one.
func (h *heldHost) revive(ctx context.Context, c *tunnel.Client, log *slog.Logger) bool {
	if c.Appliance() {
		return false
	}
	now := time.Now()
	sock, due := h.dueForLook(now)
	if !due {
		return false
	}

	// One start at a time per host: dial starts it too.
	h.startMu.Lock()
	defer h.startMu.Unlock()
	sctx, cancel := deploy.Within(ctx, h.deadlines.ForStep())
	out, err := c.RunLimit(sctx, deploy.Sh(reviveScript, sock), nil, deploy.MaxSmallReply)
	cancel()
	if ctx.Err() != nil || err != nil && c.Err() != nil {
		// Let go, or the connection dropped: nothing said of the daemon.
		return false
	}
	seen := parseRevive(out)
	if err == nil && seen.verb == "stopped" {
		h.mu.Lock()
		h.daemon.stopped = true
		h.mu.Unlock()
		log.Info("ollie-remote: olliesrv shut down on the host; the keeper does not start it (the next ollie -H or deploy does)")
		return false
	}
	if err == nil && seen.verb == "running" {
		// Slow, or started by someone else: it holds its lock.
		return false
	}
	if err != nil {
		// Another olliesrv start (ollie on the host, say) may have
		// won the race for the lock: then one runs, and nothing failed.
		switch again, rest := h.startAgain(ctx, c); again {
		case "running":
			return false
		case "started":
			err, seen.started = nil, rest
		}
	}
	cause := termsafe.Field(h.deathCause(err, seen), maxCause)
	restarts, loop := h.recordStart(now, sock, err, cause, seen.started)
	if err != nil {
		log.Warn("ollie-remote: olliesrv on the host is gone and did not start again", "cause", cause)
	} else {
		log.Info("ollie-remote: olliesrv on the host died; started it again", "restarts", restarts, "cause", cause, "now", seen.started)
	}
	if loop != nil {
		log.Warn(fmt.Sprintf("ollie-remote: olliesrv on the host is in a crash loop: it died %d times in %v; starting it again less often, up to every %v", loop.deaths, loop.over.Round(time.Second), maxBackoff),
			"cause", cause, "next_in", loop.next)
	}
	return err == nil
}

// dueForLook reports whether revive is to look at the daemon now, and on
// which socket: not while systemd runs it, once it was stopped on
// purpose, in a crash loop's wait, or within checkEvery of the last look.
func (h *heldHost) dueForLook(now time.Time) (sock string, due bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := &h.daemon
	if d.supervisor != "" || d.stopped || now.Before(d.notBefore) ||
		!d.checked.IsZero() && now.Sub(d.checked) < checkEvery {
		return "", false
	}
	d.checked = now
	return h.remoteSock, true
}

// reviveReport is what reviveScript printed: the dead daemon's pid, its
// panic and its log's last line, and what starting it again did (verb:
// stopped, running or started; started: the rest of that line).
type reviveReport struct {
	pid, panicked, last, verb, started string
}

func parseRevive(out []byte) reviveReport {
	var r reviveReport
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "pid":
			r.pid = v
		case "panic":
			r.panicked = v
		case "log":
			r.last = v
		case "stopped", "running", "started":
			r.verb, r.started = k, v
		}
	}
	return r
}

// startAgain runs olliesrv start once more and returns the first word
// it printed (running, started) and the rest of its line; "" when it
// failed too.
func (h *heldHost) startAgain(ctx context.Context, c *tunnel.Client) (verb, rest string) {
	sctx, cancel := deploy.Within(ctx, h.deadlines.ForStep())
	defer cancel()
	out, err := c.RunLimit(sctx, deploy.Sh(startScript), nil, deploy.MaxSmallReply)
	if err != nil {
		return "", ""
	}
	verb, rest, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
	return verb, rest
}

// deathCause says why the keeper started the daemon again, or failed to,
// given startErr, what starting it said.
func (h *heldHost) deathCause(startErr error, seen reviveReport) string {
	if startErr != nil {
		// olliesrv start's words (its own "olliesrv start:" first): the
		// new daemon exited at once, and the tail of its log.
		return deploy.RemoteError("starting it again failed", startErr).Error()
	}
	h.mu.Lock()
	failed, lastCause := h.daemon.failed, h.daemon.cause
	h.mu.Unlock()
	if failed > 0 {
		// The log ends with the failed starts' words, and the daemon
		// that died first is long gone.
		return fmt.Sprintf("started after %d failed %s; the last: %s", failed, plural(failed, "start", "starts"), lastCause)
	}
	cause := "olliesrv"
	if seen.pid != "" {
		cause += " (pid " + seen.pid + ")"
	}
	cause += " died without shutting down"
	switch last := seen.last; {
	case seen.panicked != "":
		cause += ": " + seen.panicked
	case last != "" && !strings.HasPrefix(last, "time=") || strings.Contains(last, "level=ERROR"):
		// Words on standard error, or an error logged: what a
		// daemon that exits says last. A log line of its work
		// says nothing of a SIGKILL.
		cause += "; its log ends: " + last
	default:
		cause += " (killed: SIGKILL, or the out-of-memory killer)"
	}
	return cause
}

// recordStart notes a start the keeper tried at now, failed with
// startErr or not, in the daemon's state, and returns the restarts so
// far and the crash loop to report, if this start is the first seen in
// one.
func (h *heldHost) recordStart(now time.Time, sock string, startErr error, cause, started string) (restarts int, loop *crashLoop) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := &h.daemon
	if startErr != nil {
		d.failed++
	} else {
		d.failed = 0
		d.restarts++
		// It answered olliesrv start: if it goes, look at once.
		d.checked = time.Time{}
		if f := strings.Fields(started); len(f) > 0 && f[0] != sock {
			h.remoteSock = f[0]
		}
	}
	d.cause, d.at = cause, now
	return d.restarts, d.countTry(now)
}

// crashLoop is a crash loop as first seen: deaths within over, and the
// wait before the next start.
type crashLoop struct {
	deaths int
	over   time.Duration
	next   time.Duration
}

// countTry counts a start tried at now. From the loopStarts-th within
// loopWindow on, the next start waits a backoff that doubles; the first
// time it does, countTry returns the loop, to be reported.
func (d *daemonState) countTry(now time.Time) *crashLoop {
	if len(d.tries) > 0 && now.Sub(d.tries[len(d.tries)-1]) > loopWindow {
		// The last one ran a while: whatever loop there was is over.
		d.tries, d.backoff, d.loop = nil, 0, false
	}
	d.tries = append(d.tries, now)
	for len(d.tries) > 0 && now.Sub(d.tries[0]) > loopWindow {
		d.tries = d.tries[1:]
	}
	if len(d.tries) < loopStarts {
		return nil
	}
	d.backoff = min(max(2*d.backoff, 2*time.Second), maxBackoff)
	d.notBefore = time.Now().Add(d.backoff)
	if d.loop {
		return nil
	}
	d.loop = true
	return &crashLoop{deaths: len(d.tries), over: now.Sub(d.tries[0]), next: d.backoff}
}

// Restarts says what the keeper did for the host's daemon, for status:
// "" when nothing is worth saying.
func (h *heldHost) restartsNote() string {
	d := &h.daemon
	var s string
	switch {
	case d.supervisor != "":
		s = "systemd (" + d.supervisor + ") restarts olliesrv here, not the keeper"
	case d.stopped:
		s = "olliesrv shut down on the host; the keeper does not start it (the next ollie -H or deploy does)"
	}
	if d.restarts > 0 || d.cause != "" {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("olliesrv started again %d %s, last at %s: %s", d.restarts, plural(d.restarts, "time", "times"), d.at.Format("15:04:05"), d.cause)
		if wait := time.Until(d.notBefore); d.loop && wait > 0 {
			s += "; in a crash loop, next start in " + wait.Round(time.Second).String()
		}
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
