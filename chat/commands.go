package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"ollie/internal/termsafe"
)

const usage = `commands:
  /help            this list
  /model [NAME]    the agent's model, or switch it
  /profile [NAME]  the agent's profile, or switch it
  /plan            the agent's plan
  /stats           turns and tokens
  /expand [N]      the whole output of the last turn's tool calls (or the Nth)
  /clear           forget the conversation (the agent's history)
  /exit            leave (so do ^D, and ^C twice)
A line ending in \ goes on on the next; a paste is one prompt, sent with the
Enter after it. ^C stops the running turn; ^C again, or ^C at an empty prompt twice, leaves.
`

// command runs a /command.
func (ch *chat) command(ctx context.Context, words []string) (bool, int) {
	arg := strings.Join(words[1:], " ")
	ctl := func(req string) {
		reply, err := ch.ctl.RdWr(ctx, ch.t.dir+"/ctl", []byte(req))
		if ch.redial(err) {
			reply, err = ch.ctl.RdWr(ctx, ch.t.dir+"/ctl", []byte(req))
		}
		if err != nil {
			ch.say("[" + serverWords(err) + "]")
			return
		}
		ch.say(termsafe.Text(strings.TrimRight(string(reply), "\n")))
	}
	switch words[0] {
	case "/help":
		ch.say(strings.TrimRight(usage, "\n"))
	case "/exit", "/quit":
		return true, exitOK
	case "/model":
		ctl(strings.TrimSpace("model " + arg))
	case "/profile":
		if arg == "" {
			var cfg struct{ Profile string }
			if b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/cfg"); err == nil && json.Unmarshal(b, &cfg) == nil {
				ch.say(termsafe.Line(cfg.Profile))
			}
			return false, exitOK
		}
		ctl("agent " + arg)
	case "/plan":
		b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/plan")
		if err != nil {
			ch.say("[" + serverWords(err) + "]")
		} else if strings.TrimSpace(string(b)) == "" {
			ch.say("(no plan)")
		} else {
			ch.say(termsafe.Text(strings.TrimRight(string(b), "\n")))
		}
	case "/stats":
		s := ch.stats(ctx)
		turns := "turns"
		if s.Turns == 1 {
			turns = "turn"
		}
		line := fmt.Sprintf("%d %s · %d tokens in, %d out", s.Turns, turns, s.PromptTokens, s.CompletionTokens)
		if s.LastError != "" {
			line += " · last error: " + termsafe.Field(s.LastError, 200)
		}
		ch.say(line)
	case "/clear":
		ctl("clear")
	case "/expand":
		ch.expand(ctx, arg)
	default:
		ch.say("[unknown command " + termsafe.Line(words[0]) + "; /help lists them]")
	}
	return false, exitOK
}

// expand shows the whole output of the last turn's tool calls, or of the
// nth of them.
func (ch *chat) expand(ctx context.Context, arg string) {
	b, err := ch.ctl.ReadAll(ctx, ch.t.dir+"/log")
	if err != nil {
		ch.say("[" + serverWords(err) + "]")
		return
	}
	type msg struct {
		Role, Content, Name string
	}
	var results []msg
	for _, l := range strings.Split(string(b), "\n") {
		var m msg
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		switch m.Role {
		case "user":
			results = nil // a new turn
		case "tool":
			results = append(results, m)
		}
	}
	if len(results) == 0 {
		ch.say("(the last turn called no tool)")
		return
	}
	for i, r := range results {
		if arg != "" && arg != strconv.Itoa(i+1) {
			continue
		}
		ch.say(fmt.Sprintf("── %d. %s", i+1, termsafe.Line(r.Name)))
		ch.say(termsafe.Text(strings.TrimRight(r.Content, "\n")))
	}
}
