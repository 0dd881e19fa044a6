//go:build race

package ns_test

// raceBuild reports whether the tests run under the race detector, whose
// sync.Pool lets go of what is put in it at random.
const raceBuild = true
