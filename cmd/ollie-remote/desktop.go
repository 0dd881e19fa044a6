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
)

func terminalSocket() string { return filepath.Join(paths.RemoteDir(), "broker.sock") }

// rules adapts the policy file to the broker.
type rules struct{ p *broker.Policy }

func (r rules) Match(req *broker.Request) (broker.Decision, bool) {
	d, _, ok := r.p.Match(req)
	return d, ok
}

func (r rules) AddAlways(req *broker.Request) error { return r.p.AddAlways(req) }

func loadRules(log *slog.Logger) broker.Rules {
	path, err := broker.DefaultPolicyPath()
	if err != nil {
		log.Warn("ollie-remote: no broker policy", "err", err)
		return nil
	}
	p, err := broker.LoadPolicy(path)
	if err != nil {
		// A broken policy must not approve anything by accident: ask.
		log.Error("ollie-remote: the broker policy is broken; asking about everything", "err", err)
		return nil
	}
	return rules{p}
}

// desktopBroker is the keeper's own broker, for when no terminal broker
// runs.
func desktopBroker(log *slog.Logger) *broker.Broker {
	return &broker.Broker{Approver: &broker.Queue{Approver: broker.Auto(nil, io.Discard)}, Rules: loadRules(log), Log: log}
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
	b := &broker.Broker{Approver: &broker.Queue{Approver: &broker.TerminalApprover{In: os.Stdin, Out: stdout}},
		Rules: loadRules(log), Log: log}
	fmt.Fprintf(stdout, "ollie-remote broker: answering the approval requests of every host ollie-remote up holds; ^C to stop\n")
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
