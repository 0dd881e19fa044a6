package host

import (
	"os"
	"testing"

	"ollie/toolsrv"
	"ollie/toolsrv/sandbox"
)

// TestMain lets the test binary be what olliesrv re-executes itself as:
// the sandbox helper and a session's toolsrv.
func TestMain(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	if toolsrv.IsChild() {
		toolsrv.ChildMain()
	}
	// No test may touch the state directory of the person running it.
	// Helper processes inherit the test's choice rather than make their own.
	if os.Getenv("OLLIE_TEST_STATE") != "" {
		os.Exit(m.Run())
	}
	state, err := os.MkdirTemp("", "ollie-test-state")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	os.Setenv("OLLIE_TEST_STATE", state)
	code := m.Run()
	os.RemoveAll(state)
	os.Exit(code)
}
