package toolsrv

// An idle session's tool server rests: once no operation has used it for
// SpawnConfig.IdleAfter, and it runs no background process, the parent
// reads what it holds (childState), stops it, and starts it again, going
// on from that, at the session's next operation. A session left for the
// night then costs its host no process and no memory beyond the daemon's
// record of it; its next call pays the start (tens of milliseconds).
//
// Nothing a caller can see is lost: the tools loaded stay loaded, the
// revision moves on (a restart re-reads the tools on disk, as reload
// does), background process ids keep counting up (an old id never names
// a new process), and the cut output kept on disk still counts against
// the session's limit. The same start serves a process that died.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"9fans.net/go/plan9"

	"ollie/ns"
)

// childState is what a run hands the next: the "state" file of the
// child's namespace.
type childState struct {
	Tools    []string `json:"tools"` // loaded, in order; nil (before any run) loads every tool
	Revision uint64   `json:"revision"`
	LastProc int      `json:"last_proc"` // the last background process id given
	Procs    int      `json:"procs"`     // background processes it still holds: while any, it does not rest
}

// ToolsrvIdleEnv sets how long a session's tool server waits unused
// before it stops (a Go duration; 0 keeps it running).
const ToolsrvIdleEnv = "OLLIE_TOOLSRV_IDLE"

// defaultToolsrvIdle: past the helpers' minute, a session unused for
// five is one a person has left; its next call pays a start.
const defaultToolsrvIdle = 5 * time.Minute

// ToolsrvIdle is the rest time OLLIE_TOOLSRV_IDLE sets.
func ToolsrvIdle(log *slog.Logger) time.Duration {
	return envDuration(log, ToolsrvIdleEnv, defaultToolsrvIdle)
}

func envDuration(log *slog.Logger, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		log.Warn("toolsrv: ignoring a bad "+name, "value", v, "using", def)
		return def
	}
	return d
}

// running returns the process serving now, started first when there is
// none (the session rested, or it died), with c.mu held and the caller
// counted as an active operation.
func (c *Child) running(ctx context.Context) (*childRun, error) {
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return nil, errors.New("toolsrv: the session's tool server is closed")
		}
		if c.moving != nil {
			moving := c.moving
			c.mu.Unlock()
			select {
			case <-moving:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c.mu.Lock()
			continue
		}
		if c.run != nil && !isDone(c.run.exited) {
			c.active++
			return c.run, nil
		}
		if c.run != nil {
			// Died: its connections are dead too. It starts from what
			// the last rest kept; what it loaded since is lost with it.
			slog.Warn("toolsrv: a session's tool server exited; starting it again", "session", c.cfg.SessionID, "err", c.run.err)
			os.RemoveAll(c.run.dir)
			c.dropIdle()
			c.run = nil
		}
		moving := make(chan struct{})
		c.moving = moving
		kept := c.kept
		c.mu.Unlock()
		run, err := c.start(ctx, kept)
		c.mu.Lock()
		c.moving = nil
		close(moving)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.closed {
			c.mu.Unlock()
			run.stop()
			return nil, errors.New("toolsrv: the session's tool server is closed")
		}
		c.run = run
	}
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// dropIdle closes the kept connections; c.mu is held.
func (c *Child) dropIdle() {
	for _, cc := range c.idle {
		cc.conn.Close()
	}
	c.idle = nil
}

// restLater has the process rest once IdleAfter passes with no
// operation; c.mu is held.
func (c *Child) restLater() {
	if c.cfg.IdleAfter <= 0 || c.closed {
		return
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(c.cfg.IdleAfter, c.rest)
		return
	}
	c.timer.Reset(c.cfg.IdleAfter)
}

// rest stops the process if the session is still idle, keeping what the
// next run goes on from. Operations that come meanwhile wait for it.
func (c *Child) rest() {
	c.mu.Lock()
	if c.closed || c.active > 0 || c.run == nil || c.moving != nil {
		c.mu.Unlock()
		return
	}
	if wait := c.cfg.IdleAfter - time.Since(c.used); wait > 0 {
		c.timer.Reset(wait)
		c.mu.Unlock()
		return
	}
	run := c.run
	moving := make(chan struct{})
	c.moving = moving
	c.dropIdle()
	c.mu.Unlock()

	st, err := c.state(run)
	rested := err == nil && st.Procs == 0
	if rested {
		run.stop()
	}
	c.mu.Lock()
	if rested {
		c.run, c.kept = nil, st
	} else if err != nil && !isDone(run.exited) {
		slog.Warn("toolsrv: a session's tool server did not say what it holds; it keeps running", "session", c.cfg.SessionID, "err", err)
	}
	c.moving = nil
	close(moving)
	c.mu.Unlock()
}

// state reads what run holds, on a connection of its own: no operation
// runs while the rest asks.
func (c *Child) state(run *childRun) (childState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st childState
	cc, err := c.dial(ctx, run)
	if err != nil {
		return st, err
	}
	defer cc.conn.Close()
	stop := context.AfterFunc(ctx, func() { cc.conn.Close() })
	defer stop()
	f, err := cc.fsys.Open("state", plan9.OREAD)
	if err != nil {
		return st, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("bad state %q: %w", b, err)
	}
	if st.Tools == nil {
		st.Tools = []string{} // none loaded, not "every tool"
	}
	return st, nil
}

// state serves "state" for the parent's rest.
func (s *Server) state(ctx context.Context, c *ns.Call) ([]byte, error) {
	st := childState{Tools: s.Runner.Tools.Loaded(), Revision: s.Runner.Tools.Revision()}
	if s.Procs != nil {
		st.LastProc, st.Procs = s.Procs.resumeFrom()
	}
	return json.Marshal(st)
}

// spilledIn is how many bytes of cut output dir holds: what a new run's
// calls count against the session's limit from.
func spilledIn(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Running reports whether a process serves the session now (false while
// it rests).
func (c *Child) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run != nil && !isDone(c.run.exited)
}
