package chat

// A turn's end: waiting for it, ^C stopping it, and the line that says
// it is over once its reply has been shown.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"ollie/internal/termsafe"
	"ollie/ns/client"
)

// waitIdle waits until target turns have ended, handling ^C: once stops
// the turn, twice leaves. It reports false when the person left.
func (ch *chat) waitIdle(ctx context.Context, start time.Time, before stats, target int) bool {
	type idle struct {
		s   stats
		end int64 // the chat stream's length once idle
	}
	done := make(chan idle, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// A restarted olliesrv counts turns from 0 again: past a
		// restart, the turn has ended once the agent is idle with
		// nothing queued (the cut turn goes on by itself first).
		daemon, restarted := "", false
		for wctx.Err() == nil {
			c, err := ch.waiterConn()
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			if d := ch.daemonID(wctx, c); daemon == "" {
				daemon = d
			} else if d != "" && d != daemon {
				restarted = true
			}
			var s stats
			b, err := c.ReadAll(wctx, ch.t.dir+"/stats")
			if errors.Is(err, client.ErrConnLost) && wctx.Err() == nil {
				ch.dropWaiter(c)
				continue
			}
			json.Unmarshal(b, &s)
			if s.State == "idle" && (s.Turns >= target && !restarted || restarted && s.Queued == 0) {
				end, err := c.Size(wctx, ch.t.dir+"/chat")
				if err != nil {
					end = 0
				}
				done <- idle{s, end}
				return
			}
			// A turn that ends between this read and statewait's start
			// leaves it waiting for the next change: bound each wait.
			sctx, scancel := context.WithTimeout(wctx, time.Second)
			c.ReadAll(sctx, ch.t.dir+"/statewait")
			scancel()
		}
	}()
	stopped := false
	for {
		select {
		case d := <-done:
			ch.catchUp(ctx, d.end)
			ch.v.endTurn()
			ch.turnLine(start, before, d.s)
			return true
		case p := <-ch.pend:
			ch.approve(ctx, p)
		case <-ch.intr:
			if stopped {
				ch.v.endTurn()
				ch.say("[left; the agent goes on with what it was told to stop]")
				return false
			}
			stopped = true
			ch.ctl.RdWr(ctx, ch.t.dir+"/ctl", []byte("stop"))
			ch.say("[stopping the turn; ^C again leaves]")
		case <-ctx.Done():
			return false
		}
	}
}

// catchUp waits, for a few seconds at most, until the follower has shown
// the chat stream up to end.
func (ch *chat) catchUp(ctx context.Context, end int64) {
	deadline := time.After(3 * time.Second)
	for ch.shown.Load() < end {
		select {
		case <-ch.moved:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// waiterConn is the connection turns are waited on.
func (ch *chat) waiterConn() (*client.Conn, error) {
	ch.wmu.Lock()
	defer ch.wmu.Unlock()
	if ch.waiter == nil {
		c, err := ch.opt.Dial()
		if err != nil {
			return nil, err
		}
		ch.waiter = c
	}
	return ch.waiter, nil
}

// dropWaiter forgets a lost connection, for the next to be dialled.
func (ch *chat) dropWaiter(c *client.Conn) {
	ch.wmu.Lock()
	defer ch.wmu.Unlock()
	if ch.waiter == c {
		c.Close()
		ch.waiter = nil
	}
}

// turnLine says the turn ended: idle, with its time and tokens.
func (ch *chat) turnLine(start time.Time, before, after stats) {
	in, out := after.PromptTokens-before.PromptTokens, after.CompletionTokens-before.CompletionTokens
	line := fmt.Sprintf("── idle · %.1fs · %d tokens in, %d out", time.Since(start).Seconds(), in, out)
	if after.LastError != "" && after.LastError != before.LastError {
		line += " · " + termsafe.Field(after.LastError, 200)
	}
	if ch.term != nil && Styled(os.Stdout) {
		line = "\x1b[2m" + line + "\x1b[0m"
	}
	ch.say(line)
}
