package main

// The desktop broker. The keeper answers the hosts' approval requests
// itself (askpass, a dialog, or a denial saying how to be asked) unless
// "ollie-remote broker" runs in a terminal: then the keeper hands each
// request to it, and the person answers there.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"ollie/broker"
	"ollie/internal/paths"
	"ollie/internal/termsafe"
)

func terminalSocket() string { return filepath.Join(paths.RemoteDir(), "broker.sock") }

// liveRules is the policy file as a broker consults it: read again before
// each decision when it changed (one stat when it did not), a version
// that does not parse keeping the last good rules in force. report hears
// once of each version: nil when it is in force, else why not.
type liveRules struct {
	p      *broker.Policy
	report func(err error)
}

// refresh reads the file again if it changed, and says why it is not in
// force, if it is not.
func (r *liveRules) refresh() error {
	changed, err := r.p.Refresh()
	if changed && r.report != nil {
		r.report(err)
	}
	return err
}

func (r *liveRules) Match(req *broker.Request) (broker.Decision, bool) {
	r.refresh()
	d, _, ok := r.p.Match(req)
	return d, ok
}

func (r *liveRules) AddAlways(req *broker.Request) error { return r.p.AddAlways(req) }

// watch refreshes every so often, so that a bad edit is reported even
// while no request comes.
func (r *liveRules) watch(every time.Duration) {
	for range time.Tick(every) {
		r.refresh()
	}
}

// problem says why the file is not in force and what is instead, or "".
func (r *liveRules) problem() string {
	err := r.refresh()
	if err == nil {
		return ""
	}
	return policyProblem(r.p, err)
}

func policyProblem(p *broker.Policy, err error) string {
	n := len(p.Rules())
	if n == 0 {
		return fmt.Sprintf("%v; until it is fixed, every request is asked (no rule was read without error)", err)
	}
	return fmt.Sprintf("%v; until it is fixed, the %d rules last read without error stay in force", err, n)
}

// policyWatchEvery is how often a broker looks at the policy file while
// no request comes (before each request it always does).
const policyWatchEvery = 2 * time.Second

// openRules opens the broker policy file, live; report hears of each
// version read, the first one too when it is broken. It is nil when
// there is no place for the file (no home).
func openRules(log *slog.Logger, report func(p *broker.Policy, err error)) *liveRules {
	path, err := broker.DefaultPolicyPath()
	if err != nil {
		log.Warn("ollie-remote: no broker policy", "err", err)
		return nil
	}
	p, err := broker.OpenPolicy(path)
	r := &liveRules{p: p, report: func(err error) { report(p, err) }}
	if err != nil {
		r.report(err)
	}
	return r
}

// desktopBroker is the keeper's own broker, for when no terminal broker
// runs. A broken policy is logged once per version.
func desktopBroker(log *slog.Logger) *broker.Broker {
	b := &broker.Broker{Approver: &broker.Queue{Approver: broker.Auto(nil, io.Discard)}, Log: log}
	if r := openRules(log, func(p *broker.Policy, err error) {
		if err != nil {
			log.Error("ollie-remote: the broker policy is broken", "problem", policyProblem(p, err))
		} else {
			log.Info("ollie-remote: the broker policy was read", "path", p.Path, "rules", len(p.Rules()))
		}
	}); r != nil {
		b.Rules = r
		go r.watch(policyWatchEvery)
	}
	return b
}

// policyState is what status shows of the policy b uses: "" when its file
// is in force, else why not and what is.
func policyState(b *broker.Broker) string {
	if r, ok := b.Rules.(*liveRules); ok {
		return r.problem()
	}
	return ""
}

// serveApprovals answers the requests arriving from host on l: through
// the terminal broker when one runs, else with b. Either way b holds the
// host to its caps (connections at once), and whoever answers to its
// deadlines and size limits: the terminal broker enforces them on what
// is relayed, and closing its end closes the host's.
func serveApprovals(b *broker.Broker, host string, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go b.ServeConnVia(host, c, toTerminal)
	}
}

// toTerminal relays host's conversation on c to the terminal broker, if
// one runs, after a header naming the host.
func toTerminal(host string, c net.Conn) bool {
	t, err := net.Dial("unix", terminalSocket())
	if err != nil {
		return false
	}
	defer t.Close()
	hdr, _ := json.Marshal(map[string]string{"host": host})
	if _, err := t.Write(append(hdr, '\n')); err != nil {
		return true
	}
	go func() {
		io.Copy(t, c)
		t.(*net.UnixConn).CloseWrite()
	}()
	io.Copy(c, t)
	return true
}

// brokerMain runs the terminal broker: the person at this terminal answers
// every host's requests, one at a time.
func brokerMain(ctx context.Context, stdout, stderr io.Writer) int {
	if err := prepareRemoteDir(); err != nil {
		fmt.Fprintf(stderr, "ollie-remote broker: %v\n", err)
		return 1
	}
	sock := terminalSocket()
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		fmt.Fprintf(stderr, "ollie-remote broker: another broker already answers on %s\n", sock)
		return 1
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote broker: %v\n", err)
		return 1
	}
	defer os.Remove(sock)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b := &broker.Broker{Approver: &broker.Queue{Approver: &broker.TerminalApprover{In: os.Stdin, Out: stdout}}, Log: log}
	fmt.Fprintf(stdout, "ollie-remote broker: answering the approval requests of every host ollie-remote up holds; ^C to stop\n")
	// The person here is told when the policy file they edit is refused.
	if r := openRules(log, func(p *broker.Policy, err error) {
		if err != nil {
			fmt.Fprintf(stdout, "\nollie-remote broker: the policy file is broken: %s\n", termsafe.Line(policyProblem(p, err)))
		} else {
			fmt.Fprintf(stdout, "\nollie-remote broker: the policy file %s was read again: %d rules in force\n", termsafe.Line(p.Path), len(p.Rules()))
		}
	}); r != nil {
		b.Rules = r
		go r.watch(policyWatchEvery)
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		c, err := l.Accept()
		if err != nil {
			return 0
		}
		go func() {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			host, err := readHeader(c)
			if err != nil {
				c.Close()
				return
			}
			c.SetReadDeadline(time.Time{})
			b.ServeConn(host, c)
		}()
	}
}

// readHeader reads the keeper's one-line header byte by byte, so that
// nothing of the conversation after it is consumed.
func readHeader(c net.Conn) (string, error) {
	var line []byte
	one := make([]byte, 1)
	for len(line) < 4096 {
		if _, err := c.Read(one); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			var h struct{ Host string }
			if err := json.Unmarshal(line, &h); err != nil || h.Host == "" {
				return "", fmt.Errorf("bad header %q", line)
			}
			return h.Host, nil
		}
		line = append(line, one[0])
	}
	return "", fmt.Errorf("header too long")
}
