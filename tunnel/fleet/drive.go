package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"ollie/agent/wire"
	"ollie/internal/paths"
	"ollie/ns/client"
	"ollie/tunnel/deploy"
	"ollie/tunnel/keeper"
	"ollie/tunnel/models"
)

// Config is how a Runner reaches the hosts.
type Config struct {
	SSH       paths.SSHConfig
	AcceptNew bool
	Keep      int
	Deadlines deploy.Deadlines
	// Bundle, when set, is deployed to every host before its session is
	// made (a host already on it is only probed).
	Bundle *deploy.Bundle
	// Jobs bounds the hosts being connected to, deployed to and set up
	// at once; watching is not bounded. 0 means 32.
	Jobs int
	// ConnectTimeout bounds connecting to one host (retries with
	// back-off included). 0 means 2 minutes.
	ConnectTimeout time.Duration
	// LostAfter is how long a host that was reached may stay unreachable
	// before it is reported lost. 0 means 2 minutes.
	LostAfter time.Duration
	// Waiting, when set, names the tool a host's request for approval
	// waits on, "" when none does: the run's broker knows.
	Waiting func(host string) string
}

// An Observer hears of a run as it happens, from the hosts' goroutines at
// once: it keeps its own order.
type Observer interface {
	// Changed is called with a copy of a host whose state changed.
	Changed(h Host)
	// Output is called with each line of a host's chat.
	Output(host, line string)
}

// A Runner drives a run's hosts.
type Runner struct {
	Run   *Run
	Cfg   Config
	Store Store
	Obs   Observer

	mu          sync.Mutex
	socks       map[string]string // host → its forwarded namespace socket
	interrupted bool
	polling     bool // Poll: a host out of reach now has no result
	dirty       bool

	promptOnce  sync.Once
	promptLines map[string]bool // lines of the prompts the run gives (injected)
}

const agentName = wire.GoalAgent

// Start deploys to every host, holds it, creates its session and agent and
// gives the goal, then watches until every host is done or ctx ends (a
// detach: the agents go on).
func (r *Runner) Start(ctx context.Context) error { return r.drive(ctx, true) }

// Attach watches a run made earlier, from where its hosts are now.
func (r *Runner) Attach(ctx context.Context) error { return r.drive(ctx, false) }

func (r *Runner) drive(ctx context.Context, fresh bool) error {
	if err := keeper.Ensure(ctx, r.Cfg.SSH); err != nil {
		return err
	}
	r.mu.Lock()
	r.socks = map[string]string{}
	r.Run.State = "running"
	r.Run.Ended = time.Time{}
	r.mu.Unlock()
	saved := make(chan struct{})
	sctx, stopSaving := context.WithCancel(context.Background())
	go func() {
		defer close(saved)
		r.saveEvery(sctx, 500*time.Millisecond)
	}()
	jobs := r.Cfg.Jobs
	if jobs <= 0 {
		jobs = 32
	}
	sem := make(chan struct{}, jobs)
	var wg sync.WaitGroup
	for _, h := range r.Run.Hosts {
		if !fresh && h.Result != "" {
			// A host that was out of reach is tried again; one whose
			// agent ended is not.
			if h.Result != "unreachable" && h.Result != "lost" {
				continue
			}
			h.Result, h.Ended = "", time.Time{}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.host(ctx, h, fresh, sem)
		}()
	}
	wg.Wait()
	stopSaving()
	<-saved
	usage := r.modelUsage()
	r.mu.Lock()
	if usage != nil {
		r.Run.ModelUsage = usage
	}
	switch {
	case ctx.Err() != nil:
		r.Run.State = "detached"
	case r.interrupted:
		r.Run.State, r.Run.Ended = "interrupted", time.Now().UTC()
	default:
		r.Run.State, r.Run.Ended = "finished", time.Now().UTC()
	}
	r.mu.Unlock()
	return r.save()
}

func (r *Runner) save() error {
	r.mu.Lock()
	b, err := json.Marshal(r.Run)
	r.dirty = false
	r.mu.Unlock()
	if err != nil {
		return err
	}
	var copyRun Run
	json.Unmarshal(b, &copyRun)
	return r.Store.Save(&copyRun)
}

