//go:build race

package sandbox

import "os"

// helperEnv is a helper's whole environment. A race-detector build (the
// tests') passes GORACE on too: its atexit_sleep_ms=0 (make test) spares
// each helper's exit the detector's one-second wait.
func helperEnv() []string {
	if v, ok := os.LookupEnv("GORACE"); ok {
		return withNoNS([]string{"GOMAXPROCS=1", "GORACE=" + v})
	}
	return withNoNS([]string{"GOMAXPROCS=1"})
}
