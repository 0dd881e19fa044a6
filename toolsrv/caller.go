package toolsrv

import (
	"fmt"

	"ollie/toolsrv/sandbox"

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

// checkCwd returns the file the call's directory cwd is, reached without
// a symbolic link, once the session's directory is found to be the one
// it was when the session was made: a directory swapped for a link to
// somewhere else, or moved away and replaced, is refused, naming it.
// The sandbox checks the same again as the tool starts, on the
// descriptor it confines the tool to.
func (r *Runner) checkCwd(cwd string) (sandbox.FileID, error) {
	session, err := sandbox.Identify(r.Cwd)
	if err != nil {
		return session, fmt.Errorf("not run: the session's directory: %w", err)
	}
	r.cwdMu.Lock()
	if r.CwdID == nil {
		r.CwdID = &session
	}
	want := *r.CwdID
	r.cwdMu.Unlock()
	if session != want {
		return session, fmt.Errorf("not run: %s is not the directory it was when the session was made (it was moved or replaced since); make a new session for the directory there now", r.Cwd)
	}
	if cwd == r.Cwd {
		return session, nil
	}
	id, err := sandbox.Identify(cwd)
	if err != nil {
		return id, fmt.Errorf("not run: the agent's directory: %w", err)
	}
	return id, nil
}