func (r *Runner) saveEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.mu.Lock()
			dirty := r.dirty
			r.mu.Unlock()
			if dirty {
				r.save()
			}
		}
	}
}

// update changes a host under the lock and tells the observer when
// anything shown changed.
func (r *Runner) update(h *Host, f func(h *Host)) {
	r.mu.Lock()
	before := *h
	f(h)
	changed := before.State != h.State || before.Result != h.Result || before.Detail != h.Detail ||
		before.Steps != h.Steps || before.ToolCalls != h.ToolCalls || before.Tokens != h.Tokens || len(before.Notes) != len(h.Notes)
	if changed {
		r.dirty = true
	}
	cp := *h
	r.mu.Unlock()
	if changed && r.Obs != nil {
		r.Obs.Changed(cp)
	}
}

func (r *Runner) fail(h *Host, result, why string) {
	r.update(h, func(h *Host) {
		h.Result, h.State, h.Detail = result, result, why
		if h.Ended.IsZero() {
			h.Ended = time.Now().UTC()
		}
	})
}

func (r *Runner) host(ctx context.Context, h *Host, fresh bool, sem chan struct{}) {
	r.update(h, func(h *Host) {
		h.State = "connecting"
		if fresh || h.Started.IsZero() {
			h.Started = time.Now().UTC()
		}
	})
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	sock, ok := r.setUp(ctx, h, fresh)
	<-sem
	if !ok {
		return
	}
	r.watch(ctx, h, sock, false)
}

// setUp holds the host (deploying first for a fresh run) and, for a fresh
// run, makes its session and agent and gives the goal.
func (r *Runner) setUp(ctx context.Context, h *Host, fresh bool) (string, bool) {
	timeout := r.Cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	req := keeper.Request{Op: "up", Host: h.Name, Config: r.Cfg.SSH.Config, Known: r.Cfg.SSH.Known, AcceptNew: r.Cfg.AcceptNew, Keep: r.Cfg.Keep,
		Deadlines: r.Cfg.Deadlines, ConnectTimeout: timeout, Override: h.Override}
	req.Models = h.Route
	if fresh {
		req.Bundle = r.Cfg.Bundle
	}
	reply, err := keeper.Call(ctx, req, func(rep keeper.Reply) {
		if strings.HasPrefix(rep.Msg, "olliesrv serves") || rep.Msg == "already up" {
			return
		}
		r.update(h, func(h *Host) {
			if h.State != "deploying" && rep.Msg != "connecting" {
				h.State = "deploying"
			}
			h.Detail = rep.Msg
		})
	})
	if ctx.Err() != nil {
		return "", false
	}
	if err == nil && reply.Err != "" {
		err = errors.New(reply.Err)
	}
	if dr := reply.Result; dr != nil {
		r.update(h, func(h *Host) {
			h.Version = dr.Version
			// Degraded is not failed: the host runs the goal, and the
			// table says what works less well there and what to do.
			for _, d := range dr.Degraded {
				h.Notes = append(h.Notes, "degraded: "+d)
			}
		})
	}
	if err != nil {
		result := "failed"
		if reply.Unreachable || errors.Is(err, context.DeadlineExceeded) {
			result = "unreachable"
		}
		if r.polling {
			r.update(h, func(h *Host) { h.State = result + " now: " + err.Error() })
			return "", false
		}
		r.fail(h, result, err.Error())
		return "", false
	}
	r.mu.Lock()
	r.socks[h.Name] = reply.Socket
	r.mu.Unlock()
	if !fresh {
		return reply.Socket, true
	}
	r.mu.Lock()
	interrupted := r.interrupted
	r.mu.Unlock()
	if interrupted {
		r.fail(h, "interrupted", "interrupted before its agent started")
		return "", false
	}
	r.update(h, func(h *Host) { h.State, h.Detail = "starting", "" })
	c, err := dialHost(reply.Socket)
	if err != nil {
		r.fail(h, "failed", err.Error())
		return "", false
	}
	defer c.Close()
	sess := "session/" + r.Run.Session
	steps := []struct{ file, req string }{
		{"session/new", "name=" + r.Run.Session},
		{sess + "/agent/new", wire.NewAgent(agentName, r.Run.Profile, r.Run.Model)},
	}
	for _, s := range steps {
		if _, err := c.RdWr(ctx, s.file, []byte(s.req)); err != nil {
			r.fail(h, "failed", err.Error())
			return "", false
		}
	}
	r.update(h, func(h *Host) { h.Agent = agentName })
	if err := c.Write(ctx, sess+"/goal", []byte(r.Run.Goal)); err != nil {
		r.fail(h, "failed", err.Error())
		return "", false
	}
	return reply.Socket, true
}

