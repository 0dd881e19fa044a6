package olliesrv

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"ollie/internal/nstest"
)

// TestStartRace: several olliesrv start at once (the keeper restarting a
// dead daemon while a person types ollie) all succeed, and one daemon
// serves: a start that loses the race for the lock reports the winner's.
func TestStartRace(t *testing.T) {
	srv, _ := binaries(t)
	dir := nstest.ShortTempDir(t)
	env := append(os.Environ(), "NAMESPACE="+dir, "XDG_STATE_HOME="+t.TempDir(), "OLLIE_TOOLS_PATH="+t.TempDir())
	const n = 4
	outs := make([]string, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(srv, "start")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			outs[i] = string(out)
			if ee, ok := err.(*exec.ExitError); ok {
				codes[i] = ee.ExitCode()
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		cmd := exec.Command(srv, "stop")
		cmd.Env = env
		cmd.Run()
	})
	pids := map[string]bool{}
	for i := range n {
		if codes[i] != 0 {
			t.Errorf("start %d exited %d: %s", i, codes[i], outs[i])
			continue
		}
		f := strings.Fields(outs[i])
		pids[f[len(f)-1]] = true
	}
	if len(pids) != 1 {
		t.Errorf("the starts report %d daemons, want one: %q", len(pids), outs)
	}
}
