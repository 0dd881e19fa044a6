package fleet

import (
	"testing"

	"ollie/internal/nstest"
)

// The follow test starts a host's daemon in-process, which re-executes
// the test binary as a session's toolsrv.
func TestMain(m *testing.M) { nstest.Main(m) }
