package toolsrv

import (
	"fmt"

	"ollie/internal/paths"
)

// A Caller is who a call runs for. olliesrv fills it in from the agent
// that made the call, and toolsrv takes it as given: only its parent holds
// the secret that lets anyone call.
type Caller struct {
	Agent string `json:"agent,omitempty"`
	// Token is the agent's capability for the namespace. The tool gets it
	// as OLLIE_AGENT_TOKEN, and presenting it is how the tool acts as its
	// agent there, and as no one else.
	Token string `json:"token,omitempty"`
	// Cwd is the agent's directory: the call's working directory and the
	// sandbox's {CWD}. It must lie within the session's (Runner.Cwd); ""
	// means the session's.
	Cwd string `json:"cwd,omitempty"`
	// SessionName and AgentName are the session's and the agent's names
	// when the call is made, for a person to read in an approval; the IDs
	// are what decide.
	SessionName string `json:"session_name,omitempty"`
	AgentName   string `json:"agent_name,omitempty"`
}

// caller checks c against the session and fills in what it leaves out.
// Its error is for the model.
func (r *Runner) caller(c Caller) (Caller, error) {
	if c.Cwd == "" || c.Cwd == r.Cwd {
		c.Cwd = r.Cwd
		return c, nil
	}
	cwd, err := paths.Within(c.Cwd, r.Cwd)
	if err != nil {
		return c, fmt.Errorf("not run: the agent's directory must lie within its session's: %w", err)
	}
	c.Cwd = cwd
	return c, nil
}
