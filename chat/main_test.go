package chat_test

import (
	"testing"

	"ollie/internal/nstest"
)

// The tests start a daemon in this process (host.Start): the test binary
// is then what it re-executes as a session's toolsrv and sandbox helper.
func TestMain(m *testing.M) { nstest.Main(m) }
