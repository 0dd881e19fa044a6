//go:build race

package toolsrv

import "os"

// raceGORACE is the GORACE entry a race build's sandbox helpers get, or
// "" when GORACE is not set.
func raceGORACE() string {
	if v, ok := os.LookupEnv("GORACE"); ok {
		return "GORACE=" + v
	}
	return ""
}
