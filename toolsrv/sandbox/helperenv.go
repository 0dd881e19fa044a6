//go:build !race

package sandbox

// helperEnv is a helper's whole environment: GOMAXPROCS=1 for its own
// runtime (fewer threads to start), nothing of its parent's.
func helperEnv() []string { return withNoNS([]string{"GOMAXPROCS=1"}) }
