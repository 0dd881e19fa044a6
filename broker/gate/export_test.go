package gate

// ParkedWaiters is how many requests wait on parked ones, identical ones
// included: for the gate's tests, which are package broker_test.
func ParkedWaiters(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, p := range g.pending {
		n += p.waiters
	}
	return n
}
