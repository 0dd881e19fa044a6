// Package demo is "ollie-remote demo": a walk-through of ollie-remote on
// a machine with no remote host and no root. It starts three SSH hosts
// inside this process (internal/demohost), deploys to them with the
// ollie-remote binary that runs it, brings them up, runs an agent on one,
// and cleans everything up again; each step prints the command a person
// would type for it.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"ollie/agent/fakellm"
	"ollie/agent/wire"
	"ollie/internal/demohost"
	"ollie/internal/paths"
	"ollie/ns/client"
	"ollie/tunnel/deploy"
)

const demoUsage = `usage: ollie-remote demo [keep]

Starts three demo SSH hosts inside this process (loopback, no root), deploys
ollie to them, brings them up, runs an agent on demo1 and cleans up. With
keep, everything stays up until Ctrl-C.
`

// demoHosts is how many hosts the demo starts.
const demoHosts = 3

// ScriptedBanner labels everything the scripted model says.
const ScriptedBanner = "SCRIPTED MODEL: no OLLAMA_HOST or OPENAI_API_KEY set; replies are canned"

// ScriptedReply is the scripted model's one answer, streamed word by word.
const ScriptedReply = "Hello from demo1! This reply is canned: a scripted model wrote it before you ran the demo, " +
	"so nothing here was generated. The path it took is real, though: olliesrv on demo1 asked its model " +
	"backend, streamed the answer into session/demo/agent/a/chat, and ollie-remote carried it to you " +
	"through the SSH tunnel. Set OLLAMA_HOST or OPENAI_API_KEY and run the demo again to talk to a real model."

// modelEnv are the variables that give olliesrv a real model; the demo
// hosts' commands inherit the ones set here.
var modelEnv = []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "OLLAMA_HOST", "OLLAMA_MODEL"}

type demo struct {
	ctx    context.Context
	c      Config
	stdout io.Writer
	stderr io.Writer
	keep   bool

	exe      string // this binary, as the user would type it
	exePath  string
	dir      string // everything the demo makes, removed at the end
	rdir     string // OLLIE_REMOTE_DIR: the demo's own keeper and sockets
	fleet    *demohost.Fleet
	files    demohost.ClientFiles
	llm      *fakellm.Server // nil with a real model
	real     string          // the real model, described; "" when scripted
	hosts    []string
	wentUp   bool
	stepN    int
	cleaning sync.Once
}

// Config is where the demo finds what it deploys, as ollie-remote's -bin
// and -data give it.
type Config struct {
	BinDir, DataDir string
}

// Main runs "ollie-remote demo": a local fleet on loopback, deployed, held
// and talked to end to end, with the commands it runs shown as it goes.
func Main(ctx context.Context, c Config, args []string, stdout, stderr io.Writer) int {
	d := &demo{ctx: ctx, c: c, stdout: stdout, stderr: stderr}
	for _, a := range args {
		switch a {
		case "keep":
			d.keep = true
		case "help":
			fmt.Fprint(stdout, demoUsage)
			return 0
		default:
			fmt.Fprint(stderr, demoUsage)
			return 2
		}
	}
	start := time.Now()
	err := d.run()
	if err == nil && d.keep {
		d.waitForInterrupt()
	}
	if cerr := d.cleanup(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "\nollie-remote demo: FAILED: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nThe demo took %.1fs.\n", time.Since(start).Seconds())
	return 0
}

func (d *demo) step(title string) {
	d.stepN++
	fmt.Fprintf(d.stdout, "\n== %d. %s\n", d.stepN, title)
}

// show prints a command as a person would type it.
func (d *demo) show(env string, args ...string) {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellWord(a)
	}
	if env != "" {
		env += " "
	}
	fmt.Fprintf(d.stdout, "$ %s%s\n", env, strings.Join(q, " "))
}

// showInput prints a command that reads input on its standard input.
func (d *demo) showInput(input string, args ...string) {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellWord(a)
	}
	fmt.Fprintf(d.stdout, "$ echo %s | %s\n", shellWord(input), strings.Join(q, " "))
}

func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@+%", r))
	}) < 0 {
		return s
	}
	return deploy.ShellQuote(s)
}

// typed is how a person in the current directory names path.
func typed(path string) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
			if !strings.Contains(rel, "/") {
				return "./" + rel
			}
			return rel
		}
	}
	return path
}

