package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"ollie/broker/desktop"
	"ollie/internal/termsafe"
	"ollie/tunnel/deploy"
	"ollie/tunnel/fleet"
	"ollie/tunnel/inventory"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

const fleetUsage = `usage: ollie-remote fleet COMMAND ...

  fleet run [-H TARGETS] [-i INVENTORY] [-profile P] [-model M] [-j N]
            [-follow] [-json] [-ask-become-pass] [TARGETS] GOAL
        give GOAL to one new session on every host of TARGETS, watch
        them work, and print a row of results per host
  fleet ls              the runs this desktop keeps
  fleet status RUN      where each host of a run is now
  fleet attach RUN      watch a run again (after a detach, a reboot)
  fleet stop RUN        interrupt every agent of a run

TARGETS are host names, ssh config Host patterns ('web*'), @FILE (a file of
names) and, with -i, Ansible inventory groups (@GROUP); several are
separated by commas or spaces. Without -H, the words before GOAL that name
hosts this desktop knows (ssh config, inventory, held) are all TARGETS:
fleet run h1 h2 h3 'check disks'; the last word is always the goal's.
Ctrl-C once interrupts every agent of the run (a second later); twice
within that second detaches, leaving them working (fleet attach RUN comes
back).
Exit status: 0 when every host finished, 1 when any failed or was
unreachable, 2 on usage errors.
`

