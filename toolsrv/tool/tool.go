// Package tool is the contract between the agent loop and the tool runner:
// how a tool is declared to a model (FunctionDecl), how long its results
// stay verbatim (Tier), what a call may touch and so which calls may run
// together (Scope, Batches), and what a call or a background process
// answers (Result, ProcPoll).
//
// It is ollie's tailcfg: a leaf that both sides import, so that the loop
// speaks to the session's tools without linking the runner that serves
// them (9P, Landlock, the approval broker). It imports nothing of ollie's
// and only the standard library; keep it that way.
//
// These types cross the toolsrv socket as JSON; a field's name and tag are
// part of that wire format.
package tool

import (
	"encoding/json"
	"time"
)

// Tier is how long a tool's results stay verbatim in an agent's history.
type Tier string

const (
	TierHot  Tier = "hot"  // kept verbatim
	TierWarm Tier = "warm" // summarized on compaction
	TierCold Tier = "cold" // collapsed at once
)

// FunctionDecl is how a tool is shown to a model, with what the agent loop
// needs to schedule and keep its calls.
type FunctionDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Scope       string          `json:"scope"`              // read, write or global
	ScopeArg    string          `json:"scopeArg,omitempty"` // for write: the path argument
	Tier        Tier            `json:"tier"`
	ReplaySafe  bool            `json:"replaySafe,omitempty"`
}

// CallScope is the scope of a call of the declared tool with args.
func (d FunctionDecl) CallScope(args json.RawMessage, cwd string) Scope {
	kind, _ := ParseScopeKind(d.Scope)
	return ScopeOf(kind, d.ScopeArg, args, cwd)
}

// A Result is the outcome of one call, in the words the model reads.
type Result struct {
	Tool     string
	Output   string          // stdout on success; the reason and both streams on failure
	Content  json.RawMessage `json:",omitempty"` // the tool's {"content": [...]} blocks, passed through
	Failed   bool
	ExitCode int // -1 when the tool did not run to an exit
	Cut      int64
	Spill    string // the file holding the whole output when some was cut
	Elapsed  time.Duration
	Sandbox  string // the profile the call ran under, or "none"
}

// ProcPoll is what toolsrv's proc/{id}/poll answers.
type ProcPoll struct {
	Status string `json:"status"` // running, or how it ended
	Next   int64  `json:"next"`   // the offset to poll from next
	Data   string `json:"data"`   // output from the offset asked
	Ended  bool   `json:"ended"`  // the process exited and all its output is in
}
