package ns

import "time"

// Hooks for the tests in package ns_test.

// SetStarted fixes the time stat reports as atime and mtime, so that
// transcripts are stable.
func SetStarted(s *Server, t time.Time) {
	s.init()
	s.started = t
}

// Pending returns the number of requests admitted on s's connections and
// not yet answered.
func Pending(s *Server) int {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		n += c.guard.pending()
	}
	return n
}

// KindFids returns the number of fids held by connections of peers of
// kind k, with the places reserved for walks and attaches in flight.
func KindFids(s *Server, k PeerKind) int {
	s.init()
	return int(s.kindFids[k].Load())
}

// WaitAnswered waits up to d for every request admitted on s's
// connections to be answered, and returns how many still are not. It
// blocks rather than polls, so that a fuzzing run's coverage does not
// depend on how often a poll ran.
func WaitAnswered(s *Server, d time.Duration) int {
	s.init()
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.guard.waitAnswered(d, c.ended)
		n += c.guard.pending()
	}
	return n
}

// KindHeld returns the bytes of unanswered requests of peer kind k.
func KindHeld(s *Server, k PeerKind) int64 {
	s.init()
	return s.kindHeld[k].Load()
}
