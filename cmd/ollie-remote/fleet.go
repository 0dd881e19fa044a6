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
	"time"

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

// fleetFlags are the flags every fleet command takes.
type fleetFlags struct {
	targets                   []string
	inv, profile, model       string
	follow, json, askBecome   bool
	jobs                      int
	lostAfter, connectTimeout time.Duration
}

func (f *fleetFlags) watch() fleet.WatchOptions {
	return fleet.WatchOptions{Follow: f.follow, JSON: f.json, AskBecome: f.askBecome}
}

// parseFleetFlags reads sub's flags; false on a usage error, which it
// has reported.
func parseFleetFlags(c *common, jSet bool, sub string, args []string, stderr io.Writer) (*fleetFlags, []string, bool) {
	f := &fleetFlags{}
	fl := flag.NewFlagSet("ollie-remote fleet "+sub, flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() { fmt.Fprint(stderr, fleetUsage); fl.PrintDefaults() }
	fl.Func("H", "hosts to run on: names, 'patterns', @FILE, @GROUP (repeatable)", func(s string) error { f.targets = append(f.targets, s); return nil })
	fl.StringVar(&f.inv, "i", "", "Ansible `inventory` (file or directory) to take hosts and groups from")
	fl.StringVar(&f.profile, "profile", "", "agent `profile` for every host's agent")
	fl.StringVar(&f.model, "model", "", "`model` for every host's agent")
	fl.IntVar(&f.jobs, "j", 32, "hosts connected to and set up at once")
	fl.BoolVar(&f.follow, "follow", false, "stream every host's chat, each line prefixed by its host")
	fl.BoolVar(&f.json, "json", false, "print one JSON object per host at the end, nothing while it runs")
	fl.StringVar(&c.modelVia, "model-via", c.modelVia, "give the hosts this desktop's model through the tunnel: desktop, or desktop:BACKEND; its API key stays here")
	fl.IntVar(&c.modelConcurrent, "model-concurrent", c.modelConcurrent, "with -model-via: model requests at once per host (default 4)")
	fl.IntVar(&c.runTokens, "run-tokens", c.runTokens, "with -model-via: tokens the run may spend through the desktop, all hosts together (default: no cap)")
	fl.BoolVar(&f.askBecome, "ask-become-pass", false, "ask the sudo password once for the run (Ansible's -K); otherwise each host asks")
	fl.BoolVar(&c.acceptNew, "accept-new", c.acceptNew, "add the key of a host seen for the first time to known_hosts")
	fl.DurationVar(&f.lostAfter, "lost-after", 2*time.Minute, "report a host lost when it stays unreachable this long")
	fl.DurationVar(&f.connectTimeout, "connect-timeout", 2*time.Minute, "give up connecting to (and deploying to) a host after this long")
	if err := fl.Parse(args); err != nil {
		return nil, nil, false
	}
	if jSet && !flagGiven(fl, "j") {
		f.jobs = c.parallel
	}
	return f, fl.Args(), true
}

// fleetMain is "ollie-remote fleet": it takes its own flags, and handles
// Ctrl-C itself (once interrupts the agents, twice detaches).
func fleetMain(c *common, jSet bool, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	f, rest, ok := parseFleetFlags(c, jSet, sub, args, stderr)
	if !ok {
		return 2
	}
	store, err := fleet.DefaultStore()
	if err != nil {
		fmt.Fprintln(stderr, "ollie-remote fleet:", err)
		return 2
	}
	cfg := fleet.Config{SSH: c.ssh(), AcceptNew: c.acceptNew, Keep: c.keep, Deadlines: c.deadlines, Jobs: f.jobs,
		ConnectTimeout: f.connectTimeout, LostAfter: f.lostAfter}
	switch sub {
	case "run":
		return fleetRun(c, f, rest, cfg, store, stdout, stderr)
	case "attach":
		return fleetAttach(f, rest, cfg, store, stdout, stderr)
	case "ls":
		runs, err := store.List()
		if err != nil {
			fmt.Fprintf(stderr, "ollie-remote fleet: %s\n", termsafe.Line(err.Error()))
		}
		fleet.WriteRuns(stdout, runs)
		return 0
	case "status", "stop":
		run, code := loadRun(store, rest, &cfg, stderr)
		if run == nil {
			return code
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if sub == "status" {
			return fleetStatus(ctx, run, cfg, store, f.json, stdout, stderr)
		}
		return fleetStop(ctx, run, cfg, store, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, fleetUsage)
		return 0
	}
	fmt.Fprintf(stderr, "ollie-remote fleet: unknown command %q (run, ls, status, attach, stop)\n", sub)
	return 2
}

// fleetRun is "fleet run": the run made, kept, and watched.
func fleetRun(c *common, f *fleetFlags, rest []string, cfg fleet.Config, store fleet.Store, stdout, stderr io.Writer) int {
	targets := f.targets
	if len(targets) == 0 && len(rest) > 0 {
		// fleet run h1 h2 h3 'check disks': every leading word that
		// names known hosts is a target, not the goal's start.
		var held []string
		if r, err := keeper.Call(context.Background(), c.request("list", ""), nil); err == nil {
			for _, h := range r.Held {
				held = append(held, h.Host)
			}
		}
		targets, rest = inventory.SplitTargets(context.Background(), rest, inventory.Options{Inventory: f.inv, SSHConfig: c.config}, held)
	}
	goal := strings.TrimSpace(strings.Join(rest, " "))
	if len(targets) == 0 || goal == "" {
		fmt.Fprintln(stderr, "usage: ollie-remote fleet run [-H] TARGETS GOAL (ollie-remote fleet help)")
		return 2
	}
	hosts, groupsOf, varsOf, source, err := resolveTargets(context.Background(), targets, f.inv, c)
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
	c.model = f.model
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
	run.Source, run.Profile, run.Model, run.SSH = source, f.profile, f.model, cfg.SSH
	if err := store.Save(run); err != nil {
		fmt.Fprintf(stderr, "ollie-remote fleet: keeping the run: %v\n", err)
		return 1
	}
	return fleet.Watch(run, cfg, store, true, f.watch(), stdout, stderr)
}

// fleetAttach is "fleet attach RUN": watching a run again.
func fleetAttach(f *fleetFlags, rest []string, cfg fleet.Config, store fleet.Store, stdout, stderr io.Writer) int {
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
	return fleet.Watch(run, cfg, store, false, f.watch(), stdout, stderr)
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
