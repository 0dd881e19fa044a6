package appliance

// SetIntn makes s draw MaxStartups' chances from intn rather than at
// random. It must be called before Serve.
func SetIntn(s *Server, intn func(n int) int) { s.intn = intn }
