package toolsrv

import (
	"encoding/json"

	"ollie/toolsrv/tool"
)

// Scope gives the scope of a call of t with the arguments args (dispatch
// flags may still be in them), relative paths taken against cwd; see
// tool.ScopeOf.
func (t *Tool) Scope(args json.RawMessage, cwd string) tool.Scope {
	return tool.ScopeOf(t.ScopeKind, t.ScopeArg, args, cwd)
}
