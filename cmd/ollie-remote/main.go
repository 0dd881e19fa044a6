// Command ollie-remote runs ollie on a fleet from a desktop: it deploys the
// one olliesrv binary and the data files to hosts over SSH, keeps a tunnel
// to each host's namespace, and reports their state.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"ollie/broker"
	"ollie/broker/desktop"
	"ollie/internal/demo"
	"ollie/internal/paths"
	"ollie/internal/termsafe"
	"ollie/tunnel"
	"ollie/tunnel/deploy"
	deskns "ollie/tunnel/desk"
	"ollie/tunnel/fleet"
	"ollie/tunnel/keeper"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: ollie-remote [FLAGS] COMMAND HOST...

Commands:
  deploy HOST...   push olliesrv and data/ to each host (~/.local/share/ollie),
                   install the ollie command there, restart an older daemon;
                   -system also installs /usr/local/bin/ollie for every user,
                   with sudo approved here (as the hosts' requests are)
  up HOST...       start olliesrv on each host (or reuse it) and keep its
                   namespace forwarded to a local socket: ollie -H HOST ...
  down HOST...     stop forwarding (-stop-daemon: stop the host's olliesrv too);
                   -all for every host held
  status [HOST...] a table: host, version, uptime, sessions, agents, tunnel
  broker           answer the hosts' approval and sudo requests on this terminal
                   (without it: OLLIE_ASKPASS, a dialog, or they are denied)
  fleet run TARGETS GOAL
                   one goal on many hosts, watched live, a row of results per
                   host (fleet ls, status, attach, stop RUN; fleet help)
  demo [keep]      deploy to three SSH hosts started inside this process, run an agent
  version          print the version

HOST is an alias of your ssh config, or [USER@]HOST[:PORT]. Host keys are
always checked against known_hosts; -accept-new adds a host seen for the
first time (a changed key is refused).

Flags:
`

// common are the flags every command takes.
type common struct {
	config    string
	knownHost string
	acceptNew bool
	parallel  int
	binDir    string
	dataDir   string
	keep      int
	stop      bool
	all       bool
	system    bool
	deadlines deploy.Deadlines
	// The desktop's model for the hosts (up, fleet run): -model-via.
	modelVia        string
	model           string
	modelConcurrent int
	runTokens       int
}

// ssh is the ssh configuration the flags name: it picks the keeper.
func (c *common) ssh() paths.SSHConfig {
	var known []string
	if c.knownHost != "" {
		known = []string{c.knownHost}
	}
	return paths.NewSSHConfig(c.config, known)
}

// normalize makes the flags' values usable: at least one host at a time,
// and the ssh files named by absolute paths, since the keeper that holds
// the hosts may run elsewhere.
func (c *common) normalize() {
	if c.parallel < 1 {
		c.parallel = 1
	}
	s := c.ssh()
	c.config = s.Config
	if len(s.Known) > 0 {
		c.knownHost = s.Known[0]
	}
}

func (c *common) options() tunnel.Options {
	o := tunnel.Options{ConfigFile: c.config, AcceptNew: c.acceptNew}
	if c.knownHost != "" {
		o.KnownHosts = []string{c.knownHost}
	}
	return o
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == keeper.Command {
		keeper.Desk = serveDesk
		os.Exit(keeper.Main(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// serveDesk serves the desktop's namespace (ollie -H fleet) from the
// keeper's hosts and the runs this desktop keeps.
func serveDesk(ctx context.Context, dir string, held func() []keeper.HeldInfo, log *slog.Logger) error {
	runs, err := fleet.DefaultStore()
	if err != nil {
		return err
	}
	return deskns.Serve(ctx, dir, deskns.Config{Runs: runs, Log: log, Held: func() []deskns.Host {
		var hs []deskns.Host
		for _, h := range held() {
			hs = append(hs, deskns.Host{Name: cmp.Or(h.Name, h.Host), Socket: h.Socket, Tunnel: h.Tunnel})
		}
		return hs
	}})
}

func run(args []string, stdout, stderr io.Writer) int {
	var c common
	fl := flag.NewFlagSet("ollie-remote", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprint(stderr, usage)
		fl.PrintDefaults()
	}
	exe, _ := os.Executable()
	fl.StringVar(&c.config, "F", "", "ssh config `file` (default ~/.ssh/config)")
	fl.StringVar(&c.knownHost, "known-hosts", "", "known_hosts `file` (default: the ssh config's, else ~/.ssh/known_hosts)")
	fl.BoolVar(&c.acceptNew, "accept-new", false, "add the key of a host seen for the first time to known_hosts")
	fl.IntVar(&c.parallel, "j", 8, "hosts worked on at once (deploy: all those named, up to 64)")
	fl.StringVar(&c.binDir, "bin", filepath.Dir(exe), "`dir`ectory of the binaries: DIR/OS-ARCH/olliesrv (make cross), or DIR/olliesrv for this platform")
	fl.StringVar(&c.dataDir, "data", paths.DataDir(), "the data `dir`ectory to deploy")
	fl.IntVar(&c.keep, "keep", 3, "versions kept on each host, the current one included")
	fl.BoolVar(&c.stop, "stop-daemon", false, "down: stop the host's olliesrv as well")
	fl.BoolVar(&c.all, "all", false, "down: every host held")
	fl.StringVar(&c.modelVia, "model-via", "", "up: give the hosts this desktop's model through the tunnel: desktop, or desktop:BACKEND (a backend of this desktop's backends.json); its API key stays here")
	fl.StringVar(&c.model, "model", "", "up -model-via: the hosts' default model through it (default: the backend's)")
	fl.IntVar(&c.modelConcurrent, "model-concurrent", 0, "up -model-via: model requests at once per host (default 4)")
	fl.IntVar(&c.runTokens, "run-tokens", 0, "up -model-via: tokens one run (a session, across hosts) may spend through the desktop (default: no cap)")
	fl.BoolVar(&c.system, "system", false, "deploy: also install "+deploy.SystemCommand+" for every user, with sudo approved on this desktop")
	fl.DurationVar(&c.deadlines.Step, "timeout", 30*time.Second, "deadline of each remote step (probe, start, status); an upload gets it plus 1s per 32 KiB, a commit 3 times it")
	// Flags may come before or after the command.
	if err := fl.Parse(args); err != nil {
		return 2
	}
	rest := fl.Args()
	if len(rest) == 0 {
		fl.Usage()
		return 2
	}
	cmd, hosts := rest[0], rest[1:]
	if cmd == "fleet" {
		// fleet has flags of its own, and handles Ctrl-C itself.
		jSet := false
		fl.Visit(func(f *flag.Flag) { jSet = jSet || f.Name == "j" })
		c.normalize()
		return fleetMain(&c, jSet, hosts, stdout, stderr)
	}
	if err := fl.Parse(hosts); err != nil {
		return 2
	}
	hosts = fl.Args()
	for _, h := range hosts {
		if strings.HasPrefix(h, "-") {
			fmt.Fprintf(stderr, "ollie-remote: flag %s after a host: put flags before the hosts\n", h)
			return 2
		}
	}
	c.parallel = jobs(cmd, flagGiven(fl, "j"), c.parallel, len(hosts))
	c.normalize()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "deploy":
		if len(hosts) == 0 {
			fmt.Fprintln(stderr, "usage: ollie-remote deploy HOST...")
			return 2
		}
		return deployMain(ctx, &c, hosts, stdout, stderr)
	case "up":
		if len(hosts) == 0 {
			fmt.Fprintln(stderr, "usage: ollie-remote up HOST...")
			return 2
		}
		return upMain(ctx, &c, hosts, stdout, stderr)
	case "down":
		if len(hosts) == 0 && !c.all {
			fmt.Fprintln(stderr, "usage: ollie-remote down [-stop-daemon] HOST... | -all")
			return 2
		}
		return downMain(ctx, &c, hosts, stdout, stderr)
	case "status":
		return statusMain(ctx, &c, hosts, stdout, stderr)
	case "demo":
		return demo.Main(ctx, demo.Config{BinDir: c.binDir, DataDir: c.dataDir}, hosts, stdout, stderr)
	case "broker":
		return desktop.ServeTerminal(ctx, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "ollie-remote", version)
		return 0
	case "help":
		fl.SetOutput(stdout)
		fmt.Fprint(stdout, usage)
		fl.PrintDefaults()
		return 0
	}
	fmt.Fprintf(stderr, "ollie-remote: unknown command %q (deploy, up, down, status, fleet, broker, demo, version)\n", cmd)
	return 2
}

// maxDeployJobs bounds the hosts deploy works on at once when -j is not
// given.
const maxDeployJobs = 64

// jobs is how many of n hosts cmd works on at once: -j when given, else
// its default j, but for deploy all n, as parallel rsyncs would, up to
// maxDeployJobs. A host's deploy mostly waits on the host or the link,
// and a host left for a second round costs a whole deploy's time.
func jobs(cmd string, given bool, j, n int) int {
	if cmd != "deploy" || given {
		return j
	}
	return max(j, min(n, maxDeployJobs))
}

// deployMain deploys to every host, a few at once, printing each host's
// progress as it happens and a table at the end. One host failing never
// stops the others; a degraded host (ssh HOST ollie does not find the
// command, -system was not approved) is not a failure, and its row says
// why.
func deployMain(ctx context.Context, c *common, hosts []string, stdout, stderr io.Writer) int {
	b, err := deploy.LoadBundle(c.binDir, c.dataDir, runtime.GOOS+"/"+runtime.GOARCH)
	if err != nil {
		fmt.Fprintf(stderr, "ollie-remote: %s\n", termsafe.Line(err.Error()))
		return 1
	}
	say := hostLines(stdout)
	// -system asks for sudo as the keeper asks for the hosts' requests:
	// the policy file, the terminal broker, askpass or a dialog, and, as
	// deploy runs in the foreground, this terminal last.
	var sudo *desktop.Broker
	if c.system {
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		sudo = &desktop.Broker{Approver: desktop.NewHandoff(&desktop.Queue{Approver: desktop.Auto(os.Stdin, stderr)}, log), Log: log}
		if r := desktop.OpenRules(log, func(p *desktop.Policy, err error) {
			if err != nil {
				log.Error("ollie-remote: the broker policy is broken", "problem", desktop.PolicyProblem(p, err))
			}
		}); r != nil {
			sudo.Rules = r
		}
	}
	results := make([]deploy.Result, len(hosts))
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			progress := func(msg string) { say(h, msg) }
			if sudo != nil {
				results[i] = deploySystem(ctx, c, h, b, sudo, progress)
			} else {
				results[i] = deployOne(ctx, c, h, b, progress)
			}
			r := results[i]
			if r.Err != "" {
				say(h, "FAILED: "+r.Err)
				return
			}
			for _, ch := range r.Changed {
				say(h, ch)
			}
			for _, d := range r.Degraded {
				say(h, "degraded: "+d)
			}
		}()
	}
	wg.Wait()
	fmt.Fprintln(stdout)
	failed, degraded := deploy.WriteResults(stdout, results)
	if degraded > 0 {
		fmt.Fprintf(stderr, "ollie-remote: %d of %d hosts are degraded (what to do is above)\n", degraded, len(hosts))
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "ollie-remote: %d of %d hosts failed (their errors are above)\n", failed, len(hosts))
		return 1
	}
	return 0
}

// deployOne deploys to one host, over the connection ollie-remote up holds
// when there is one, else over a new one.
func deployOne(ctx context.Context, c *common, host string, b *deploy.Bundle, progress func(string)) deploy.Result {
	if r, ok := deployThroughKeeper(ctx, c, host, b, progress); ok {
		return r
	}
	return deployDirect(ctx, c, host, b, progress, nil)
}

// deployDirect deploys to one host over a connection of its own; system,
// when not nil, approves -system's sudo.
func deployDirect(ctx context.Context, c *common, host string, b *deploy.Bundle, progress func(string), system broker.Approver) deploy.Result {
	progress("connecting")
	start := time.Now()
	cl, err := tunnel.DialRetrying(ctx, host, c.options(), progress)
	if err != nil {
		return deploy.Result{Host: host, Err: err.Error(), Took: time.Since(start)}
	}
	defer cl.Close()
	r := deploy.PushWith(ctx, cl, b, deploy.Options{Keep: c.keep, Deadlines: c.deadlines, Progress: progress, System: system})
	r.Host = host
	r.Took = time.Since(start)
	return r
}

// hostLines prints a line under a host's name, one at a time. The line
// may carry the host's words (its error output, its install report, its
// socket's path): one line, its control characters made visible, so that
// no host can write escapes to this terminal or a line of another host's.
func hostLines(w io.Writer) func(host, msg string) {
	var mu sync.Mutex
	return func(host, msg string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s: %s\n", termsafe.Line(host), termsafe.Field(msg, maxHostMessage))
	}
}

// maxHostMessage bounds a line of a host's words printed under its name.
const maxHostMessage = deploy.MaxHostMessage
