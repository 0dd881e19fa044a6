package agent

// The changes the namespace makes to a session and its agents, each
// recorded in the session file before it takes effect (SessionLog.Record)
// and read back by Restore with the same type, so the writer and the reader
// cannot disagree on a kind or a field.

// A Change is one recorded change to a session or one of its agents.
type Change interface{ kind() string }

// SessionRenamed: the session's name.
type SessionRenamed struct {
	Name string `json:"name"`
}

// SessionPaused: the session was paused or resumed.
type SessionPaused struct {
	Paused bool `json:"paused"`
}

// GoalSet: the session's goal and its status. A nil Goal keeps the goal
// and sets the status only (goalstatus).
type GoalSet struct {
	Goal   *string `json:"goal,omitempty"`
	Status string  `json:"status"`
}

// AgentRenamed: an agent's name.
type AgentRenamed struct {
	Agent string `json:"agent"`
	Name  string `json:"name"`
}

// AgentKilled: an agent was stopped for good.
type AgentKilled struct {
	Agent string `json:"agent"`
}

// AgentPeered: a peer link between two agents was added or removed.
type AgentPeered struct {
	Agent string `json:"agent"`
	Peer  string `json:"peer"`
	Add   bool   `json:"add"`
}

// AgentToolsSet: the agent's own tool list.
type AgentToolsSet struct {
	Agent string   `json:"agent"`
	Tools []string `json:"tools"`
}

// AgentModelSet: the model the agent talks to.
type AgentModelSet struct {
	Agent string `json:"agent"`
	Model string `json:"model"`
}

// AgentPlanSet: the agent's plan, replaced whole.
type AgentPlanSet struct {
	Agent string `json:"agent"`
	Plan  string `json:"plan"`
}

// AgentProfileSet: the agent's profile, which also resets its own tool list.
type AgentProfileSet struct {
	Agent   string `json:"agent"`
	Profile string `json:"profile"`
}

func (SessionRenamed) kind() string  { return kindSessionName }
func (SessionPaused) kind() string   { return kindSessionPaused }
func (GoalSet) kind() string         { return kindSessionGoal }
func (AgentMeta) kind() string       { return kindAgentNew }
func (AgentRenamed) kind() string    { return kindAgentName }
func (AgentKilled) kind() string     { return kindAgentKill }
func (AgentPeered) kind() string     { return kindAgentPeer }
func (AgentToolsSet) kind() string   { return kindAgentTools }
func (AgentModelSet) kind() string   { return kindAgentModel }
func (AgentPlanSet) kind() string    { return kindAgentPlan }
func (AgentProfileSet) kind() string { return kindAgentProfile }
