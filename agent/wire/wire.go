// Package wire is what an agent's files say, for the processes that read
// them without running agents: the stats file (Stats), the state file's
// words, the prompt a session's goal gives (GoalPrompt), the agent a goal
// runs (GoalAgent, NewAgent) and its last answer in its log
// (LastAnswer). A fleet run, the Ansible modules and the chat read these
// from a host's namespace; importing this package links none of the
// agent engine or its model client.
package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"ollie/ns/words"
)

// Agent states, as the state file shows them.
const (
	StateIdle     = "idle"
	StateThinking = "thinking"
	StateCalling  = "calling"
	StatePaused   = "paused"
	StateClosed   = "closed"
)

// Stats summarises the agent's use of the model.
type Stats struct {
	Turns            int    `json:"turns"` // prompts run to their end
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	Messages         int    `json:"messages"`
	LastError        string `json:"last_error,omitempty"`
	// State and Queued are read with the counts, in one step: a client
	// that sends a prompt knows how many turns end before its own.
	State  string `json:"state"`
	Queued int    `json:"queued"` // prompts waiting to run
	// Steps are the model's replies and ToolCalls the calls in them, since
	// the daemon started (as Turns and the tokens); Running names the
	// tools that run now. A fleet run's live view and results read them.
	Steps     int    `json:"steps"`
	ToolCalls int    `json:"tool_calls"`
	Running   string `json:"running,omitempty"`
	// ContextWindow is the model's context window in tokens, as the
	// backend gave it at the last reply (for Ollama the num_ctx ollie
	// sets), and PromptTokensLast the size of that reply's prompt: how
	// full the window was. The loop compacts past half. 0 is unknown.
	ContextWindow    int `json:"context_window"`
	PromptTokensLast int `json:"prompt_tokens_last"`
	// ChatRestored is how much of the chat stream a restart of olliesrv
	// put back (Resume): the stream of the daemon before, up to its last
	// record. A follower that had shown more goes on from here.
	ChatRestored int `json:"chat_restored,omitempty"`
}

// GoalPrompt is the prompt a session's goal gives its first agent; the
// agent's chat echoes it, and a watcher of the chat (the fleet's live
// view) tells it from the agent's own words by it.
func GoalPrompt(goal, session string) string {
	return "The session's goal:\n" + goal + "\n\nWork towards it. When it is met, write complete to session/" + session + "/goalstatus (or blocked, with the reason in your answer)."
}

// GoalAgent is the name of the one agent a goal's session runs, a fleet
// run's on each host and an Ansible goal's alike.
const GoalAgent = "a"

// NewAgent is what agent/new is written to make an agent named name with
// a profile and a model ("" for the defaults), values quoted as the
// host's parser takes them.
func NewAgent(name, profile, model string) string {
	req := "name=" + words.Quote(name)
	if profile != "" {
		req += " profile=" + words.Quote(profile)
	}
	if model != "" {
		req += " model=" + words.Quote(model)
	}
	return req
}

// LastAnswer is the last assistant message with text in an agent's log
// (its JSON lines), trimmed and cut to at most max bytes on a character's
// boundary; "" when there is none.
func LastAnswer(log []byte, max int) string {
	lines := bytes.Split(log, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var m struct{ Role, Content string }
		if json.Unmarshal(lines[i], &m) != nil || m.Role != "assistant" {
			continue
		}
		s := strings.TrimSpace(m.Content)
		if s == "" {
			continue
		}
		if len(s) > max {
			cut := max
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			s = s[:cut]
		}
		return s
	}
	return ""
}