func (d *demo) run() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	d.exePath, d.exe = exe, typed(exe)
	if _, err := deploy.LoadBundle(d.c.BinDir, d.c.DataDir, runtime.GOOS+"/"+runtime.GOARCH); err != nil {
		return err
	}
	for i := 1; i <= demoHosts; i++ {
		d.hosts = append(d.hosts, fmt.Sprintf("demo%d", i))
	}
	steps := []func() error{d.startHosts, d.pickModel, d.deploy, d.up, d.agent, d.fleetRun, d.look}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
		if err := d.ctx.Err(); err != nil {
			return fmt.Errorf("interrupted")
		}
	}
	return nil
}

// startHosts makes the demo directory, a client key, the hosts and the
// ssh config that reaches them.
func (d *demo) startHosts() error {
	d.step(fmt.Sprintf("Start %d demo hosts: SSH servers inside this process, on 127.0.0.1", demoHosts))
	base := paths.XDG("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(base); base == "" || err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "ollie-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	// The keeper's sockets need short paths.
	d.rdir = filepath.Join(dir, "remote")
	if len(d.rdir) > 80 {
		if d.rdir, err = os.MkdirTemp("/tmp", "ollie-demo-r-"); err != nil {
			return err
		}
	}
	os.Setenv("OLLIE_REMOTE_DIR", d.rdir)
	fmt.Fprintf(d.stdout, "demo directory: %s (removed at the end)\n", dir)

	key := filepath.Join(dir, "id_ed25519")
	pub, err := demohost.NewClientKey(key)
	if err != nil {
		return err
	}
	var env []string
	for _, k := range modelEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	d.fleet, err = demohost.Start(filepath.Join(dir, "hosts"), demoHosts, pub, &demohost.Options{Env: env})
	if err != nil {
		return err
	}
	d.files, err = d.fleet.WriteClientFiles(dir, key)
	if err != nil {
		return err
	}
	for _, h := range d.fleet.Hosts {
		fmt.Fprintf(d.stdout, "%s  %s  home %s\n", h.Name, h.HostPort(), h.Home)
	}
	fmt.Fprintf(d.stdout, "client key %s; ssh config %s; known_hosts %s\n", key, d.files.Config, d.files.KnownHosts)
	fmt.Fprintln(d.stdout, "Each host has its own host key, checked against known_hosts like any other host's; each runs")
	fmt.Fprintln(d.stdout, "commands as you, with its own HOME. OpenSSH reaches them too:")
	d.show("", "ssh", "-F", d.files.Config, "demo1", "echo", "$HOME")
	return nil
}

// pickModel says which model the agents use, starting the scripted one
// when no real one is configured.
func (d *demo) pickModel() error {
	d.step("Pick the model the hosts' agents use")
	switch {
	case os.Getenv("OPENAI_API_KEY") != "" || os.Getenv("OPENAI_BASE_URL") != "":
		url := os.Getenv("OPENAI_BASE_URL")
		if url == "" {
			url = "https://api.openai.com/v1"
		}
		d.real = "OpenAI-compatible API at " + url
		if m := os.Getenv("OPENAI_MODEL"); m != "" {
			d.real += ", model " + m
		}
	case os.Getenv("OLLAMA_HOST") != "":
		d.real = "Ollama at " + os.Getenv("OLLAMA_HOST")
		if m := os.Getenv("OLLAMA_MODEL"); m != "" {
			d.real += ", model " + m
		}
	}
	if d.real != "" {
		fmt.Fprintf(d.stdout, "REAL MODEL: %s.\nolliesrv on the demo hosts gets these variables from the environment, as it would from a host's own.\n", d.real)
		return nil
	}
	llm, err := fakellm.New()
	if err != nil {
		return fmt.Errorf("scripted model: %w", err)
	}
	d.llm = llm
	words := strings.SplitAfter(ScriptedReply, " ")
	d.llm.Push(fakellm.Response{Text: words, Delay: 25 * time.Millisecond})
	backends := `{"backends": {"scripted": {"type": "openai", "url": "` + d.llm.URL + `/v1", "model": "fake-model"}}}` + "\n"
	for _, h := range d.fleet.Hosts {
		dir := filepath.Join(h.ConfigDir(), "ollie")
		if err := os.MkdirAll(dir, 0700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "backends.json"), []byte(backends), 0600); err != nil {
			return err
		}
	}
	bar := strings.Repeat("*", len(ScriptedBanner)+4)
	fmt.Fprintf(d.stdout, "%s\n* %s *\n%s\n", bar, ScriptedBanner, bar)
	fmt.Fprintf(d.stdout, "A scripted OpenAI-compatible server on %s plays a canned reply; each host's\n", d.llm.URL)
	fmt.Fprintf(d.stdout, "~/.config/ollie/backends.json names it:\n  %s", backends)
	return nil
}

