package remote

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"ollie/internal/sshlab"
)

// askThroughGate runs a deployed tool on host with bypass, as an agent's
// call would be run: the host's olliesrv asks its approval gate, which
// relays the request to this desktop over the socket the keeper forwards,
// with the key only the daemon was given. A test cannot ask over that
// socket itself: the desktop closes a request without the key unanswered.
// It returns what the tool printed, and whether it ran (was approved).
func askThroughGate(t *testing.T, l *sshlab.Lab, host, tool, args string) (string, bool) {
	t.Helper()
	args = strings.TrimSuffix(strings.TrimSpace(args), "}")
	if !strings.HasSuffix(args, "{") {
		args += ","
	}
	args += `"bypass":true}`
	cmd := l.SSH(host, ".local/share/ollie/current/olliesrv tools run "+tool+" "+shellQuote(args))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err.Error(), false
	}
	// Nobody answering would keep it waiting for the gate's timeout.
	stop := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	stop.Stop()
	return out.String(), err == nil && !strings.Contains(out.String(), "not approved")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
