package host

// callerNames returns the names of a session and one of its agents as they
// are when asked (either may be renamed), for the approvals its calls need.
func (n *namespace) callerNames(session, agentID string) func() (string, string) {
	return func() (s, a string) {
		if ss, ok := n.sessions.Lookup(session); ok {
			s = ss.Name()
		}
		if e := n.agents.get(agentID); e != nil {
			a = e.Name()
		}
		return s, a
	}
}
