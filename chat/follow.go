package chat

// What the person sees of the conversation coming in: its last turns,
// then the chat stream as it grows, followed again across daemon restarts.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"9fans.net/go/plan9"

	"ollie/internal/termsafe"
	"ollie/ns/client"
)

// showLog shows the last turns of the conversation, for a person who
// comes back to it.
func (ch *chat) showLog(ctx context.Context) {
	b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/log")
	if err != nil || len(b) == 0 {
		return
	}
	type msg struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"tool_calls"`
		Name string `json:"name"`
	}
	var msgs []msg
	for _, l := range strings.Split(string(b), "\n") {
		var m msg
		if json.Unmarshal([]byte(l), &m) == nil && m.Role != "" {
			msgs = append(msgs, m)
		}
	}
	// From the third last prompt on.
	from, users := 0, 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			if users++; users == 3 {
				from = i
				break
			}
		}
	}
	if len(msgs) == 0 {
		return
	}
	if from > 0 {
		ch.say(fmt.Sprintf("[%d earlier messages; the last turns:]", from))
	}
	for _, m := range msgs[from:] {
		switch m.Role {
		case "user":
			ch.say("› " + termsafe.Text(m.Content))
		case "assistant":
			if m.Content != "" {
				ch.v.Write([]byte(m.Content + "\n"))
				ch.v.endTurn()
			}
			for _, c := range m.ToolCalls {
				ch.v.Write([]byte("→ " + c.Name + " " + string(c.Args) + "\n"))
			}
		case "tool":
			ch.v.Write([]byte("← " + m.Name + ": " + firstLine(m.Content) + "\n"))
		}
	}
	ch.say("──")
}

func firstLine(s string) string {
	l, rest, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if rest != "" {
		l += " …"
	}
	return l
}

// follow shows the chat stream from what comes next, until the person
// leaves; a lost connection is dialled again, and a restarted daemon
// said so.
func (ch *chat) follow(ctx context.Context, off int64) {
	daemon := ch.daemonID(ctx, ch.ctl)
	tail := &tailWriter{w: shownWriter{ch}}
	for ctx.Err() == nil {
		c, err := ch.opt.Dial()
		if err == nil {
			if d := ch.daemonID(ctx, c); d != daemon && daemon != "" && d != "" {
				// The new daemon's stream is the old one up to its last
				// record, then what came since: go on from where we were,
				// or from the end of what was put back when we had shown
				// more (text streamed and never recorded). Nothing is
				// shown twice, and nothing the new daemon wrote is missed.
				ch.say("[olliesrv restarted; following the agent again]")
				daemon = d
				var s stats
				if b, err := c.ReadAll(ctx, ch.t.dir+"/stats"); err == nil && json.Unmarshal(b, &s) == nil && off >= 0 {
					// After two restarts or more the offset is the
					// wrong stream's: find what was shown last in what
					// was put back, and go on after it.
					if at, ok := resync(ctx, c, ch.t.dir+"/chat", int64(s.ChatRestored), tail.last()); ok {
						off = at
					} else {
						off = min(off, int64(s.ChatRestored))
					}
				} else {
					off = -1
				}
			}
			if off < 0 {
				if off, err = c.Size(ctx, ch.t.dir+"/chat"); err != nil {
					off = -1
				}
			}
			if off >= 0 {
				ch.shown.Store(off)
			}
			off, err = c.FollowFrom(ctx, ch.t.dir+"/chat", off, tail)
			c.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			ch.say("[the agent was stopped for good]")
			return
		}
		ch.say("[lost the connection to olliesrv (" + serverWords(err) + "); trying again]")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// shownWriter counts what the follower shows of the chat stream.
type shownWriter struct{ ch *chat }

func (w shownWriter) Write(p []byte) (int, error) {
	n, err := w.ch.v.Write(p)
	w.ch.shown.Add(int64(n))
	select {
	case w.ch.moved <- struct{}{}:
	default:
	}
	return n, err
}

// tailWriter keeps the last bytes written through it.
type tailWriter struct {
	w    io.Writer
	tail []byte
}

// tailKept is how much of what was shown last a follower looks for in a
// new daemon's stream: enough to be the chat's own, not a common line.
const tailKept = 512

func (t *tailWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.tail = append(t.tail, p[:n]...)
	if len(t.tail) > tailKept {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-tailKept:]...)
	}
	return n, err
}

func (t *tailWriter) last() []byte { return t.tail }

// resync finds in the first restored bytes of the stream name where what
// was shown (tail) ends, and returns the offset after it. A tail that ends
// in text the old daemon streamed and never recorded is not in the
// restored stream: its lines are dropped from the end until what is left
// is found, or too little is left to be the chat's own.
func resync(ctx context.Context, c *client.Conn, name string, restored int64, tail []byte) (int64, bool) {
	const window = 256 << 10
	if restored <= 0 || len(tail) == 0 {
		return 0, false
	}
	f, err := c.Open(ctx, name, plan9.OREAD)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	start := max(0, restored-window)
	buf := make([]byte, restored-start)
	for n := 0; n < len(buf); {
		m, err := f.ReadAt(ctx, buf[n:], start+int64(n))
		if m <= 0 || err != nil {
			buf = buf[:n]
			break
		}
		n += m
	}
	return resumeAt(buf, start, tail)
}

// resumeAt is resync's search: buf is the restored stream from start.
func resumeAt(buf []byte, start int64, tail []byte) (int64, bool) {
	for t := tail; len(t) >= 32; {
		if i := bytes.LastIndex(buf, t); i >= 0 {
			return start + int64(i+len(t)), true
		}
		j := bytes.LastIndexByte(t[:len(t)-1], '\n')
		if j < 0 {
			break
		}
		t = t[:j+1]
	}
	return 0, false
}

// daemonID tells one running olliesrv from the next: its pid and start.
func (ch *chat) daemonID(ctx context.Context, c *client.Conn) string {
	b, err := c.ReadAll(ctx, "status")
	if err != nil {
		return ""
	}
	var pid, started string
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "pid":
			pid = v
		case "started":
			started = v
		}
	}
	return pid + "@" + started
}