// modelUsage is what the run's agents used of the desktop's model, as the
// keeper counted it; nil when the run did not go through the desktop.
func (r *Runner) modelUsage() *models.Usage {
	routed := false
	for _, h := range r.Run.Hosts {
		routed = routed || h.Route != nil
	}
	if !routed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := keeper.Call(ctx, keeper.Request{Op: "list", Config: r.Cfg.SSH.Config, Known: r.Cfg.SSH.Known}, nil)
	if err != nil {
		return nil
	}
	u := rep.Runs[r.Run.Session]
	return &u
}

func dialHost(sock string) (*client.Conn, error) { return client.DialTimeout(sock, "", 10*time.Second) }

// Interrupt stops every agent of the run that still works: their turns end
// and their hosts' results are interrupted.
func (r *Runner) Interrupt(ctx context.Context) {
	r.mu.Lock()
	r.interrupted = true
	socks := map[string]string{}
	for k, v := range r.socks {
		socks[k] = v
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range r.Run.Hosts {
		sock := socks[h.Name]
		r.mu.Lock()
		done := h.Result != ""
		r.mu.Unlock()
		if sock == "" || done {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopAgent(ctx, sock, r.Run.Session)
		}()
	}
	wg.Wait()
}

// stopAgent interrupts the run's agent on one host.
func stopAgent(ctx context.Context, sock, session string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := dialHost(sock)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.RdWr(ctx, "session/"+session+"/agent/"+agentName+"/ctl", []byte("stop"))
	return err
}

// Stop interrupts the agents of a run no one watches: each host is held
// (not deployed to), its agent stopped, and the result recorded.
func Stop(ctx context.Context, run *Run, cfg Config, store Store) error {
	if err := keeper.Ensure(ctx, cfg.SSH); err != nil {
		return err
	}
	var mu sync.Mutex
	var failed []string
	eachUnfinished(run, func(h *Host) {
		req := keeper.Request{Op: "up", Host: h.Name, Config: cfg.SSH.Config, Known: cfg.SSH.Known, Deadlines: cfg.Deadlines, Override: h.Override}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		reply, err := keeper.Call(cctx, req, nil)
		if err == nil && reply.Err != "" {
			err = errors.New(reply.Err)
		}
		if err == nil {
			err = stopAgent(ctx, reply.Socket, run.Session)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", h.Name, err))
			return
		}
		h.Result, h.State, h.Ended = "interrupted", "interrupted", time.Now().UTC()
	})
	run.State, run.Ended = "stopped", time.Now().UTC()
	if err := store.Save(run); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("not stopped: %s", strings.Join(failed, "; "))
	}
	return nil
}

// Poll reads once where each host of a run that has no result yet is now,
// records what finished, and saves the run.
func Poll(ctx context.Context, run *Run, cfg Config, store Store) error {
	if err := keeper.Ensure(ctx, cfg.SSH); err != nil {
		return err
	}
	r := &Runner{Run: run, Cfg: cfg, Store: store, socks: map[string]string{}, polling: true}
	eachUnfinished(run, func(h *Host) {
		if sock, ok := r.setUp(ctx, h, false); ok {
			r.watch(ctx, h, sock, true)
		}
	})
	return r.save()
}

// eachUnfinished runs f for each host of run that has no result yet, each
// in a goroutine of its own, and returns when all have returned.
func eachUnfinished(run *Run, f func(h *Host)) {
	var wg sync.WaitGroup
	for _, h := range run.Hosts {
		if h.Result != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(h)
		}()
	}
	wg.Wait()
}
