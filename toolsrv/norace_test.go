//go:build !race

package toolsrv

// raceGORACE is "": only a race build passes GORACE to its helpers.
func raceGORACE() string { return "" }
