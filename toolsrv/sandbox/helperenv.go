//go:build !race

package sandbox

// runtimeEnv is what a helper's own runtime is given: GOMAXPROCS=1 (fewer
// threads to start), nothing of its parent's.
func runtimeEnv() []string { return []string{"GOMAXPROCS=1"} }
