package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"ollie/broker/desktop"
	"ollie/internal/termsafe"
)

// WatchOptions say how a run is watched: every host's chat as it comes
// (Follow), JSON at the end and nothing before (JSON), the sudo password
// asked once for the whole run (AskBecome, Ansible's -K).
type WatchOptions struct{ Follow, JSON, AskBecome bool }

// Watch starts (fresh) or attaches to a run and watches it to its end,
// with the live view on a terminal, and returns ollie-remote fleet's exit
// status. While it watches, and the person is at a
// terminal, it is the desktop's terminal broker: the run's approvals are
// asked here, grouped across hosts.
func Watch(run *Run, cfg Config, store Store, fresh bool, o WatchOptions, stdout, stderr io.Writer) int {
	follow, asJSON := o.Follow, o.JSON
	out, tty := stdout.(*os.File)
	tty = tty && term.IsTerminal(int(out.Fd())) && !follow && !asJSON
	var live *Live
	var obs Observer
	var pause, resume func()
	say := func(s string) { fmt.Fprintln(stderr, termsafe.Line(s)) }
	switch {
	case asJSON:
		obs = Quiet{}
	case tty:
		live = &Live{Out: stdout, Run: run, Width: func() (int, int) {
			c, r, _ := term.GetSize(int(out.Fd()))
			return c, r
		}}
		obs, say, pause, resume = live, live.Say, live.Pause, live.Resume
	default:
		lines := &Lines{Out: stdout, Chat: follow}
		lines.Width(run)
		obs, pause, resume = lines, lines.Pause, lines.Resume
	}
	rb, code := runBroker(run, o.AskBecome, pause, resume, stderr)
	if code != 0 {
		return code
	}
	if rb != nil {
		defer rb.Close()
		cfg.Waiting = rb.Waiting
	}
	if !asJSON {
		verb := "started"
		if !fresh {
			verb = "attached to"
		}
		fmt.Fprintf(stdout, "fleet run %s %s on %d hosts (hosts from %s); session %s on each\n", run.ID, verb, len(run.Hosts), run.Source, run.Session)
	}
	r := &Runner{Run: run, Cfg: cfg, Store: store, Obs: obs}
	ctx, detach := context.WithCancel(context.Background())
	defer detach()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	detached := Interrupts(ctx, sigs, run.ID, say, func() { r.Interrupt(ctx) }, detach)
	if live != nil {
		live.Start()
	}
	var err error
	if fresh {
		err = r.Start(ctx)
	} else {
		err = r.Attach(ctx)
	}
	if live != nil {
		live.Stop()
	}
	select {
	case <-detached:
		return 0
	default:
	}
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	if asJSON {
		WriteJSON(stdout, run)
	} else {
		fmt.Fprintln(stdout)
		WriteTable(stdout, run)
	}
	return ExitCode(run)
}

// runBroker answers the run's approvals on the person's terminal, when
// there is one (the controlling terminal, and standard input on it), and
// asks the sudo password once with -ask-become-pass. Another terminal
// broker already running keeps them; the run says so and goes on.
func runBroker(run *Run, askBecome bool, pause, resume func(), stderr io.Writer) (*desktop.RunBroker, int) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil || !term.IsTerminal(int(os.Stdin.Fd())) {
		if tty != nil {
			tty.Close()
		}
		if askBecome {
			fmt.Fprintln(stderr, "ollie-remote fleet: -ask-become-pass needs a terminal to ask on")
			return nil, 2
		}
		return nil, 0
	}
	var hosts []string
	for _, h := range run.Hosts {
		hosts = append(hosts, h.Name)
	}
	rb, err := desktop.StartRunBroker(context.Background(), desktop.RunConfig{Session: run.Session, Hosts: hosts, In: tty, Out: tty,
		Pause: pause, Resume: resume, AskBecomePass: askBecome})
	switch {
	case errors.Is(err, desktop.ErrBrokerElsewhere):
		fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
		tty.Close()
		return nil, 0
	case err != nil:
		fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
		tty.Close()
		return nil, 1
	}
	go func() {
		<-rb.Done()
		tty.Close()
	}()
	return rb, 0
}