// remote runs this binary with args, its output going straight to ours.
func (d *demo) remote(ctx context.Context, args ...string) error {
	full := []string{"-F", d.files.Config}
	if d.c.BinDir != filepath.Dir(d.exePath) {
		full = append(full, "-bin", d.c.BinDir)
	}
	if d.c.DataDir != paths.DataDir() {
		full = append(full, "-data", d.c.DataDir)
	}
	full = append(full, args...)
	d.show("", append([]string{d.exe}, full...)...)
	cmd := exec.CommandContext(ctx, d.exePath, full...)
	// The demo's fleet runs are kept in its directory, not among yours.
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+d.rdir, "XDG_STATE_HOME="+filepath.Join(d.dir, "state"))
	cmd.Stdout, cmd.Stderr = d.stdout, d.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ollie-remote %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (d *demo) deploy() error {
	d.step("Deploy: olliesrv and data/ to every host over SFTP, the real ollie-remote deploy")
	return d.remote(d.ctx, append([]string{"deploy"}, d.hosts...)...)
}

func (d *demo) up() error {
	d.step("Up: start olliesrv on each host and forward its namespace to a local socket")
	fmt.Fprintln(d.stdout, "The demo's tunnels and the keeper holding them live apart from your own:")
	d.show("", "export", "OLLIE_REMOTE_DIR="+d.rdir)
	d.wentUp = true
	if err := d.remote(d.ctx, append([]string{"up"}, d.hosts...)...); err != nil {
		return err
	}
	return d.remote(d.ctx, append([]string{"status"}, d.hosts...)...)
}

// agent runs one prompt on demo1 through its forwarded namespace and
// streams the reply.
func (d *demo) agent() error {
	host := d.hosts[0]
	d.step("Run an agent on " + host + " through the tunnel")
	limit := 60 * time.Second
	if d.real != "" {
		limit = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(d.ctx, limit)
	defer cancel()
	sock := paths.RemoteSocket(host)
	dial := func() (*client.Conn, error) {
		c, err := client.DialAs(sock, "")
		if err != nil {
			return nil, fmt.Errorf("%s's namespace: %w", host, err)
		}
		return c, nil
	}
	// One connection per activity: ending one call's context interrupts
	// every call on its connection.
	ctl, err := dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	sh := d.ollieCmd(host)
	for _, r := range []struct{ file, req string }{{"session/new", "name=demo"}, {"session/demo/agent/new", "name=a"}} {
		d.showInput(r.req, append(sh, "rdwr", r.file)...)
		b, err := ctl.RdWr(ctx, r.file, []byte(r.req))
		if err != nil {
			return fmt.Errorf("%s: %s: %w", host, r.file, err)
		}
		fmt.Fprintf(d.stdout, "%s\n", bytes.TrimSpace(b))
	}

	follow, err := dial()
	if err != nil {
		return err
	}
	defer follow.Close()
	label := "agent a on " + host + ", model: " + d.real
	if d.real == "" {
		label = "agent a on " + host + ", " + ScriptedBanner
	}
	out := &prefixWriter{w: d.stdout, prefix: host + "/a │ "}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- follow.Follow(fctx, "session/demo/agent/a/chat", out) }()

	prompt := "Say hello and tell me in two sentences what you can do on this host."
	d.showInput(prompt, append(sh, "write", "session/demo/agent/a/prompt")...)
	d.show("", append(sh, "read", "session/demo/agent/a/chat")...)
	fmt.Fprintf(d.stdout, "── %s ──\n", label)
	state, err := d.runTurn(ctx, dial, ctl, prompt)
	// Let the last of the stream arrive before the follow ends.
	out.waitQuiet(150*time.Millisecond, 2*time.Second)
	stopFollow()
	<-followed
	out.end()
	fmt.Fprintf(d.stdout, "── end of %s ──\n", label)
	if err != nil {
		return err
	}
	d.show("", append(sh, "read", "session/demo/agent/a/state")...)
	fmt.Fprint(d.stdout, state)
	return nil
}

