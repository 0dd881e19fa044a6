// Package wire is what an agent's files say, for the processes that read
// them without running agents: the stats file (Stats), the state file's
// words and the prompt a session's goal gives (GoalPrompt). A fleet run,
// the Ansible modules and the chat read these from a host's namespace;
// importing this package links none of the agent engine or its model
// client.
package wire

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
