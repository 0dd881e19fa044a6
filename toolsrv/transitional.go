package toolsrv

import "ollie/toolsrv/tool"

// Transitional (#10): callers move to ollie/toolsrv/tool.
type (
	FunctionDecl = tool.FunctionDecl
	Result       = tool.Result
	ProcPoll     = tool.ProcPoll
	Tier         = tool.Tier
	Scope        = tool.Scope
	ScopeKind    = tool.ScopeKind
)

// Transitional (#10): callers move to ollie/toolsrv/tool.
const (
	TierHot  = tool.TierHot
	TierWarm = tool.TierWarm
	TierCold = tool.TierCold

	ScopeGlobal = tool.ScopeGlobal
	ScopeRead   = tool.ScopeRead
	ScopeWrite  = tool.ScopeWrite
)

// Transitional (#10): callers move to ollie/toolsrv/tool.
var (
	Batches   = tool.Batches
	Conflicts = tool.Conflicts
)