// runTurn writes the prompt and waits for the turn to end: stats counts
// the turns run to their end. statewait (a read that returns at the next
// change of state) wakes the wait early; a tick covers a change between
// two waits.
func (d *demo) runTurn(ctx context.Context, dial func() (*client.Conn, error), ctl *client.Conn, prompt string) (string, error) {
	waiter, err := dial()
	if err != nil {
		return "", err
	}
	defer waiter.Close()
	changes := make(chan struct{}, 1)
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	go func() {
		for wctx.Err() == nil {
			if _, err := waiter.ReadAll(wctx, "session/demo/agent/a/statewait"); err != nil {
				time.Sleep(100 * time.Millisecond)
			}
			select {
			case changes <- struct{}{}:
			default:
			}
		}
	}()
	if err := ctl.Write(ctx, "session/demo/agent/a/prompt", []byte(prompt)); err != nil {
		return "", fmt.Errorf("writing the prompt: %w", err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-changes:
		case <-tick.C:
		case <-ctx.Done():
			if d.ctx.Err() != nil {
				return "", errors.New("interrupted")
			}
			return "", errors.New("the agent did not finish its turn in time")
		}
		b, err := ctl.ReadAll(ctx, "session/demo/agent/a/stats")
		if err != nil {
			return "", fmt.Errorf("reading the agent's stats: %w", err)
		}
		var st wire.Stats
		if err := json.Unmarshal(b, &st); err != nil {
			return "", fmt.Errorf("the agent's stats %q: %w", b, err)
		}
		if st.Turns < 1 {
			continue
		}
		if st.LastError != "" {
			hint := ""
			if d.real != "" {
				hint = " (check OLLAMA_HOST, OLLAMA_MODEL or OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL)"
			}
			return "", fmt.Errorf("the agent's turn failed: %s%s", st.LastError, hint)
		}
		state, err := ctl.ReadAll(ctx, "session/demo/agent/a/state")
		if err != nil {
			return "", fmt.Errorf("reading the agent's state: %w", err)
		}
		return string(state), nil
	}
}

// ollieCmd is the ollie command that reaches host's forwarded namespace.
func (d *demo) ollieCmd(host string) []string {
	if link := filepath.Join(d.c.BinDir, "ollie"); fileExists(link) {
		return []string{typed(link), "-H", host}
	}
	return []string{typed(filepath.Join(d.c.BinDir, "olliesrv")), "ollie", "-H", host}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ollie runs the ollie client on a host's forwarded namespace.
func (d *demo) ollie(host string, args ...string) error {
	cmdline := append(d.ollieCmd(host), args...)
	d.show("", cmdline...)
	cmd := exec.CommandContext(d.ctx, filepath.Join(d.c.BinDir, "olliesrv"), append([]string{"ollie", "-H", host}, args...)...)
	cmd.Env = append(os.Environ(), "OLLIE_REMOTE_DIR="+d.rdir)
	cmd.Stdout, cmd.Stderr = d.stdout, d.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ollie -H %s %s: %w", host, strings.Join(args, " "), err)
	}
	return nil
}

