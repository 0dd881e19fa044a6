package keeper

import "testing"

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
