package keeper

import (
	"testing"
	"time"
)

// Which daemons systemd runs (and restarts): the last line of
// /proc/PID/cgroup of one started with INVOCATION_ID set.
func TestSystemdUnit(t *testing.T) {
	for _, tc := range []struct{ cgroup, unit string }{
		{"0::/user.slice/user-1000.slice/user@1000.service/app.slice/olliesrv-ssh.service\n", "olliesrv-ssh.service"},
		{"0::/system.slice/ollie.service", "ollie.service"},
		{"0::/user.slice/user-1000.slice/session-3.scope", ""},
		{"0::/user.slice/user-1000.slice/user@1000.service", ""},
		{"0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope", ""},
		{"0::/", ""},
		{"", ""},
		{"12:pids:/system.slice/ssh.service", "ssh.service"}, // v1: the line is still a unit's
		{"0::/x/\x1b[31mevil.service", "\\x1b[31mevil.service"},
	} {
		if got := SystemdUnit(tc.cgroup); got != tc.unit {
			t.Errorf("SystemdUnit(%q) = %q, want %q", tc.cgroup, got, tc.unit)
		}
	}
}

// What status says of a host's daemon.
func TestRestartsNote(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		d    daemonState
		want string
	}{
		{daemonState{}, ""},
		{daemonState{restarts: 1, cause: "olliesrv (pid 7) died without shutting down", at: at},
			"olliesrv started again 1 time, last at 12:04:05: olliesrv (pid 7) died without shutting down"},
		{daemonState{restarts: 4, cause: "c", at: at, loop: true, notBefore: time.Now().Add(16 * time.Second)},
			"olliesrv started again 4 times, last at 12:04:05: c; in a crash loop, next start in 16s"},
		{daemonState{restarts: 4, cause: "c", at: at, loop: true, notBefore: time.Now().Add(-time.Second)},
			"olliesrv started again 4 times, last at 12:04:05: c"},
		{daemonState{supervisor: "olliesrv-ssh.service"}, "systemd (olliesrv-ssh.service) restarts olliesrv here, not the keeper"},
		{daemonState{stopped: true, restarts: 2, cause: "c", at: at},
			"olliesrv shut down on the host; the keeper does not start it (the next ollie -H or deploy does); olliesrv started again 2 times, last at 12:04:05: c"},
	} {
		h := &heldHost{daemon: tc.d}
		if got := h.restartsNote(); got != tc.want {
			t.Errorf("restartsNote(%+v) =\n%q, want\n%q", tc.d, got, tc.want)
		}
	}
}
