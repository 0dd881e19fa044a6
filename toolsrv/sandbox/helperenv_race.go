//go:build race

package sandbox

import "os"

// runtimeEnv is what a helper's own runtime is given. A race-detector
// build (the tests') passes GORACE on too: its atexit_sleep_ms=0 (make
// test) spares each helper's exit the detector's one-second wait.
func runtimeEnv() []string {
	if v, ok := os.LookupEnv("GORACE"); ok {
		return []string{"GOMAXPROCS=1", "GORACE=" + v}
	}
	return []string{"GOMAXPROCS=1"}
}