// fleetRun gives one goal to every host at once and shows the results.
func (d *demo) fleetRun() error {
	d.step("Fleet: one goal on every host at once, a row of results per host")
	if d.llm != nil {
		// Each host's agent runs one tool, then answers from its output.
		d.llm.Respond(func(req *fakellm.ChatRequest) fakellm.Response {
			last := req.Messages[len(req.Messages)-1]
			if last.Role == "tool" {
				return fakellm.Response{Text: []string{"(SCRIPTED MODEL) The shell tool said: ", strings.TrimSpace(last.Text())}, Delay: 50 * time.Millisecond}
			}
			return fakellm.Response{ToolCalls: []fakellm.Call{{Name: "shell", Args: `{"command": "echo $(id -un) on $(uname -n), $(df -h . | tail -1 | tr -s ' ' | cut -d' ' -f5) of its disk used"}`}}, Delay: 200 * time.Millisecond}
		})
		fmt.Fprintln(d.stdout, "The scripted model now has each host's agent run the shell tool once, then repeat what it printed.")
	}
	limit := 2 * time.Minute
	if d.real != "" {
		limit = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(d.ctx, limit)
	defer cancel()
	if err := d.remote(ctx, "fleet", "run", strings.Join(d.hosts, ","), "Check how full the disk is and say so in one line."); err != nil {
		return err
	}
	fmt.Fprintln(d.stdout, "The run is kept on this desktop; a run left working (Ctrl-C twice) is watched again with fleet attach:")
	return d.remote(ctx, "fleet", "ls")
}

// look lists a few files of each host's namespace with the ollie client.
func (d *demo) look() error {
	d.step("Look at each host's namespace with the ollie client")
	if err := d.ollie(d.hosts[0], "ls", "session/demo/agent/a"); err != nil {
		return err
	}
	for _, h := range d.hosts {
		if err := d.ollie(h, "ls", "session"); err != nil {
			return err
		}
	}
	return d.ollie(d.hosts[1], "read", "backends")
}

func (d *demo) waitForInterrupt() {
	d.step("Everything stays up until Ctrl-C")
	if d.llm != nil {
		d.llm.SetImmediate("(SCRIPTED MODEL) A canned reply: every prompt gets this one. Set OLLAMA_HOST or OPENAI_API_KEY for a real model.")
		fmt.Fprintln(d.stdout, "The scripted model now answers every prompt with one canned line.")
	}
	env := "OLLIE_REMOTE_DIR=" + d.rdir
	fmt.Fprintf(d.stdout, "In another terminal:\n")
	d.show(env, d.ollieCmd("demo1")...)
	fmt.Fprintln(d.stdout, "    a shell on demo1's namespace: ls, cd session/demo/agent/a, cat chat, echo hi > prompt")
	d.show(env, append([]string{d.exe, "-F", d.files.Config, "status"}, d.hosts...)...)
	d.show("", "ssh", "-F", d.files.Config, "demo2", "ollie", "ls", "/")
	fmt.Fprintln(d.stdout, "    OpenSSH's own client on a demo host: the ollie command deploy installed there")
	fmt.Fprintf(d.stdout, "Ctrl-C stops the hosts and removes %s.\n", d.dir)
	<-d.ctx.Done()
	fmt.Fprintln(d.stdout)
}

// cleanup takes down what the demo started, whatever step it reached:
// the tunnels and the hosts' daemons, the keeper, the hosts, the scripted
// model, the directory.
func (d *demo) cleanup() error {
	var errs []error
	d.cleaning.Do(func() {
		if d.dir == "" {
			return
		}
		d.step("Clean up")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if d.wentUp {
			if err := d.remote(ctx, "down", "-stop-daemon", "-all"); err != nil {
				errs = append(errs, err)
			}
			if err := stopKeeper(ctx, filepath.Join(d.rdir, "keeper.sock")); err != nil {
				errs = append(errs, err)
			}
		}
		if d.fleet != nil {
			if err := d.fleet.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if d.llm != nil {
			d.llm.Close()
		}
		for _, dir := range []string{d.rdir, d.dir} {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			fmt.Fprintf(d.stdout, "stopped the hosts, their olliesrv and the tunnels; removed %s\n", d.dir)
		}
	})
	return errors.Join(errs...)
}

// stopKeeper ends the demo's keeper if it outlived down (one that never
// held a host does not quit by itself), found as the peer of its control
// socket.
func stopKeeper(ctx context.Context, sock string) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil
	}
	uc := c.(*net.UnixConn)
	raw, err := uc.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	c.Close()
	if cerr != nil {
		return fmt.Errorf("the demo's keeper: %w", cerr)
	}
	if err := syscall.Kill(int(cred.Pid), syscall.SIGTERM); err != nil {
		return fmt.Errorf("the demo's keeper (pid %d): %w", cred.Pid, err)
	}
	for syscall.Kill(int(cred.Pid), 0) == nil {
		if ctx.Err() != nil {
			return fmt.Errorf("the demo's keeper (pid %d) did not exit", cred.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// prefixWriter starts every line with prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool // within a line
	last   time.Time
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = time.Now()
	var buf bytes.Buffer
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if !p.mid {
			buf.WriteString(p.prefix)
		}
		buf.Write(line)
		p.mid = line[len(line)-1] != '\n'
	}
	if _, err := p.w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// waitQuiet returns once nothing was written for quiet, or after max.
func (p *prefixWriter) waitQuiet(quiet, max time.Duration) {
	for deadline := time.Now().Add(max); time.Now().Before(deadline); time.Sleep(quiet / 4) {
		p.mu.Lock()
		last := p.last
		p.mu.Unlock()
		if time.Since(last) >= quiet {
			return
		}
	}
}

// end finishes a line left open.
func (p *prefixWriter) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mid {
		io.WriteString(p.w, "\n")
		p.mid = false
	}
}
