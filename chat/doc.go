// Package chat is "ollie chat": talking to an agent the way people talk to
// Claude Code or Codex, over nothing but the namespace. It writes prompts
// to the agent's prompt file, follows its chat stream, waits on its state
// and stats, and answers the approvals its calls wait for in bypass/pending;
// it adds no file of its own.
//
// It trusts the server it dials no further than the shell does: every byte
// of the host's text is made safe (internal/termsafe) before the terminal
// sees it.
package chat
