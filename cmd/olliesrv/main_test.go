package main

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
	os.Exit(m.Run())
}