// fleetMain is "ollie-remote fleet": it takes its own flags, and handles
// Ctrl-C itself (once interrupts the agents, twice detaches).
func fleetMain(c *common, jSet bool, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	fl := flag.NewFlagSet("ollie-remote fleet "+sub, flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() { fmt.Fprint(stderr, fleetUsage); fl.PrintDefaults() }
	var targets []string
	fl.Func("H", "hosts to run on: names, 'patterns', @FILE, @GROUP (repeatable)", func(s string) error { targets = append(targets, s); return nil })
	invFile := fl.String("i", "", "Ansible `inventory` (file or directory) to take hosts and groups from")
	profile := fl.String("profile", "", "agent `profile` for every host's agent")
	model := fl.String("model", "", "`model` for every host's agent")
	jobs := fl.Int("j", 32, "hosts connected to and set up at once")
	follow := fl.Bool("follow", false, "stream every host's chat, each line prefixed by its host")
	asJSON := fl.Bool("json", false, "print one JSON object per host at the end, nothing while it runs")
	fl.StringVar(&c.modelVia, "model-via", c.modelVia, "give the hosts this desktop's model through the tunnel: desktop, or desktop:BACKEND; its API key stays here")
	fl.IntVar(&c.modelConcurrent, "model-concurrent", c.modelConcurrent, "with -model-via: model requests at once per host (default 4)")
	fl.IntVar(&c.runTokens, "run-tokens", c.runTokens, "with -model-via: tokens the run may spend through the desktop, all hosts together (default: no cap)")
	askBecome := fl.Bool("ask-become-pass", false, "ask the sudo password once for the run (Ansible's -K); otherwise each host asks")
	fl.BoolVar(&c.acceptNew, "accept-new", c.acceptNew, "add the key of a host seen for the first time to known_hosts")
	lostAfter := fl.Duration("lost-after", 2*time.Minute, "report a host lost when it stays unreachable this long")
	connectTimeout := fl.Duration("connect-timeout", 2*time.Minute, "give up connecting to (and deploying to) a host after this long")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	rest := fl.Args()
	if jSet && !flagGiven(fl, "j") {
		*jobs = c.parallel
	}
	store, err := fleet.DefaultStore()
	if err != nil {
		fmt.Fprintln(stderr, "ollie-remote fleet:", err)
		return 2
	}
	cfg := fleet.Config{SSH: c.ssh(), AcceptNew: c.acceptNew, Keep: c.keep, Deadlines: c.deadlines, Jobs: *jobs,
		ConnectTimeout: *connectTimeout, LostAfter: *lostAfter}
	switch sub {
	case "run":
		if len(targets) == 0 && len(rest) > 0 {
			// fleet run h1 h2 h3 'check disks': every leading word that
			// names known hosts is a target, not the goal's start.
			var held []string
			if r, err := keeper.Call(context.Background(), c.request("list", ""), nil); err == nil {
				for _, h := range r.Held {
					held = append(held, h.Host)
				}
			}
			targets, rest = inventory.SplitTargets(context.Background(), rest, inventory.Options{Inventory: *invFile, SSHConfig: c.config}, held)
		}
		goal := strings.TrimSpace(strings.Join(rest, " "))
		if len(targets) == 0 || goal == "" {
			fmt.Fprintln(stderr, "usage: ollie-remote fleet run [-H] TARGETS GOAL (ollie-remote fleet help)")
			return 2
		}
		hosts, groupsOf, varsOf, source, err := resolveTargets(context.Background(), targets, *invFile, c)
		if err != nil {
			fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
			return 2
		}
		b, err := deploy.LoadBundle(c.binDir, c.dataDir, runtime.GOOS+"/"+runtime.GOARCH)
		if err != nil {
			fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
			return 1
		}
		cfg.Bundle = b
		c.model = *model
		rules, err := models.LoadRules(models.RulesFile())
		if err != nil {
			fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
			return 2
		}
		rs := routes{}
		for _, h := range hosts {
			choice := c.choose(h.Name, groupsOf[h.Name], varsOf[h.Name], rules)
			if h.Route, err = rs.get(choice); err != nil {
				fmt.Fprintf(stderr, "ollie-remote fleet: %s: %s\n", termsafe.Line(h.Name), termsafe.Line(err.Error()))
				return 2
			}
			if h.Route != nil {
				h.Model = &fleet.ModelSpec{Via: choice.Via, Model: choice.Model, Concurrent: choice.Concurrent, RunTokens: choice.RunTokens}
			}
		}
		run := fleet.NewRun(goal, targets, hosts)
		run.Source, run.Profile, run.Model, run.SSH = source, *profile, *model, cfg.SSH
		if err := store.Save(run); err != nil {
			fmt.Fprintf(stderr, "ollie-remote fleet: keeping the run: %v\n", err)
			return 1
		}
		return watchRun(run, cfg, store, true, watchOptions{follow: *follow, json: *asJSON, askBecome: *askBecome}, stdout, stderr)
	case "attach":
		run, code := loadRun(store, rest, &cfg, stderr)
		if run == nil {
			return code
		}
		// The desktop's model goes to each host again: the keeper may be
		// new (a reboot), and the key is only ever in memory.
		rs := routes{}
		for _, h := range run.Hosts {
			if m := h.Model; m != nil {
				var err error
				if h.Route, err = rs.get(models.Choice{Via: m.Via, Model: m.Model, Concurrent: m.Concurrent, RunTokens: m.RunTokens, Why: "run " + run.ID}); err != nil {
					fmt.Fprintf(stderr, "ollie-remote fleet: %s: %s\n", termsafe.Line(h.Name), termsafe.Line(err.Error()))
					return 1
				}
			}
		}
		return watchRun(run, cfg, store, false, watchOptions{follow: *follow, json: *asJSON, askBecome: *askBecome}, stdout, stderr)
	case "ls":
		return fleetList(store, stdout, stderr)
	case "status", "stop":
		run, code := loadRun(store, rest, &cfg, stderr)
		if run == nil {
			return code
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if sub == "status" {
			return fleetStatus(ctx, run, cfg, store, *asJSON, stdout, stderr)
		}
		return fleetStop(ctx, run, cfg, store, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, fleetUsage)
		return 0
	}
	fmt.Fprintf(stderr, "ollie-remote fleet: unknown command %q (run, ls, status, attach, stop)\n", sub)
	return 2
}

func flagGiven(fl *flag.FlagSet, name string) bool {
	given := false
	fl.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// resolveTargets turns what the person typed into the run's hosts, and
// says each one's inventory groups and ollie_* vars.
func resolveTargets(ctx context.Context, targets []string, inv string, c *common) ([]*fleet.Host, map[string][]string, map[string]map[string]string, string, error) {
	found, source, err := inventory.Resolve(ctx, targets, inventory.Options{Inventory: inv, SSHConfig: c.config})
	if err != nil {
		return nil, nil, nil, "", err
	}
	hosts := make([]*fleet.Host, len(found))
	groups, vars := map[string][]string{}, map[string]map[string]string{}
	for i, h := range found {
		hosts[i] = &fleet.Host{Name: h.Name, Override: h.Override}
		groups[h.Name], vars[h.Name] = h.Groups, h.Vars
	}
	return hosts, groups, vars, source, nil
}

// loadRun loads the run rest names, and sets cfg to reach its hosts with
// the ssh configuration it was started with. Without a run it returns the
// exit status.
func loadRun(store fleet.Store, rest []string, cfg *fleet.Config, stderr io.Writer) (*fleet.Run, int) {
	if len(rest) != 1 {
		fmt.Fprintln(stderr, "usage: ollie-remote fleet status|attach|stop RUN (fleet ls lists them)")
		return nil, 2
	}
	run, err := store.Load(rest[0])
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
		if errors.Is(err, fleet.ErrNoRun) {
			return nil, 2
		}
		return nil, 1
	}
	cfg.SSH = run.SSH
	return run, 0
}

// fleetStatus is "fleet status RUN": where each host is now.
func fleetStatus(ctx context.Context, run *fleet.Run, cfg fleet.Config, store fleet.Store, asJSON bool, stdout, stderr io.Writer) int {
	if err := fleet.Poll(ctx, run, cfg, store); err != nil {
		fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
	}
	printRunHeader(stdout, run)
	if asJSON {
		fleet.WriteJSON(stdout, run)
	} else {
		fleet.WriteTable(stdout, run)
	}
	return fleet.ExitCode(run)
}

// fleetStop is "fleet stop RUN": every agent of the run interrupted.
func fleetStop(ctx context.Context, run *fleet.Run, cfg fleet.Config, store fleet.Store, stdout, stderr io.Writer) int {
	err := fleet.Stop(ctx, run, cfg, store)
	fleet.WriteTable(stdout, run)
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote fleet stop: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "run %s stopped\n", run.ID)
	return 0
}

func printRunHeader(w io.Writer, run *fleet.Run) {
	fmt.Fprintf(w, "run %s (%s, session %s on each host): %s\n", run.ID, run.State, run.Session, termsafe.Field(run.Goal, 120))
}

type watchOptions struct{ follow, json, askBecome bool }

// detachWindow is how long after a first Ctrl-C a second one detaches
// rather than finding the agents interrupted already.
const detachWindow = time.Second

// watchRun starts or attaches to a run and watches it to its end, with the
// live view on a terminal. While it watches, and the person is at a
// terminal, it is the desktop's terminal broker: the run's approvals are
// asked here, grouped across hosts.
func watchRun(run *fleet.Run, cfg fleet.Config, store fleet.Store, fresh bool, o watchOptions, stdout, stderr io.Writer) int {
	follow, asJSON := o.follow, o.json
	out, tty := stdout.(*os.File)
	tty = tty && term.IsTerminal(int(out.Fd())) && !follow && !asJSON
	var live *fleet.Live
	var obs fleet.Observer
	var pause, resume func()
	say := func(s string) { fmt.Fprintln(stderr, termsafe.Line(s)) }
	switch {
	case asJSON:
		obs = fleet.Quiet{}
	case tty:
		live = &fleet.Live{Out: stdout, Run: run, Width: func() (int, int) {
			c, r, _ := term.GetSize(int(out.Fd()))
			return c, r
		}}
		obs, say, pause, resume = live, live.Say, live.Pause, live.Resume
	default:
		lines := &fleet.Lines{Out: stdout, Chat: follow}
		lines.Width(run)
		obs, pause, resume = lines, lines.Pause, lines.Resume
	}
	rb, code := runBroker(run, o.askBecome, pause, resume, stderr)
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
	r := &fleet.Runner{Run: run, Cfg: cfg, Store: store, Obs: obs}
	ctx, detach := context.WithCancel(context.Background())
	defer detach()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	detached := make(chan struct{})
	go func() {
		// A second Ctrl-C within detachWindow of the first detaches
		// instead: the agents are interrupted only once it has passed,
		// so a quick double Ctrl-C leaves them working, as it says.
		interrupted := false
		var interrupt <-chan time.Time
		for {
			select {
			case s := <-sigs:
				if s == os.Interrupt && !interrupted {
					interrupted = true
					say(fmt.Sprintf("interrupting every agent of run %s (Ctrl-C again to detach and leave them working)", run.ID))
					interrupt = time.After(detachWindow)
					continue
				}
				say(fmt.Sprintf("detached: the agents go on; ollie-remote fleet attach %s", run.ID))
				close(detached)
				detach()
				return
			case <-interrupt:
				interrupt = nil
				go r.Interrupt(ctx)
			case <-ctx.Done():
				return
			}
		}
	}()
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
		fleet.WriteJSON(stdout, run)
	} else {
		fmt.Fprintln(stdout)
		fleet.WriteTable(stdout, run)
	}
	return fleet.ExitCode(run)
}

// runBroker answers the run's approvals on the person's terminal, when
// there is one (the controlling terminal, and standard input on it), and
// asks the sudo password once with -ask-become-pass. Another terminal
// broker already running keeps them; the run says so and goes on.
func runBroker(run *fleet.Run, askBecome bool, pause, resume func(), stderr io.Writer) (*desktop.RunBroker, int) {
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

func fleetList(store fleet.Store, stdout, stderr io.Writer) int {
	runs, err := store.List()
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
	}
	if len(runs) == 0 {
		fmt.Fprintln(stdout, "no fleet runs: ollie-remote fleet run TARGETS GOAL")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tCREATED\tSTATE\tHOSTS\tFINISHED\tGOAL")
	for _, r := range runs {
		done := 0
		for _, h := range r.Hosts {
			if h.Finished() {
				done++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, r.Created.Local().Format("2006-01-02 15:04"), r.State, len(r.Hosts), done, termsafe.Field(r.Goal, 60))
	}
	tw.Flush()
	return 0
}
