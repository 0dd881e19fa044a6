package olliesrv

import (
	"testing"

	"ollie/internal/nstest"
)

func TestMain(m *testing.M) { nstest.Main(m) }
